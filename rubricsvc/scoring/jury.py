"""Scoring with a jury: a judge config that is a panel of judge configs (``JurySpec``).

Each member (each sample of one, with its own seed) is an ordinary judge config: the selection
is scored with it by ``score``, its judgments and scores stored and cached as any judge's. Then
each (completion, rubric version) gets the jury's score: the members' scores combined (mean,
median, or majority: the share of members scoring at least 0.5), stored under the jury's config
with every member's value, the spread (max - min of their values) and the confidence
(1 - spread, at least 0). The score is masked when a member gave no value (every member must
give one) or when the spread passes the jury's ``max_spread``.

``score_judge`` is the one entry point for a judge that may be a jury: given the process's
``BackendProvider.factory`` it scores a jury with each member's own backend, and any other
judge with its own.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from rubricsvc.backends.base import JudgeBackend
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.config import JudgeSpec, JurySpec
from rubricsvc.judging.failures import empty_counts
from rubricsvc.models import JudgeConfig, ScoreStatus
from rubricsvc.scoring.judge_configs import ensure_judge_config, member_config
from rubricsvc.scoring.scorer import (
    JudgingTally,
    PlannedScore,
    ScoredCompletion,
    ScoreOptions,
    ScoreReport,
    Workload,
    plan_score,
    score,
    score_aggregation,
)
from rubricsvc.scoring.selection import Selection, select_work
from rubricsvc.scoring.store import save_scores

# A judge spec -> a factory of its backend: ``BackendProvider.factory``.
BackendFactories = Callable[[JudgeSpec], Callable[[], JudgeBackend]]
Progress = Callable[[int, int], None]

# A member's score at or above this counts as a vote for the response (``majority``).
MAJORITY_THRESHOLD = 0.5


@dataclass
class JuryScoredCompletion(ScoredCompletion):
    """A jury's score of a completion, with its members' scores and how far apart they are."""

    combine: str = "mean"
    spread: float | None = None  # max - min of the members' values (None: one gave none)
    confidence: float | None = None  # 1 - spread, at least 0
    # [{member, judge, config_hash, value, status, coverage}], one per member (and sample), in
    # order: ``member`` its name in the jury, ``judge`` the stored config's (which another
    # judge of the same settings may have stored first).
    members: list[dict[str, Any]] = field(default_factory=list)


def score_judge(
    session: Session,
    spec: JudgeSpec,
    selection: Selection,
    options: ScoreOptions,
    backends: BackendFactories,
    progress: Progress | None = None,
    checkpoint: Callable[[], None] | None = None,
    judge_row: JudgeConfig | None = None,
    planned: Sequence[PlannedScore] | None = None,
) -> ScoreReport:
    """Score with ``spec``: a jury through its members (``score_jury``), any other judge with
    its own backend (``score``). ``planned``: the run as ``plan_judge`` planned it."""
    if spec.jury is not None:
        return score_jury(
            session, spec, selection, options, backends, progress, checkpoint, judge_row, planned
        )
    run = planned[0] if planned else None
    factory = backends(spec)
    return score(session, spec, selection, options, factory, progress, checkpoint, judge_row, run)


def plan_judge(session: Session, spec: JudgeSpec, selection: Selection) -> list[PlannedScore]:
    """What ``score_judge`` would judge for ``selection``, to pass it as ``planned``: one
    ``plan_score`` per member (and sample) of a jury, else one. Stores new judge configs as
    scoring would; judges nothing."""
    if spec.jury is None:
        return [plan_score(session, spec, selection)]
    members = spec.jury_members()
    return [plan_score(session, m, selection, member_config(session, m)) for m in members]


def planned_workload(planned: Sequence[PlannedScore]) -> Workload:
    """The work of a run ``plan_judge`` planned: every member's."""
    workload = Workload()
    for member in planned:
        workload.add(member.workload())
    return workload


