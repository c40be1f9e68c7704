"""Scoring completions against rubric versions with one judge config.

1. select (completion, rubric version) pairs;
2. expand them into judgments, each with a content key; check criteria are computed;
3. read every key already judged ok from the database (the cache);
4. judge the rest through the backend, in chunks, storing each chunk as it completes;
5. aggregate each completion's values into a score: failures of the infrastructure or the
   judge are masked, a response that cannot be judged (it overflows the judge's context)
   gets the criterion's worst value unless the options say to mask it too.

The caller owns the transaction; ``checkpoint`` (e.g. ``session.commit``) is called after
each chunk so a long run keeps what it has done if it is interrupted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from rubricsvc.hashing import content_hash
from rubricsvc.judging.aggregation import DEFAULT_MIN_COVERAGE, Outcome, Status, aggregate
from rubricsvc.judging.backends.base import JudgeBackend
from rubricsvc.judging.checks import run_check
from rubricsvc.judging.config import JudgeSpec, VerdictMode
from rubricsvc.judging.failures import (
    DEFAULT_JUDGE_FAILURE_ALARM,
    FailureClass,
    ResponseFailurePolicy,
    empty_counts,
    worst_value,
)
from rubricsvc.judging.modes import (
    BUILDERS,
    REFERENCE_SCALE_MAX,
    CompletionView,
    CriterionView,
    Item,
    holistic_calls,
)
from rubricsvc.models import (
    Completion,
    Criterion,
    CriterionKind,
    Judgment,
    JudgmentStatus,
    RubricVersion,
)
from rubricsvc.scoring import keys
from rubricsvc.scoring.executor import CallExecutor, JudgeResult
from rubricsvc.scoring.judge_configs import ensure_judge_config
from rubricsvc.scoring.selection import Selection, select_work
from rubricsvc.scoring.store import judgments_by_key, save_judgments, save_scores

HOLISTIC = "holistic"


@dataclass(frozen=True)
class ScoreOptions:
    aggregation: str = "rar"
    min_coverage: float = DEFAULT_MIN_COVERAGE
    gate_cap: float | None = 0.0
    chunk_judgments: int = 256  # judgments sent to the backend between checkpoints
    # A response the judge cannot judge because of its content: its worst value, or masked.
    response_failure: ResponseFailurePolicy = ResponseFailurePolicy.WORST
    # Judge-caused failures above this share of a run's judgments raise an alarm.
    judge_failure_alarm: float = DEFAULT_JUDGE_FAILURE_ALARM


@dataclass
class ScoredCompletion:
    completion_id: int
    completion_external_id: str | None
    prompt_external_id: str | None
    source: str | None
    rubric: str
    value: float | None
    coverage: float
    status: str
    reasons: list[str]
    criteria: list[dict[str, Any]]
    # Failed judgments of this score by class (infrastructure, judge, response).
    failures: dict[str, int] = field(default_factory=empty_counts)


@dataclass
class ScoreReport:
    judge: str
    aggregation: str
    scores: list[ScoredCompletion] = field(default_factory=list)
    without_rubric: list[int] = field(default_factory=list)
    judgments: int = 0  # judged criteria (checks excluded)
    computed: int = 0
    cached: int = 0
    failed: int = 0
    checks: int = 0
    backend_requests: int = 0
    # Judgments failed in this run, by class; and the alarms the run raised.
    failures: dict[str, int] = field(default_factory=empty_counts)
    alarms: list[str] = field(default_factory=list)


@dataclass
class _Unit:
    """One (completion, version): its judge items and how to read its outcomes back."""

    completion: Completion
    version: RubricVersion
    view: CompletionView
    items: list[Item]
    key_of: dict[int, str]  # criterion id -> judgment key (judged criteria only)


def score(
    session: Session,
    spec: JudgeSpec,
    selection: Selection,
    options: ScoreOptions,
    backend_factory: Callable[[], JudgeBackend],
    progress: Callable[[int, int], None] | None = None,
    checkpoint: Callable[[], None] | None = None,
) -> ScoreReport:
    """Score the selected completions; see the module docstring for the steps."""
    aggregation = HOLISTIC if spec.mode == VerdictMode.HOLISTIC else options.aggregation
    report = ScoreReport(judge=spec.name, aggregation=aggregation)
    judge_row = ensure_judge_config(session, spec)
    work, without = select_work(session, selection)
    report.without_rubric = [c.id for c in without]
    units = [
        _unit(spec, judge_row.config_hash, completion, version) for completion, version in work
    ]
    report.judgments = sum(len(u.items) for u in units)

    stored = judgments_by_key(session, (item.key for u in units for item in u.items))
    cached = {k: j for k, j in stored.items() if _settled(j)}
    report.cached = sum(1 for u in units for item in u.items if item.key in cached)
    executor = CallExecutor(backend_factory, spec, _builder(spec, units), spec.prompt_template())
    done = report.cached
    if progress:
        progress(done, report.judgments)
    try:
        for chunk in _chunks(units, cached, options.chunk_judgments):
            todo = [(u.view, [i for i in u.items if i.key not in cached]) for u in chunk]
            results = executor.run([(view, items) for view, items in todo if items])
            fresh = _store_results(session, judge_row.id, chunk, results)
            cached.update({k: j for k, j in fresh.items() if _settled(j)})
            judged = fresh | cached  # fresh failures too, so the breakdown can show their errors
            scored = [
                _score_unit(unit, judge_row.id, aggregation, options, judged) for unit in chunk
            ]
            save_scores(session, [row for _, row in scored])
            report.scores.extend(completion for completion, _ in scored)
            report.computed += sum(1 for r in results.values() if r.verdict is not None)
            report.failed += sum(1 for r in results.values() if r.verdict is None)
            for result in results.values():
                if result.failure is not None:
                    report.failures[result.failure.value] += 1
            done += len(results)
            if checkpoint:
                checkpoint()
            if progress:
                progress(done, report.judgments)
    finally:
        report.backend_requests = executor.requests_sent
        executor.close()
    report.checks = sum(1 for s in report.scores for c in s.criteria if c["status"] == "check")
    report.alarms = judge_failure_alarms(report, options.judge_failure_alarm)
    return report


def _settled(judgment: Judgment) -> bool:
    """Not worth judging again: a verdict, or a response that cannot fit this judge (the
    same content overflows the same judge every time)."""
    return judgment.status == JudgmentStatus.OK or judgment.failure == FailureClass.RESPONSE.value


def judge_failure_alarms(report: ScoreReport, threshold: float) -> list[str]:
    """An alarm when the judge's own failures (unparseable, off-scale replies) pass
    ``threshold`` of the judgments this run computed."""
    sent = report.computed + report.failed
    judge = report.failures[FailureClass.JUDGE.value]
    if not sent or judge / sent <= threshold:
        return []
    return [
        f"judge {report.judge}: {judge} of {sent} judgments ({judge / sent:.0%}) failed on the "
        f"judge's own reply (unparseable or off its scale), above the alarm threshold "
        f"of {threshold:.0%}"
    ]


def _builder(spec: JudgeSpec, units: Sequence[_Unit]) -> Any:
    if spec.mode != VerdictMode.HOLISTIC:
        return BUILDERS[spec.mode]
    rubric_of = {u.view.id: [CriterionView.of(c) for c in u.version.criteria] for u in units}

    def build(
        spec: JudgeSpec, template: Any, completion: CompletionView, items: Any, attempt: int
    ) -> Any:
        return holistic_calls(
            spec, template, completion, items, attempt, rubric=rubric_of[completion.id]
        )

    return build


def _unit(
    spec: JudgeSpec, judge_hash: str, completion: Completion, version: RubricVersion
) -> _Unit:
    prompt = completion.prompt
    reference = prompt.reference_answer
    view = CompletionView(completion.id, prompt.messages, completion.text, reference)
    items: list[Item] = []
    key_of: dict[int, str] = {}
    seen: set[str] = set()
    if spec.mode == VerdictMode.HOLISTIC:
        key = keys.holistic_key(
            judge_hash, version.content_hash, prompt.content_hash, completion.content_hash
        )
        return _Unit(completion, version, view, [Item(key, None)], {})
    for criterion in version.criteria:
        if criterion.kind == CriterionKind.CHECK:
            continue
        if spec.mode == VerdictMode.REFERENCE_RELATIVE:
            key = keys.reference_key(
                judge_hash,
                criterion.content_hash,
                prompt.content_hash,
                content_hash(reference or ""),
                completion.content_hash,
            )
        else:
            key = keys.criterion_key(
                judge_hash, criterion.content_hash, prompt.content_hash, completion.content_hash
            )
        if key not in seen:  # two criteria with the same content: judged once
            seen.add(key)
            items.append(Item(key, CriterionView.of(criterion)))
        key_of[criterion.id] = key
    return _Unit(completion, version, view, items, key_of)


def _chunks(units: Sequence[_Unit], cached: dict[str, Judgment], size: int) -> list[list[_Unit]]:
    """Consecutive units holding about ``size`` uncached judgments each (whole completions)."""
    chunks: list[list[_Unit]] = [[]]
    count = 0
    for unit in units:
        chunks[-1].append(unit)
        count += sum(1 for item in unit.items if item.key not in cached)
        if count >= size:
            chunks.append([])
            count = 0
    return [c for c in chunks if c]


def _store_results(
    session: Session, judge_id: int, chunk: Sequence[_Unit], results: dict[str, JudgeResult]
) -> dict[str, Judgment]:
    origin: dict[str, tuple[int, int | None]] = {}
    for unit in chunk:
        for item in unit.items:
            origin.setdefault(
                item.key, (unit.completion.id, item.criterion.id if item.criterion else None)
            )
    rows = []
    for key, result in results.items():
        completion_id, criterion_id = origin[key]
        verdict = result.verdict
        rows.append(
            {
                "cache_key": key,
                "judge_config_id": judge_id,
                "completion_id": completion_id,
                "criterion_id": criterion_id,
                "status": JudgmentStatus.OK if verdict else JudgmentStatus.FAILED,
                "value": verdict.value if verdict else None,
                "verdict": verdict.label if verdict else None,
                "reasoning": verdict.reasoning if verdict else None,
                "raw_output": result.raw_output,
                "prompt_tokens": result.prompt_tokens,
                "completion_tokens": result.completion_tokens,
                "latency_ms": result.latency_ms,
                "attempts": result.attempts,
                "error": result.error,
                "failure": result.failure.value if result.failure else None,
                "detail": verdict.detail if verdict and verdict.detail else None,
            }
        )
    save_judgments(session, rows)
    return judgments_by_key(session, results)


def _score_unit(
    unit: _Unit,
    judge_id: int,
    aggregation: str,
    options: ScoreOptions,
    judged: dict[str, Judgment],
) -> tuple[ScoredCompletion, dict[str, Any]]:
    """The completion's score, and its row for the scores table."""
    breakdown: list[dict[str, Any]] = []
    outcomes: list[Outcome] = []
    failures = empty_counts()
    policy = options.response_failure
    if aggregation == HOLISTIC:
        judgment = judged.get(unit.items[0].key)
        value, reasons = None, []
        if judgment is not None and judgment.status == JudgmentStatus.OK:
            value = judgment.value
        else:
            failure = judgment.failure if judgment is not None else None
            failures[failure or FailureClass.INFRASTRUCTURE.value] += 1
            error = judgment.error if judgment else "not judged"
            if failure == FailureClass.RESPONSE.value and policy == ResponseFailurePolicy.WORST:
                value = worst_value(1.0)
                reasons.append(f"the response could not be judged, scored at the worst: {error}")
            else:
                reasons.append(f"holistic judgment failed ({failure}): {error}")
        result_value, coverage = value, 1.0 if value is not None else 0.0
        status = Status.OK if value is not None else Status.MASKED
    else:
        for criterion in unit.version.criteria:
            entry, outcome = _criterion_outcome(criterion, unit, judged, policy)
            breakdown.append(entry)
            outcomes.append(outcome)
            if "failure" in entry:
                failures[entry["failure"]] += 1
        result = aggregate(
            aggregation,
            outcomes,
            dimension_weights=unit.version.dimension_weights,
            min_coverage=options.min_coverage,
            gate_cap=options.gate_cap,
        )
        result_value, coverage, status, reasons = (
            result.value,
            result.coverage,
            result.status,
            result.reasons,
        )
        worst = sum(1 for entry in breakdown if entry["status"] == "unjudgeable")
        if worst:
            reasons = [
                f"{worst} criteria scored at their worst value: the response could not be "
                "judged (it does not fit the judge's context)",
                *reasons,
            ]
    row = {
        "completion_id": unit.completion.id,
        "rubric_version_id": unit.version.id,
        "judge_config_id": judge_id,
        "aggregation": aggregation,
        "value": result_value,
        "coverage": coverage,
        "status": status.value,
        "details": {"criteria": breakdown, "reasons": reasons, "failures": failures},
    }
    scored = ScoredCompletion(
        unit.completion.id,
        unit.completion.external_id,
        unit.completion.prompt.external_id,
        unit.completion.source,
        unit.version.ref,
        result_value,
        coverage,
        status.value,
        reasons,
        breakdown,
        failures,
    )
    return scored, row


