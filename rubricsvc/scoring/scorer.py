"""Scoring completions against rubric versions with one judge config.

1. select (completion, rubric version) pairs;
2. expand them into judgments, each with a content key; check criteria are computed;
3. read every key already judged ok from the database (the cache);
4. judge the rest through the backend, in chunks, storing each chunk as it completes;
5. aggregate each completion's values into a score: failures of the infrastructure or the
   judge are masked, a response that cannot be judged (it overflows the judge's context)
   gets the criterion's worst value unless the options say to mask it too.

The caller owns the transaction; ``checkpoint`` (e.g. ``session.commit``) is called after
each chunk so a long run keeps what it has done if it is interrupted (and may raise to stop
the run there, as the command line does on Ctrl-C). Chunks are sized so that one takes about
``checkpoint_seconds`` (at most ``chunk_judgments`` judgments).
"""

from __future__ import annotations

import time
from collections import ChainMap
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from rubricsvc.backends.base import JudgeBackend
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.aggregation import DEFAULT_MIN_COVERAGE
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.failures import (
    DEFAULT_JUDGE_FAILURE_ALARM,
    FailureClass,
    ResponseFailurePolicy,
    empty_counts,
)
from rubricsvc.judging.modes import (
    Assessment,
    AssessOptions,
    Case,
    CompletionView,
    CriterionView,
    DocumentView,
    Item,
    Plan,
    RubricCriterion,
    Ruling,
    VerdictModeImpl,
    get_mode,
)
from rubricsvc.judging.readers.evidence import PASSAGE_BUDGET_CHARS, is_cut, ranked_passages
from rubricsvc.models import (
    Completion,
    Criterion,
    CriterionKind,
    JudgeConfig,
    JudgmentStatus,
    Prompt,
    RubricVersion,
)
from rubricsvc.scoring.executor import CallExecutor, JudgeResult
from rubricsvc.scoring.judge_configs import ensure_judge_config
from rubricsvc.scoring.request_size import TOO_LONG
from rubricsvc.scoring.selection import Selection, select_work, without_reasons
from rubricsvc.scoring.store import (
    StoredVerdict,
    save_and_read_judgments,
    save_scores,
    stored_verdicts,
)


@dataclass(frozen=True)
class ScoreOptions:
    aggregation: str = "rar"
    min_coverage: float = DEFAULT_MIN_COVERAGE
    gate_cap: float | None = 0.0
    chunk_judgments: int = 256  # judgments sent to the backend between checkpoints, at most
    # ... and fewer when the judge is slow: each chunk is sized from the time judgments have
    # taken so far to take about this long, so a run checkpoints at least this often.
    checkpoint_seconds: float = 30.0
    # The first chunk, before any judgment has been timed (None: ``chunk_judgments``); the
    # command line starts small, so a slow judge's first checkpoint comes early too.
    first_chunk_judgments: int | None = None
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


@dataclass(kw_only=True)
class JudgingTally:
    """What judging did in a run: the judgments it needed (checks excluded), how many were
    computed, read from the cache or failed (failures also by class), the backend requests
    made and the alarms raised."""

    judgments: int = 0
    computed: int = 0
    cached: int = 0
    failed: int = 0
    backend_requests: int = 0
    failures: dict[str, int] = field(default_factory=empty_counts)
    alarms: list[str] = field(default_factory=list)
    # Of the failed: given up on while the backend was unreachable, overloaded or rate-limited
    # (it may pass), and the longest wait its provider asked for (seconds), if any.
    unavailable: int = 0
    retry_after: float | None = None

    def add(self, other: JudgingTally) -> None:
        """Count ``other``'s work in this tally too."""
        self.judgments += other.judgments
        self.computed += other.computed
        self.cached += other.cached
        self.failed += other.failed
        self.backend_requests += other.backend_requests
        for name, count in other.failures.items():
            self.failures[name] += count
        self.alarms.extend(other.alarms)
        self.unavailable += other.unavailable
        if other.retry_after is not None:
            self.retry_after = max(self.retry_after or 0.0, other.retry_after)


