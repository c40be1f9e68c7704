"""Evolving rubrics in a run's report and in ``rubricsvc train compare``, from the run's
logged ``evolution/*`` metrics alone (trainer/evolution.py logs them every step).

Per run: the steps at which prompts evolved, the evolved criteria active at the last of them,
the criteria added, pruned and refused in all, the generator calls that failed (of all
calls), and the means over the run of the persistent and evolved parts of the reward and of
how often the two order a group's rollouts the same way; and, where the run's samples record
each completion's two parts, each part's within-group agreement with gold beside the reward's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainer.agreement import agreement_text, group_agreement

HEADER = (
    "| run | steps evolved | active at the end | added | pruned | refused "
    "| generator failures (of calls) | persistent reward | evolved reward "
    "| persistent and evolved agree in direction |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def _values(metrics: Sequence[dict[str, Any]], key: str) -> list[float]:
    return [float(row[key]) for row in metrics if row.get(key) is not None]


def _mean(values: Sequence[float]) -> str:
    return f"{sum(values) / len(values):.3f}" if values else "-"


def evolved(metrics: Sequence[dict[str, Any]]) -> bool:
    """Whether the run logged any evolution step."""
    return bool(_values(metrics, "evolution/active"))


def evolution_row(name: str, metrics: Sequence[dict[str, Any]]) -> str:
    """One table row (see ``HEADER``) of a run's evolution."""
    active = _values(metrics, "evolution/active")
    calls = _values(metrics, "evolution/prompts")
    failures = sum(_values(metrics, "evolution/generator_failures"))
    # Runs logged before evolution/prompts existed: the calls are not known.
    of_calls = f" of {sum(calls):.0f}" if calls else ""
    return (
        f"| {name} | {len(active)} | {active[-1]:.0f} "
        f"| {sum(_values(metrics, 'evolution/new')):.0f} "
        f"| {sum(_values(metrics, 'evolution/pruned')):.0f} "
        f"| {sum(_values(metrics, 'evolution/refused')):.0f} "
        f"| {failures:.0f}{of_calls} "
        f"| {_mean(_values(metrics, 'evolution/persistent_reward'))} "
        f"| {_mean(_values(metrics, 'evolution/evolved_reward'))} "
        f"| {_mean(_values(metrics, 'evolution/direction_agreement'))} |"
    )


PARTS_HEADER = "| run | reward | persistent part | evolved part |\n| --- | --- | --- | --- |"


def parts_agreement_lines(runs: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> list[str]:
    """The within-group agreement with gold of the reward and of each of its two parts, for
    the runs (name, samples) whose samples record the parts; none else."""
    rows = [
        f"| {name} | "
        + " | ".join(
            agreement_text(group_agreement(samples, field))
            for field in ("rubric_reward", "persistent_reward", "evolved_reward")
        )
        + " |"
        for name, samples in runs
        if any(s.get("evolved_reward") is not None for s in samples)
    ]
    if not rows:
        return []
    return [
        "Within a rollout group, the share of the pairs gold tells apart that each orders the "
        "same way (0.5: at random; 95% interval resampling groups; a part's ties count half):",
        "",
        PARTS_HEADER,
        *rows,
        "",
    ]


def evolution_section(
    runs: Sequence[tuple[str, Sequence[dict[str, Any]], Sequence[dict[str, Any]]]],
) -> list[str]:
    """A Markdown section over the runs (name, metrics, samples) that evolved rubrics; none
    else."""
    rows = [evolution_row(name, metrics) for name, metrics, _ in runs if evolved(metrics)]
    if not rows:
        return []
    parts = parts_agreement_lines(
        [(name, samples) for name, metrics, samples in runs if evolved(metrics)]
    )
    return [
        "## Evolving rubrics",
        "",
        "Summed over the steps (active: summed over the last evolution step's prompts); the "
        "rewards and the agreement are means over the logged steps. The criteria themselves: "
        "each run directory's `evolution.json`, or `rubricsvc rubrics evolution show RUN` on "
        "the run's database.",
        "",
        HEADER,
        *rows,
        "",
        *parts,
    ]