def _criterion_outcome(
    criterion: Criterion,
    unit: _Unit,
    judged: dict[str, Judgment],
    policy: ResponseFailurePolicy,
) -> tuple[dict[str, Any], Outcome]:
    entry: dict[str, Any] = {
        "criterion_id": criterion.id,
        "position": criterion.position,
        "text": criterion.text,
        "weight": criterion.weight,
        "theme": criterion.theme,
    }
    reference = None
    if criterion.kind == CriterionKind.CHECK:
        assert criterion.check is not None
        value: float | None = 1.0 if run_check(criterion.check, unit.completion.text) else 0.0
        entry.update(status="check", value=value, verdict="pass" if value else "fail")
    else:
        judgment = judged.get(unit.key_of[criterion.id])
        if judgment is not None and judgment.status == JudgmentStatus.OK:
            value = judgment.value
            reference_score = (judgment.detail or {}).get("reference")
            if reference_score is not None:
                reference = float(reference_score) / REFERENCE_SCALE_MAX
            entry.update(
                status="ok", value=value, verdict=judgment.verdict, judgment_id=judgment.id
            )
        else:
            value = None
            error = judgment.error if judgment is not None else "not judged"
            failure = (judgment.failure if judgment is not None else None) or "infrastructure"
            entry.update(
                status="failed",
                value=None,
                error=error,
                failure=failure,
                judgment_id=judgment.id if judgment else None,
            )
            if failure == FailureClass.RESPONSE.value and policy == ResponseFailurePolicy.WORST:
                # Charged to the response: provoking a failure must never pay.
                value = worst_value(criterion.weight)
                entry.update(status="unjudgeable", value=value, verdict="worst")
    outcome = Outcome(
        criterion.id, criterion.weight, value, criterion.theme, criterion.required, reference
    )
    return entry, outcome