@dataclass(kw_only=True)
class ScoreReport(JudgingTally):
    judge: str
    aggregation: str
    scores: list[ScoredCompletion] = field(default_factory=list)
    without_rubric: list[int] = field(default_factory=list)
    # Why: completion ids by reason (``selection.without_reasons``; empty when not known).
    without_reasons: dict[str, list[int]] = field(default_factory=dict)
    checks: int = 0  # check criteria computed
    # The same counts per completion (judgments, computed, cached, failed by class): what a
    # caller that scored several callers' completions at once tells each of them.
    by_completion: dict[int, JudgingTally] = field(default_factory=dict)


@dataclass
class _Unit:
    """One (completion, version): what its mode judges, and how to read the judgments back."""

    completion: Completion
    version: RubricVersion
    case: Case
    plan: Plan


@dataclass
class EvidenceCost:
    """What a run's citation checks cost besides their judgments, in the unit the server
    bounds (``api.max_reward_evidence``), each about 0.3 µs of a server's time: each
    character of a cited document cut to passages (indexed once per run), each character a
    check sends (its claim, and its document's title, URL and text shown: the whole of a
    short one, at most the passage budget of a long one) and each passage a check ranks
    (counted as one, though ranking one costs less)."""

    documents: dict[str, int] = field(default_factory=dict)  # content hash -> its characters
    sent_chars: int = 0
    passages: int = 0

    @property
    def document_chars(self) -> int:
        return sum(self.documents.values())

    @property
    def total(self) -> int:
        return self.document_chars + self.sent_chars + self.passages

    def add(self, other: EvidenceCost) -> None:
        self.documents.update(other.documents)  # indexed once, whoever cites it
        self.sent_chars += other.sent_chars
        self.passages += other.passages

    def add_check(self, claim: str, document: DocumentView) -> None:
        """One (claim, document) check (``modes.citation``, ``readers.evidence``)."""
        size = len(document.text)
        head = len(document.title or "") + len(document.url or "")
        self.sent_chars += len(claim) + head + min(size, PASSAGE_BUDGET_CHARS)
        if is_cut(size):
            self.documents[document.content_hash] = size
            self.passages += ranked_passages(size)


@dataclass
class Workload:
    """Judgments planned (each key once, before the cache), check criteria computed, and what
    the citation checks among the judgments cost besides (``EvidenceCost``)."""

    judgments: int = 0
    checks: int = 0
    evidence: EvidenceCost = field(default_factory=EvidenceCost)

    @property
    def total(self) -> int:
        return self.judgments + self.checks

    def add(self, other: Workload) -> None:
        self.judgments += other.judgments
        self.checks += other.checks
        self.evidence.add(other.evidence)


@dataclass(frozen=True)
class PlannedScore:
    """A run of ``score`` planned, nothing judged yet: the judge config it records under, one
    unit per (completion, version), and the selected completions with no usable version.
    What a caller that must bound a run's work before judging (the reward routes) plans once
    and hands to ``score``, instead of planning it twice."""

    judge_row: JudgeConfig
    units: list[_Unit]
    without: list[Completion]

    def workload(self) -> Workload:
        return work_of([(u.case, u.plan) for u in self.units])


def work_of(planned: Sequence[tuple[Case, Plan]]) -> Workload:
    """The work of planned (case, plan) pairs: each judgment key once (the members of a
    compared group plan the same ones), before the cache; each check criterion once per case;
    the evidence its citation checks read, each judgment once too."""
    judgments = 0
    evidence = EvidenceCost()
    for items in distinct_items(plan for _, plan in planned):
        judgments += len(items)
        for item in items:
            if item.citation is not None and item.citation.document is not None:
                evidence.add_check(item.citation.claim, item.citation.document)
    checks = sum(1 for case, _ in planned for c in case.criteria if c.check is not None)
    return Workload(judgments, checks, evidence)