def score_jury(
    session: Session,
    spec: JudgeSpec,
    selection: Selection,
    options: ScoreOptions,
    member_factory: BackendFactories,
    progress: Progress | None = None,
    checkpoint: Callable[[], None] | None = None,
    judge_row: JudgeConfig | None = None,
    planned: Sequence[PlannedScore] | None = None,
) -> ScoreReport:
    """Score the selection with each of the jury's members, then store the jury's scores.
    ``planned``: each member's run as ``plan_judge`` planned it."""
    jury = spec.jury
    if jury is None:
        raise ValidationFailed(f"judge {spec.name!r} is not a jury")
    jury_row = judge_row or ensure_judge_config(session, spec)
    members = spec.jury_members()
    if planned is not None and len(planned) != len(members):
        raise ValueError(f"{len(planned)} planned runs for a jury of {len(members)}")
    rows = (
        [p.judge_row for p in planned]
        if planned is not None
        else [member_config(session, member) for member in members]
    )
    aggregation = jury_aggregation(members, options)
    report = ScoreReport(judge=spec.name, aggregation=aggregation)
    verdicts: list[dict[tuple[int, str], ScoredCompletion]] = []
    for index, (member, row) in enumerate(zip(members, rows, strict=True)):
        member_report = score(
            session,
            member,
            selection,
            options,
            member_factory(member),
            _offset(progress, report.judgments),
            checkpoint,
            judge_row=row,
            planned=planned[index] if planned is not None else None,
        )
        if index == 0:
            report.without_rubric = member_report.without_rubric
        report.add(member_report)
        report.checks += member_report.checks
        for completion_id, tally in member_report.by_completion.items():
            report.by_completion.setdefault(completion_id, JudgingTally()).add(tally)
        verdicts.append({(s.completion_id, s.rubric): s for s in member_report.scores})

    work, _ = select_work(session, selection)
    saved = []
    for completion, version in work:
        key = (completion.id, version.ref)
        scored, values = combine_scores(
            jury,
            [(m.name, r, v.get(key)) for m, r, v in zip(members, rows, verdicts, strict=True)],
        )
        scored.completion_id = completion.id
        scored.completion_external_id = completion.external_id
        scored.prompt_external_id = completion.prompt.external_id
        scored.source = completion.source
        scored.rubric = version.ref
        report.scores.append(scored)
        saved.append(
            {
                **values,
                "completion_id": completion.id,
                "rubric_version_id": version.id,
                "judge_config_id": jury_row.id,
                "aggregation": aggregation,
            }
        )
    save_scores(session, saved)
    if checkpoint:
        checkpoint()
    return report


def jury_aggregation(members: Sequence[JudgeSpec], options: ScoreOptions) -> str:
    """The aggregation a jury's scores are stored under: its members' if they share one (a
    mode with its own, as holistic), else the run's."""
    names = {score_aggregation(member, options) for member in members}
    return names.pop() if len(names) == 1 else options.aggregation


def combine_scores(
    jury: JurySpec, members: Sequence[tuple[str, JudgeConfig, ScoredCompletion | None]]
) -> tuple[JuryScoredCompletion, dict[str, Any]]:
    """The jury's score from its members' (name in the jury, stored config, score; None: no
    score), and the value, coverage, status and details of its row; the caller sets whose
    score it is."""
    entries: list[dict[str, Any]] = [
        {
            "member": name,
            "judge": row.name,
            "config_hash": row.config_hash,
            "value": scored.value if scored else None,
            "status": scored.status if scored else ScoreStatus.MASKED.value,
            "coverage": scored.coverage if scored else 0.0,
        }
        for name, row, scored in members
    ]
    missing = [str(e["member"]) for e in entries if e["value"] is None]
    values = [float(e["value"]) for e in entries if e["value"] is not None]
    # How far apart the members are, when every one of them gave a value.
    spread = max(values) - min(values) if values and not missing else None
    confidence = max(0.0, 1.0 - spread) if spread is not None else None
    reasons = []
    value: float | None
    if missing:
        value, status = None, ScoreStatus.MASKED
        reasons.append(f"jury: no value from {', '.join(missing)} (every member must give one)")
    elif jury.max_spread is not None and spread is not None and spread > jury.max_spread:
        value, status = None, ScoreStatus.MASKED
        reasons.append(
            f"jury: the members disagree (spread {spread:.3f} > max_spread {jury.max_spread:g})"
        )
    else:
        value = combined(jury.combine, values)
        partial = any(e["status"] == ScoreStatus.PARTIAL.value for e in entries)
        status = ScoreStatus.PARTIAL if partial else ScoreStatus.OK
    for name, _, scored in members:
        reasons.extend(f"{name}: {reason}" for reason in (scored.reasons if scored else []))
    failures = empty_counts()
    for _, _, scored in members:
        for name, count in (scored.failures if scored else {}).items():
            failures[name] = failures.get(name, 0) + count
    coverage = min(float(e["coverage"]) for e in entries)
    details = {
        "criteria": [],  # each member's breakdown is in its own score
        "reasons": reasons,
        "failures": failures,
        "members": entries,
        "combine": jury.combine,
        "spread": spread,
        "confidence": confidence,
        "max_spread": jury.max_spread,
    }
    scored_completion = JuryScoredCompletion(
        completion_id=0,
        completion_external_id=None,
        prompt_external_id=None,
        source=None,
        rubric="",
        value=value,
        coverage=coverage,
        status=status.value,
        reasons=reasons,
        criteria=[],
        failures=failures,
        combine=jury.combine,
        spread=spread,
        confidence=confidence,
        members=entries,
    )
    values_row = {"value": value, "coverage": coverage, "status": status.value, "details": details}
    return scored_completion, values_row


def combined(how: str, values: Sequence[float]) -> float:
    """The members' values combined: their mean, median, or the share at or above 0.5."""
    if how == "median":
        return float(statistics.median(values))
    if how == "majority":
        return sum(1 for v in values if v >= MAJORITY_THRESHOLD) / len(values)
    return statistics.fmean(values)


def _offset(progress: Progress | None, before: int) -> Progress | None:
    """A member's progress as the jury's: the earlier members' judgments counted as done."""
    if progress is None:
        return None
    return lambda done, total: progress(before + done, before + total)
