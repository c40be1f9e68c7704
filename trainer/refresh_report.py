"""Judge refreshes in a run's report and in ``rubricsvc train compare``, redrawn from the run's
logs alone (refreshes.jsonl for each refresh, samples.jsonl for the proxy's agreement with gold
around it): the labels used, the gate's figures with their intervals, the decision, and whether
the proxy ranks a rollout group's completions more as gold does after the refresh than before.

The agreement is split at the refresh steps: before a refresh, the steps since the one before
it (or the start); after it, the steps up to the next (or the end). The completions of a step
are scored by the judge that was current then, so after a swap the "after" side is the new
judge's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainer.agreement import AgreementChange, agreement_change

HEADER = (
    "| step | labels (completions, prompts) | one-valued criteria, labels met | held out "
    "(prompts, labels) | current judge "
    "agrees [95%] | student agrees [95%] | gain [95%] | decision | swapped | judge after "
    "| proxy-gold agreement in groups before / after | after - before [95%] | took |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def periods(
    refreshes: Sequence[dict[str, Any]], samples: Sequence[dict[str, Any]]
) -> list[tuple[dict[str, Any], AgreementChange]]:
    """Each refresh with the proxy's within-group agreement before and after it."""
    steps = [int(r["step"]) for r in refreshes]
    found = []
    for index, refresh in enumerate(refreshes):
        start = steps[index - 1] if index else -1
        stop = steps[index + 1] if index + 1 < len(steps) else None
        before = [s for s in samples if start < int(s["step"]) <= steps[index]]
        after = [
            s
            for s in samples
            if steps[index] < int(s["step"]) and (stop is None or int(s["step"]) <= stop)
        ]
        found.append((refresh, agreement_change(before, after)))
    return found


def _figure(value: Any, interval: Any) -> str:
    if value is None:
        return "-"
    bounds = f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else ""
    return f"{value:.2f}{bounds}"


def _signed(value: float | None, interval: tuple[float, float] | None) -> str:
    if value is None:
        return "-"
    bounds = f" [{interval[0]:+.2f}, {interval[1]:+.2f}]" if interval else ""
    return f"{value:+.2f}{bounds}"


def _row(refresh: dict[str, Any], change: AgreementChange) -> str:
    gate = refresh.get("gate") or {}
    split = refresh.get("split") or {}
    base, student = gate.get("base") or {}, gate.get("student") or {}
    labelled = (
        f"{refresh.get('labels', '-')} ({refresh.get('completions', '-')}, "
        f"{refresh.get('prompts', '-')})"
    )
    balance = refresh.get("label_balance")
    spread = (
        f"{balance['one_valued_criteria']} of {balance['criteria']}, {balance['met_share']:.2f}"
        if balance
        else "-"  # a run logged before refreshes recorded it
    )
    held = f"{split.get('test_prompts', '-')}, {split.get('test_targets', '-')}" if split else "-"
    after = refresh.get("judge_after") or {}
    decision = refresh.get("decision") or f"skipped: {refresh.get('skipped', '?')}"
    seconds = (refresh.get("seconds") or {}).get("total")
    took = f"{seconds:.0f} s" if seconds is not None else "-"
    agreements = (
        f"{_figure(change.before.agreement, change.before.interval)} / "
        f"{_figure(change.after.agreement, change.after.interval)}"
    )
    return (
        f"| {refresh['step']} | {labelled} | {spread} | {held} "
        f"| {_figure(base.get('agreement'), base.get('agreement_ci'))} "
        f"| {_figure(student.get('agreement'), student.get('agreement_ci'))} "
        f"| {_signed(gate.get('gain'), gate.get('gain_ci'))} | {decision} "
        f"| {'yes' if refresh.get('swapped') else 'no'} "
        f"| {after.get('judge', '?')} ({str(after.get('config_hash', ''))[:12]}) "
        f"| {agreements} | {_signed(change.difference, change.interval)} | {took} |"
    )


def refresh_section(
    refreshes: Sequence[dict[str, Any]],
    samples: Sequence[dict[str, Any]],
    title: str = "Judge refreshes",
) -> list[str]:
    """The report's lines on a run's refreshes (none when it made none)."""
    if not refreshes:
        return []
    lines = [
        f"## {title}",
        "",
        "Each refresh: the labels its student learned from (and how many of their criteria got "
        "one value on every completion, and the share of labels that say met: where every "
        "criterion is one-valued, a judge that ignores the completion agrees with all of them), "
        "the promotion gate's figures on the "
        "labelled prompts held out of its training (agreement with the labels, the gain of the "
        "student over the current judge; 95% intervals resampling prompts), whether the judge "
        "was swapped, and the proxy's within-group agreement with gold over the steps before "
        "and after it (95% intervals resampling groups).",
        "",
        HEADER,
    ]
    found = periods(refreshes, samples)
    lines += [_row(refresh, change) for refresh, change in found]
    reasons = [
        f"- step {r['step']}: {'; '.join(r.get('reasons') or [r.get('skipped', '')])}"
        for r in refreshes
    ]
    return [*lines, "", "Why each was decided so:", "", *reasons, ""]