def plan_score(
    session: Session, spec: JudgeSpec, selection: Selection, judge_row: JudgeConfig | None = None
) -> PlannedScore:
    """What ``score`` would judge for ``selection`` with ``spec``, to pass it as ``planned``;
    stores the judge config if it is new (as ``score`` does), judges nothing."""
    judge_row = judge_row or ensure_judge_config(session, spec)
    units, without = _plan_units(session, spec, judge_row.config_hash, selection)
    return PlannedScore(judge_row, units, without)


def score_aggregation(spec: JudgeSpec, options: ScoreOptions) -> str:
    """The aggregation a run's scores are stored under: the mode's own, else the options'."""
    return get_mode(spec.mode).aggregation or options.aggregation


def score(
    session: Session,
    spec: JudgeSpec,
    selection: Selection,
    options: ScoreOptions,
    backend_factory: Callable[[], JudgeBackend],
    progress: Callable[[int, int], None] | None = None,
    checkpoint: Callable[[], None] | None = None,
    judge_row: JudgeConfig | None = None,
    planned: PlannedScore | None = None,
) -> ScoreReport:
    """Score the selected completions; see the module docstring for the steps. ``judge_row``:
    the stored config to record under (a job's), else the one ``spec`` finds or stores.
    ``planned``: this run as ``plan_score`` planned it in this transaction (its judge config
    is the one recorded under), else it is planned here."""
    if spec.jury is not None:  # a panel has no backend of its own: ``scoring.jury`` scores it
        raise ValidationFailed(f"judge {spec.name!r} is a jury: score it with its members")
    mode = get_mode(spec.mode)
    aggregation = score_aggregation(spec, options)
    report = ScoreReport(judge=spec.name, aggregation=aggregation)
    run = planned or plan_score(session, spec, selection, judge_row)
    judge_row, units, without = run.judge_row, run.units, run.without
    report.without_rubric = [c.id for c in without]
    report.without_reasons = without_reasons(session, without, selection.include_drafts)
    # Each judgment once: the members of a compared group plan the same ones.
    keys = [item.key for items in distinct_items(u.plan for u in units) for item in items]
    report.judgments = len(keys)

    stored = stored_verdicts(session, keys)
    cached = {k: j for k, j in stored.items() if _settled(j)}
    report.cached = sum(1 for key in keys if key in cached)
    executor = CallExecutor(backend_factory, spec, mode.calls, spec.prompt_template())
    done = report.cached
    if progress:
        progress(done, report.judgments)
    pace = _Pace(options)
    # Each stored judgment is read as a ruling once, as ``cached`` grows: reading every one
    # again for each unit made a run's cost grow with the square of its size.
    rulings = {key: _ruling(judgment) for key, judgment in cached.items()}
    try:
        for chunk in _paced_chunks(units, cached, pace):
            started = time.monotonic()
            results = executor.run(_uncached(chunk, cached))
            pace.record(len(results), time.monotonic() - started)
            fresh = _store_results(session, judge_row.id, chunk, results)
            settled = {k: j for k, j in fresh.items() if _settled(j)}
            cached.update(settled)
            rulings.update({key: _ruling(judgment) for key, judgment in settled.items()})
            # Fresh failures too, so the breakdown can show their errors; a settled ruling
            # wins. A view, not a copy: copying every ruling per chunk grew with the run again
            # (and no view at all when nothing failed: a lookup through one costs more).
            failed = {k: _ruling(j) for k, j in fresh.items() if k not in settled}
            judged: Mapping[str, Ruling] = ChainMap(rulings, failed) if failed else rulings
            scored = [
                _score_unit(mode, unit, judge_row.id, aggregation, options, judged)
                for unit in chunk
            ]
            save_scores(session, [row for _, row in scored])
            report.scores.extend(completion for completion, _ in scored)
            _tally_units(report.by_completion, chunk, results)
            report.computed += sum(1 for r in results.values() if r.verdict is not None)
            report.failed += sum(1 for r in results.values() if r.verdict is None)
            for result in results.values():
                if result.failure is not None:
                    report.failures[result.failure.value] += 1
            done += len(results)
            if progress:
                progress(done, report.judgments)
            # Last: a checkpoint may end the run (the command line's, on Ctrl-C) once this
            # chunk is stored.
            if checkpoint:
                checkpoint()
    finally:
        report.backend_requests = executor.requests_sent
        report.unavailable, report.retry_after = executor.unavailable, executor.retry_after
        executor.close()
    report.checks = sum(1 for s in report.scores for c in s.criteria if c["status"] == "check")
    report.alarms = judge_failure_alarms(report, options.judge_failure_alarm)
    return report


def _plan_units(
    session: Session, spec: JudgeSpec, judge_hash: str, selection: Selection
) -> tuple[list[_Unit], list[Completion]]:
    """What a run of ``selection`` judges, one unit per (completion, version), and the
    selected completions with no usable rubric version."""
    work, without = select_work(session, selection)
    planned = plan_cases(spec, judge_hash, [Planned.of(c, v) for c, v in work], selection.pairs)
    units = [
        _Unit(completion, version, case, plan)
        for (completion, version), (case, plan) in zip(work, planned, strict=True)
    ]
    return units, without


@dataclass(frozen=True)
class Planned:
    """One (completion, version) to plan: the completion as a mode reads it (stored, or as it
    would be stored: ``scoring.workload``), its prompt's id and hash, and the version."""

    completion: CompletionView
    prompt_id: int
    prompt_hash: str
    version: RubricVersion

    @classmethod
    def of(cls, completion: Completion, version: RubricVersion) -> Planned:
        view = completion_view(completion)
        return cls(view, completion.prompt_id, completion.prompt.content_hash, version)


def plan_cases(
    spec: JudgeSpec,
    judge_hash: str,
    work: Sequence[Planned],
    pairs: Sequence[tuple[int, int]] = (),
) -> list[tuple[Case, Plan]]:
    """Each unit's case and the judgments ``spec``'s mode plans for it, in order: with its
    peers among ``work`` for a mode that compares (``comparison_groups``). Reads nothing."""
    mode = get_mode(spec.mode)
    peers: dict[tuple[int, int], tuple[int, ...]] = {}
    if mode.compares:
        members = [(u.completion.id, u.prompt_id, u.version.id) for u in work]
        peers = peer_ids(members, spec.group_size, pairs)
    views = {u.completion.id: u.completion for u in work}
    criteria: dict[int, tuple[RubricCriterion, ...]] = {}  # per version: read once
    planned = []
    for unit in work:
        version = unit.version
        if version.id not in criteria:
            criteria[version.id] = tuple(rubric_criterion(c) for c in version.criteria)
        case = _case(
            spec,
            judge_hash,
            unit,
            criteria[version.id],
            tuple(views[p] for p in peers.get((unit.completion.id, version.id), ())),
        )
        planned.append((case, mode.plan(case)))
    return planned


def distinct_items(plans: Iterable[Plan]) -> Iterator[list[Item]]:
    """Each plan's items that no earlier plan has: what a run asks for, each key once (the
    members of a compared group plan the same judgments, the first of them asks)."""
    seen: set[str] = set()
    for plan in plans:
        items = [item for item in plan.items if item.key not in seen]
        seen.update(item.key for item in items)
        yield items


@dataclass(kw_only=True)
class RunPlan:
    """What a run would do (``--dry-run``): the completions it scores, the rubric versions
    (each with its completions, judgments and how many of those are cached), the judgments
    in all and the cached ones; nothing is judged or stored."""

    judge: str
    mode: str
    completions: int = 0  # selected completions with at least one rubric version
    scores: int = 0  # (completion, version) pairs: the scores the run would store
    judgments: int = 0  # judge calls needed, checks excluded (as ``ScoreReport.judgments``)
    cached: int = 0
    checks: int = 0  # check criteria the run would compute
    versions: list[dict[str, Any]] = field(default_factory=list)
    without_rubric: list[int] = field(default_factory=list)
    without_reasons: dict[str, list[int]] = field(default_factory=dict)


def plan_run(session: Session, spec: JudgeSpec, selection: Selection) -> RunPlan:
    """What ``score`` would judge for ``selection`` with ``spec`` (a jury: see ``scoring.jury``);
    reads the database only."""
    units, without = _plan_units(session, spec, spec.config_hash(), selection)
    # Each judgment once, counted with the first unit (and so version) that plans it.
    asked = list(distinct_items(u.plan for u in units))
    keys = [item.key for items in asked for item in items]
    cached = {k for k, j in stored_verdicts(session, keys).items() if _settled(j)}
    plan = RunPlan(judge=spec.name, mode=spec.mode)
    plan.completions = len({u.completion.id for u in units})
    plan.scores = len(units)
    plan.judgments = len(keys)
    plan.cached = sum(1 for k in keys if k in cached)
    by_version: dict[int, dict[str, Any]] = {}
    for unit, items in zip(units, asked, strict=True):
        entry = by_version.setdefault(
            unit.version.id,
            {"rubric": unit.version.ref, "completions": 0, "judgments": 0, "cached": 0},
        )
        entry["completions"] += 1
        entry["judgments"] += len(items)
        entry["cached"] += sum(1 for item in items if item.key in cached)
        plan.checks += sum(1 for c in unit.case.criteria if c.check is not None)
    plan.versions = sorted(by_version.values(), key=lambda e: str(e["rubric"]))
    plan.without_rubric = [c.id for c in without]
    plan.without_reasons = without_reasons(session, without, selection.include_drafts)
    return plan


def _settled(judgment: StoredVerdict) -> bool:
    """Not worth judging again: a verdict, or a response that cannot fit this judge (the
    same content overflows the same judge every time). Not one refused by the judge's
    ``max_request_chars``: the bound is not hashed, and a raised one judges it."""
    if judgment.status == JudgmentStatus.OK:
        return True
    too_long = TOO_LONG in (judgment.detail or {})
    return judgment.failure == FailureClass.RESPONSE.value and not too_long


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


def _tally_units(
    tallies: dict[int, JudgingTally], chunk: Sequence[_Unit], results: Mapping[str, JudgeResult]
) -> None:
    """Count each unit's judgments under its completion: made in this chunk (computed or
    failed) or read from the cache."""
    for unit in chunk:
        tally = tallies.setdefault(unit.completion.id, JudgingTally())
        for item in unit.plan.items:
            tally.judgments += 1
            result = results.get(item.key)
            if result is None:
                tally.cached += 1
            elif result.verdict is not None:
                tally.computed += 1
            else:
                tally.failed += 1
                if result.failure is not None:
                    tally.failures[result.failure.value] += 1


def _uncached(
    chunk: Sequence[_Unit], cached: Mapping[str, StoredVerdict]
) -> list[tuple[CompletionView, list[Item]]]:
    """Each unit's judgments still to make, each key once: the members of a compared group
    plan the same judgments, which the first of them asks for."""
    asked: set[str] = set()
    todo = []
    for unit in chunk:
        items = [i for i in unit.plan.items if i.key not in cached and i.key not in asked]
        asked.update(i.key for i in items)
        if items:
            todo.append((unit.case.completion, items))
    return todo


def completion_view(completion: Completion) -> CompletionView:
    """A stored completion as a verdict mode reads it."""
    documents = tuple(
        DocumentView(
            str(listed.label),
            listed.document.url,
            listed.document.title,
            listed.document.text,
            listed.document.content_hash,
        )
        for listed in completion.documents
    )
    return view_of(completion.id, completion.prompt, completion, documents)


def view_of(
    completion_id: int, prompt: Prompt, completion: Completion, documents: tuple[DocumentView, ...]
) -> CompletionView:
    """A completion (its text, hash and trajectory; stored or not) of ``prompt`` as a verdict
    mode reads it, with its documents."""
    return CompletionView(
        completion_id,
        prompt.messages,
        completion.text,
        prompt.reference_answer,
        completion.content_hash,
        trajectory=tuple(completion.messages) if completion.messages else None,
        documents=documents,
    )


def comparison_groups(
    work: Sequence[tuple[Completion, RubricVersion]],
    group_size: int,
    pairs: Sequence[tuple[int, int]] = (),
) -> dict[tuple[int, int], tuple[Completion, ...]]:
    """For modes that compare: each (completion id, version id)'s peers (``peer_ids``)."""
    by_id = {completion.id: completion for completion, _ in work}
    members = [(completion.id, completion.prompt_id, version.id) for completion, version in work]
    return {
        unit: tuple(by_id[p] for p in peers)
        for unit, peers in peer_ids(members, group_size, pairs).items()
    }


def peer_ids(
    members: Sequence[tuple[int, int, int]],
    group_size: int,
    pairs: Sequence[tuple[int, int]] = (),
) -> dict[tuple[int, int], tuple[int, ...]]:
    """Of (completion id, prompt id, version id) units, each (completion id, version id)'s
    peers' ids. Without ``pairs``, the completions of one prompt under one version, in id
    order, split into consecutive groups of at most ``group_size``; with ``pairs``, exactly
    each completion's partners in them (a labelled pair is judged as a pair, whatever else
    its prompt has)."""
    by_group: dict[tuple[int, int], list[int]] = {}
    for completion_id, prompt_id, version_id in sorted(members, key=lambda m: (m[2], m[0])):
        by_group.setdefault((prompt_id, version_id), []).append(completion_id)
    peers: dict[tuple[int, int], tuple[int, ...]] = {}
    if pairs:
        partners: dict[int, set[int]] = {}
        for first, second in pairs:
            partners.setdefault(first, set()).add(second)
            partners.setdefault(second, set()).add(first)
        for (_, version_id), ids in by_group.items():
            for c in ids:
                mates = partners.get(c, set())
                peers[(c, version_id)] = tuple(m for m in ids if m in mates)
        return peers
    for (_, version_id), ids in by_group.items():
        for start in range(0, len(ids), group_size):
            group = ids[start : start + group_size]
            for c in group:
                peers[(c, version_id)] = tuple(m for m in group if m != c)
    return peers


def case_plan(
    spec: JudgeSpec, judge_hash: str, completion: Completion, version: RubricVersion
) -> Plan:
    """The judgments ``spec``'s mode plans for one completion under one version (no peers)."""
    criteria = tuple(rubric_criterion(c) for c in version.criteria)
    case = _case(spec, judge_hash, Planned.of(completion, version), criteria, ())
    return get_mode(spec.mode).plan(case)


def _case(
    spec: JudgeSpec,
    judge_hash: str,
    unit: Planned,
    criteria: tuple[RubricCriterion, ...],
    peers: tuple[CompletionView, ...],
) -> Case:
    version = unit.version
    return Case(
        unit.completion,
        criteria,
        judge_hash,
        version.content_hash,
        unit.prompt_hash,
        unit.completion.response_hash,
        version.dimension_weights,
        peers=peers,
        spec=spec,
    )


def rubric_criterion(criterion: Criterion) -> RubricCriterion:
    """A stored criterion as a verdict mode plans and scores it."""
    check = criterion.check if criterion.kind == CriterionKind.CHECK else None
    return RubricCriterion(
        criterion.id,
        criterion.position,
        CriterionView.of(criterion),
        criterion.content_hash,
        criterion.required,
        check,
        citations=criterion.kind == CriterionKind.CITATIONS,
    )


class _Pace:
    """How many judgments the next chunk holds: as many as the judge has made in
    ``checkpoint_seconds`` so far (at least 1, at most ``chunk_judgments``), so a slow judge
    still checkpoints every ``checkpoint_seconds`` and a fast one fills whole batches."""

    def __init__(self, options: ScoreOptions) -> None:
        self.most = max(options.chunk_judgments, 1)
        self.seconds = options.checkpoint_seconds
        first = options.first_chunk_judgments or self.most
        self.first = max(min(first, self.most), 1)
        self.judged = 0
        self.elapsed = 0.0

    def record(self, judgments: int, seconds: float) -> None:
        self.judged += judgments
        self.elapsed += seconds

    def size(self) -> int:
        if not self.judged or self.elapsed <= 0:
            return self.first if not self.judged else self.most
        per_judgment = self.elapsed / self.judged
        return max(1, min(self.most, int(self.seconds / per_judgment)))


def _paced_chunks(
    units: Sequence[_Unit], cached: Mapping[str, StoredVerdict], pace: _Pace
) -> Iterator[list[_Unit]]:
    """Consecutive units (whole completions) holding about ``pace.size()`` uncached
    judgments each, the size read anew for every chunk; units with nothing to judge ride
    along with the next chunk (or form the last)."""
    chunk: list[_Unit] = []
    asked: set[str] = set()  # each key once: a compared group's members plan the same ones
    for unit in units:
        chunk.append(unit)
        asked.update(item.key for item in unit.plan.items if item.key not in cached)
        if len(asked) >= pace.size():
            yield chunk
            chunk, asked = [], set()
    if chunk:
        yield chunk


def _store_results(
    session: Session, judge_id: int, chunk: Sequence[_Unit], results: dict[str, JudgeResult]
) -> dict[str, StoredVerdict]:
    origin: dict[str, tuple[int, int | None, int | None]] = {}
    for unit in chunk:
        for item in unit.plan.items:
            origin.setdefault(item.key, _origin(unit, item))
    rows = []
    for key, result in results.items():
        completion_id, criterion_id, other_id = origin[key]
        verdict = result.verdict
        rows.append(
            {
                "cache_key": key,
                "judge_config_id": judge_id,
                "completion_id": completion_id,
                "criterion_id": criterion_id,
                "other_completion_id": other_id,
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
                "detail": (verdict.detail or None) if verdict else result.detail,
            }
        )
    return save_and_read_judgments(session, rows)


def _origin(unit: _Unit, item: Item) -> tuple[int, int | None, int | None]:
    """The completion, criterion and (for a pair) second completion a judgment is stored with:
    a comparison is stored with the completions it shows, in the order shown."""
    criterion_id = item.criterion.id if item.criterion else None
    if item.responses:
        other = item.responses[1].id if len(item.responses) == 2 else None
        return item.responses[0].id, criterion_id, other
    return unit.completion.id, criterion_id, None


def _score_unit(
    mode: VerdictModeImpl,
    unit: _Unit,
    judge_id: int,
    aggregation: str,
    options: ScoreOptions,
    rulings: Mapping[str, Ruling],
) -> tuple[ScoredCompletion, dict[str, Any]]:
    """The completion's score, and its row for the scores table."""
    assess = AssessOptions(
        aggregation, options.min_coverage, options.gate_cap, options.response_failure
    )
    result: Assessment = mode.assess(unit.case, unit.plan, rulings, assess)
    details = {"criteria": result.criteria, "reasons": result.reasons, "failures": result.failures}
    row = {
        "completion_id": unit.completion.id,
        "rubric_version_id": unit.version.id,
        "judge_config_id": judge_id,
        "aggregation": aggregation,
        "value": result.value,
        "coverage": result.coverage,
        "status": result.status.value,
        "details": details,
    }
    scored = ScoredCompletion(
        unit.completion.id,
        unit.completion.external_id,
        unit.completion.prompt.external_id,
        unit.completion.source,
        unit.version.ref,
        result.value,
        result.coverage,
        result.status.value,
        result.reasons,
        result.criteria,
        result.failures,
    )
    return scored, row


def _ruling(judgment: StoredVerdict) -> Ruling:
    """A stored judgment as a score reads it."""
    ok = judgment.status == JudgmentStatus.OK
    return Ruling(
        judgment.value if ok else None,
        judgment.verdict,
        judgment.detail,
        None if ok else judgment.failure,
        judgment.error,
        judgment.id,
    )
