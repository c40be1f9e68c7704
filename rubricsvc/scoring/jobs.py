"""Score jobs: a selection split into chunks that workers score, with progress and recovery.

- ``submit`` expands a selection into (completion, rubric version) pairs, groups whole
  completions into chunks of about ``chunk_judgments`` judgments (one backend batch each)
  and stores the job with its chunks. The job's key hashes the work itself, so the same
  work submitted twice finds the same job.
- Chunks run wherever a dispatcher sends them (``dispatch.py``), through ``chunks.py``: a
  claim is one atomic UPDATE, so two deliveries of a chunk cannot both run it; ``rollup``
  then recomputes the job from its chunks. ``lifecycle.py`` strings the steps together.
- ``reap`` gives back running chunks whose worker stopped reporting, and sends again pending
  chunks whose message may have been lost.
- Messages go out only after the transaction that made their chunks pending commits
  (``send_after_commit``): a rollback sends nothing.

Every function here only flushes: the caller (a CLI command, a task) owns the transaction.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, event, func, or_, select, update
from sqlalchemy.orm import Session

from rubricsvc.batching import batches
from rubricsvc.db import insert_for
from rubricsvc.errors import ConflictError, NotFoundError, ValidationFailed
from rubricsvc.hashing import content_hash
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.failures import empty_counts
from rubricsvc.judging.modes import Case, Plan, get_mode
from rubricsvc.models import (
    ChunkStatus,
    Completion,
    CriterionKind,
    JobStatus,
    JudgeConfig,
    Prompt,
    RubricVersion,
    Score,
    ScoreChunk,
    ScoreJob,
)
from rubricsvc.models.base import utcnow
from rubricsvc.scoring import presence
from rubricsvc.scoring.judge_configs import ensure_judge_config
from rubricsvc.scoring.scorer import (
    EvidenceCost,
    Planned,
    ScoredCompletion,
    ScoreOptions,
    ScoreReport,
    plan_cases,
    score_aggregation,
    work_of,
)
from rubricsvc.scoring.selection import Selection, select_work

log = logging.getLogger(__name__)

# Chunk ids to send, by judge name (each judge has its own queue).
Outbox = dict[str, list[int]]
Sender = Callable[[str, Sequence[int]], None]

FINISHED = frozenset({JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED})
# In a job's params: its chunks were sent to workers through a broker.
DISPATCHED_TO_WORKERS = "to_workers"
_OUTBOX_KEY = "rubricsvc.outbox"


@dataclass
class Submission:
    job: ScoreJob
    created: bool  # False: the same work was submitted before and this is that job
    outbox: Outbox


@dataclass
class JobProgress:
    id: int
    status: str
    judge: str
    aggregation: str
    total: int
    done: int
    cached: int
    failed: int
    requests: int
    chunks: dict[str, int]
    workers: list[str]
    error: str | None
    created_at: str | None
    updated_at: str | None
    # Only on submission: False when the same work had been submitted before (that job).
    created: bool | None = None
    # Why an unfinished job sent to workers makes no progress: no live worker serves its
    # judge (``presence``). None while a worker serves it, or for a job run in process.
    waiting: str | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- submitting -----------------------------------------------------------------------------


def submit(
    session: Session,
    spec: JudgeSpec,
    selection: Selection,
    options: ScoreOptions,
    chunk_judgments: int,
    plan: JobPlan | None = None,
) -> Submission:
    """The job for this work: found if submitted before (resumed if it failed), else created.
    ``plan``: ``plan_job``'s for this work, when the caller has planned it already."""
    plan = plan or plan_job(session, spec, selection, chunk_judgments)
    work, without = plan.work, plan.without
    judge_row = ensure_judge_config(session, spec)
    aggregation = score_aggregation(spec, options)
    versions_of: dict[int, list[RubricVersion]] = {}
    for completion, version in work:
        versions_of.setdefault(completion.id, []).append(version)
    key = content_hash(
        {
            "judge": judge_row.config_hash,
            "aggregation": aggregation,
            "min_coverage": options.min_coverage,
            "gate_cap": options.gate_cap,
            "response_failure": options.response_failure.value,
            "work": sorted((c, v.id) for c, vs in versions_of.items() for v in vs),
            # Compared pairs change what is judged (absent, as before pairs existed, if none).
            **({"pairs": sorted(map(list, selection.pairs))} if selection.pairs else {}),
        }
    )
    existing = _job_by_key(session, key)
    if existing is None:
        params = {
            "selection": {
                k: list(v) if isinstance(v, tuple) else v for k, v in asdict(selection).items()
            },
            "min_coverage": options.min_coverage,
            "gate_cap": options.gate_cap,
            "response_failure": options.response_failure.value,
            "judge_failure_alarm": options.judge_failure_alarm,
            "versions": sorted({v.id for vs in versions_of.values() for v in vs}),
            "without_rubric": [c.id for c in without],
            "chunk_judgments": chunk_judgments,
        }
        job_id = _insert_job(
            session,
            status=JobStatus.PENDING,
            judge_config_id=judge_row.id,
            aggregation=aggregation,
            job_key=key,
            params=params,
        )
        if job_id is not None:
            job = get_job(session, job_id)
            chunks = _add_chunks(session, job, plan.chunks)
            return Submission(job, True, {spec.name: [c.id for c in chunks]} if chunks else {})
        existing = _job_by_key(session, key)  # a concurrent identical submission stored it
        assert existing is not None
    return Submission(existing, False, _resume_if_stopped(session, existing))


def _add_chunks(
    session: Session, job: ScoreJob, plan: list[tuple[list[int], int]]
) -> list[ScoreChunk]:
    """Store the planned chunks of ``job`` (pending, in position order), ids assigned."""
    now = utcnow()
    chunks = [
        ScoreChunk(
            job_id=job.id,
            position=position,
            completion_ids=completion_ids,
            judgments=judgments,
            status=ChunkStatus.PENDING,
            enqueued_at=now,
        )
        for position, (completion_ids, judgments) in enumerate(plan)
    ]
    session.add_all(chunks)
    job.total = sum(chunk.judgments for chunk in chunks)
    if not chunks:
        job.status = JobStatus.DONE
    session.flush()
    return chunks


def _insert_job(session: Session, **values: Any) -> int | None:
    """Insert a job unless its key is taken (then None): insert-on-conflict-nothing."""
    job_id: int | None = session.scalar(
        insert_for(session, ScoreJob)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["job_key"])
        .returning(ScoreJob.id)
    )
    return job_id


def _job_by_key(session: Session, key: str) -> ScoreJob | None:
    return session.scalar(select(ScoreJob).where(ScoreJob.job_key == key))


def _resume_if_stopped(session: Session, job: ScoreJob) -> Outbox:
    if job.status in (JobStatus.FAILED, JobStatus.CANCELLED):
        return resume(session, job.id)
    return {}


@dataclass
class JobPlan:
    """What a job of a selection would do: its (completion, version) pairs, the selected
    completions without a rubric, and (computed on first use) its chunks, each with the
    judgments it plans, the check criteria it computes and what its citation checks cost."""

    spec: JudgeSpec
    work: list[tuple[Completion, RubricVersion]]
    without: list[Completion]
    chunk_judgments: int
    pairs: tuple[tuple[int, int], ...] = ()

    @functools.cached_property
    def cases(self) -> list[tuple[Case, Plan]]:
        """Each (completion, version)'s case and the judgments its mode plans, in order."""
        work = [Planned.of(c, v) for c, v in self.work]
        return plan_cases(self.spec, self.spec.config_hash(), work, self.pairs)

    @functools.cached_property
    def chunks(self) -> list[tuple[list[int], int]]:
        return _plan_chunks(self.spec, self.work, self.cases, self.chunk_judgments)

    @property
    def evidence(self) -> EvidenceCost:
        """What the job's citation checks cost besides their judgments, each judgment once."""
        return work_of(self.cases).evidence

    @property
    def judgments(self) -> int:
        """The judgments the job plans: its total, as its chunks will count them."""
        return sum(count for _, count in self.chunks)

    @property
    def checks(self) -> int:
        return sum(
            1 for _, version in self.work for c in version.criteria if c.kind == CriterionKind.CHECK
        )


def plan_job(
    session: Session, spec: JudgeSpec, selection: Selection, chunk_judgments: int
) -> JobPlan:
    """The plan of a job of ``selection``; reads the database only."""
    if spec.jury is not None:  # one queue per judge, and workers load one judge's backend
        raise ValidationFailed(
            f"judge {spec.name!r} is a jury, which score jobs do not run: score it in process "
            "(rubricsvc score --via inprocess, or the reward endpoints)"
        )
    work, without = select_work(session, selection)
    return JobPlan(spec, work, without, chunk_judgments, selection.pairs)


def _plan_chunks(
    spec: JudgeSpec,
    work: Sequence[tuple[Completion, RubricVersion]],
    planned: Sequence[tuple[Case, Plan]],
    size: int,
) -> list[tuple[list[int], int]]:
    """Whole completions, in id order, grouped until a group plans ``size`` judgments, each
    group with the judgments its completions plan (``planned``: each (completion, version) of
    ``work``'s, in order; each key once, as its run counts them:
    ``scorer.distinct_items``). A mode that compares completions sees only its chunk's, so a
    prompt's completions (in prompt order) then stay in one chunk."""
    compares = get_mode(spec.mode).compares
    keys_of: dict[int, list[str]] = {}
    for (completion, _), (_, plan) in zip(work, planned, strict=True):
        keys_of.setdefault(completion.id, []).extend(item.key for item in plan.items)
    prompt_of = {c.id: c.prompt_id for c, _ in work}
    order = sorted(keys_of, key=lambda c: (prompt_of[c], c) if compares else (0, c))
    chunks: list[tuple[list[int], int]] = []
    ids: list[int] = []
    keys: set[str] = set()
    for index, completion_id in enumerate(order):
        ids.append(completion_id)
        keys.update(keys_of[completion_id])
        following = order[index + 1] if index + 1 < len(order) else None
        if compares and following is not None and prompt_of[following] == prompt_of[completion_id]:
            continue  # the rest of the prompt's group first
        if len(keys) >= size:
            chunks.append((ids, len(keys)))
            ids, keys = [], set()
    if ids:
        chunks.append((ids, len(keys)))
    return chunks


# --- sending after commit -------------------------------------------------------------------


def send_after_commit(session: Session, send: Sender, outbox: Outbox) -> None:
    """Send ``outbox`` once the session's transaction commits; drop it if it rolls back.

    A message for a row its worker cannot see yet (or never will) would be wasted or wrong.
    """
    if not any(outbox.values()):
        return
    if _OUTBOX_KEY not in session.info:
        session.info[_OUTBOX_KEY] = []
        event.listen(session, "after_commit", _flush_outbox)
        event.listen(session, "after_rollback", _drop_outbox)
    session.info[_OUTBOX_KEY].append((send, outbox))


def _flush_outbox(session: Session) -> None:
    pending = session.info.get(_OUTBOX_KEY) or []
    session.info[_OUTBOX_KEY] = []
    for send, outbox in pending:
        for judge, ids in outbox.items():
            if ids:
                send(judge, ids)


def _drop_outbox(session: Session) -> None:
    session.info[_OUTBOX_KEY] = []


# --- job states -----------------------------------------------------------------------------


def get_job(session: Session, job_id: int) -> ScoreJob:
    job = session.get(ScoreJob, job_id, populate_existing=True)
    if job is None:
        raise NotFoundError(f"no score job with id {job_id}")
    return job


def rollup(session: Session, job_id: int) -> ScoreJob:
    """Recompute the job's counts and status from its chunks, holding the job's row lock.

    The lock serializes concurrent roll-ups, so the last one sees every committed chunk.
    """
    job = session.scalars(
        select(ScoreJob)
        .where(ScoreJob.id == job_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one()
    by_status = _chunk_counts(session, job_id)
    states = Counter({status: row[0] for status, row in by_status.items()})
    job.total, job.done, job.cached, job.failed = _sums(by_status)[:4]
    if job.status != JobStatus.CANCELLED:
        job.status, job.error = _job_status(session, job_id, states)
    session.flush()
    return job


# Summed over a job's chunks: planned judgments, done, cached, failed, backend requests.
_SUMMED = (
    ScoreChunk.judgments,
    ScoreChunk.done,
    ScoreChunk.cached,
    ScoreChunk.failed,
    ScoreChunk.requests,
)


def _chunk_counts(session: Session, job_id: int) -> dict[ChunkStatus, tuple[int, ...]]:
    """By chunk status: the number of chunks, then their sums of ``_SUMMED``."""
    rows = session.execute(
        select(ScoreChunk.status, func.count(), *(func.sum(column) for column in _SUMMED))
        .where(ScoreChunk.job_id == job_id)
        .group_by(ScoreChunk.status)
    ).all()
    return {status: tuple(int(n or 0) for n in numbers) for status, *numbers in rows}


def _sums(by_status: dict[ChunkStatus, tuple[int, ...]]) -> list[int]:
    """``_SUMMED`` over every status: total, done, cached, failed, requests."""
    return [sum(row[i] for row in by_status.values()) for i in range(1, len(_SUMMED) + 1)]


def _job_status(
    session: Session, job_id: int, states: Counter[ChunkStatus]
) -> tuple[JobStatus, str | None]:
    unfinished = states[ChunkStatus.PENDING] + states[ChunkStatus.RUNNING]
    if unfinished == 0 and states[ChunkStatus.FAILED]:
        first = session.scalar(
            select(ScoreChunk.error)
            .where(ScoreChunk.job_id == job_id, ScoreChunk.status == ChunkStatus.FAILED)
            .order_by(ScoreChunk.position)
            .limit(1)
        )
        return JobStatus.FAILED, f"{states[ChunkStatus.FAILED]} chunk(s) failed; first: {first}"
    if unfinished == 0:
        return JobStatus.DONE, None
    started = states[ChunkStatus.RUNNING] + states[ChunkStatus.DONE] + states[ChunkStatus.FAILED]
    return (JobStatus.RUNNING if started else JobStatus.PENDING), None


def cancel(session: Session, job_id: int) -> ScoreJob:
    """Stop a job: pending chunks are not run, running ones stop at their next checkpoint."""
    job = get_job(session, job_id)
    if job.status == JobStatus.DONE:
        raise ConflictError(f"score job {job_id} is already done")
    session.execute(
        update(ScoreChunk)
        .where(
            ScoreChunk.job_id == job_id,
            ScoreChunk.status.in_([ChunkStatus.PENDING, ChunkStatus.RUNNING]),
        )
        .values(status=ChunkStatus.CANCELLED),
        execution_options={"synchronize_session": False},
    )
    job.status = JobStatus.CANCELLED
    session.flush()
    return rollup(session, job_id)


def resume(session: Session, job_id: int) -> Outbox:
    """Put failed, cancelled and lost chunks back in their queue; the chunks to send."""
    job = get_job(session, job_id)
    now = utcnow()
    session.execute(
        update(ScoreChunk)
        .where(
            ScoreChunk.job_id == job_id,
            ScoreChunk.status.in_([ChunkStatus.FAILED, ChunkStatus.CANCELLED]),
        )
        .values(status=ChunkStatus.PENDING, attempts=0, error=None, worker=None),
        execution_options={"synchronize_session": False},
    )
    job.status = JobStatus.PENDING
    session.flush()
    ids = session.scalars(
        update(ScoreChunk)
        .where(ScoreChunk.job_id == job_id, ScoreChunk.status == ChunkStatus.PENDING)
        .values(enqueued_at=now)
        .returning(ScoreChunk.id),
        execution_options={"synchronize_session": False},
    ).all()
    rollup(session, job_id)
    return {job.judge_config.name: sorted(ids)} if ids else {}


def reap(
    session: Session, heartbeat_timeout: float, requeue_after: float, now: datetime | None = None
) -> Outbox:
    """Chunks to send again: running ones whose heartbeat is stale (now pending again),
    pending ones never sent, and pending ones sent longer than ``requeue_after`` ago (their
    message may be lost) whose judge a live worker serves. Workers gone for a day are
    forgotten (``presence.forget_stale``).

    A chunk sent twice is harmless: only one delivery can claim it. But a judge nobody serves
    would get every pending chunk again at each pass, a copy per ``requeue_after`` piling up in
    its queue for as long as no worker comes (a day: 144 copies of each at the default); its
    chunks wait, their last message in the queue, until a worker of it is live, and are sent
    again at the first pass after that.
    """
    now = now or utcnow()
    served = presence.live_judges(session, heartbeat_timeout, now)
    stale_running = (
        ScoreChunk.status == ChunkStatus.RUNNING,
        ScoreChunk.heartbeat_at < now - timedelta(seconds=heartbeat_timeout),
    )
    stale = session.scalars(
        update(ScoreChunk)
        .where(*stale_running, ScoreChunk.id.in_(_unlocked(*stale_running)))
        .values(status=ChunkStatus.PENDING, worker=None, enqueued_at=now)
        .returning(ScoreChunk.id),
        execution_options={"synchronize_session": False},
    ).all()
    unsent = (
        ScoreChunk.status == ChunkStatus.PENDING,
        or_(
            ScoreChunk.enqueued_at.is_(None),
            and_(
                ScoreChunk.enqueued_at < now - timedelta(seconds=requeue_after),
                ScoreChunk.job_id.in_(
                    select(ScoreJob.id)
                    .join(JudgeConfig, ScoreJob.judge_config_id == JudgeConfig.id)
                    .where(JudgeConfig.name.in_(served))
                ),
            ),
        ),
    )
    lost = session.scalars(
        update(ScoreChunk)
        .where(*unsent, ScoreChunk.id.in_(_unlocked(*unsent)))
        .values(enqueued_at=now)
        .returning(ScoreChunk.id),
        execution_options={"synchronize_session": False},
    ).all()
    ids = sorted({*stale, *lost})
    if stale:
        log.warning("reaper: %d chunk(s) lost their worker: %s", len(stale), sorted(stale))
    presence.forget_stale(session)
    return _outbox(session, ids)


def _unlocked(*conditions: ColumnElement[bool]) -> Select[int]:
    """The ids of the chunks meeting ``conditions`` that no other transaction holds locked,
    locked for this one (PostgreSQL; SQLite has no row locks and reads them all).

    A chunk's row is locked while a checkpoint of it commits. A session that holds that lock
    and stops answering (its worker frozen, or stuck with the lock taken) would otherwise make
    the reaper wait on it, and every other lost chunk of every job with it; skipped, it is
    reaped at the first pass after the lock goes."""
    return select(ScoreChunk.id).where(*conditions).with_for_update(skip_locked=True)


def _outbox(session: Session, chunk_ids: Sequence[int]) -> Outbox:
    outbox: Outbox = {}
    for batch in batches(chunk_ids):
        rows = session.execute(
            select(ScoreChunk.id, JudgeConfig.name)
            .join(ScoreJob, ScoreChunk.job_id == ScoreJob.id)
            .join(JudgeConfig, ScoreJob.judge_config_id == JudgeConfig.id)
            .where(ScoreChunk.id.in_(batch))
            .order_by(ScoreChunk.id)
        ).all()
        for chunk_id, judge in rows:
            outbox.setdefault(judge, []).append(chunk_id)
    return outbox


# --- reading --------------------------------------------------------------------------------


def progress(session: Session, job_id: int, worker_timeout: float | None = None) -> JobProgress:
    """The job as its chunks stand now (running chunks' heartbeats included); no writes.

    ``worker_timeout``: how long a worker counts as live after its last heartbeat (the jobs'
    heartbeat timeout), to say whether a job sent to workers waits for one (None: not asked,
    ``waiting`` stays None)."""
    job = get_job(session, job_id)
    by_status = _chunk_counts(session, job_id)
    total, done, cached, failed, requests = _sums(by_status)
    workers = session.scalars(
        select(ScoreChunk.worker).where(
            ScoreChunk.job_id == job_id, ScoreChunk.status == ChunkStatus.RUNNING
        )
    ).all()
    return JobProgress(
        id=job.id,
        status=job.status.value,
        judge=job.judge_config.name,
        aggregation=job.aggregation,
        total=total,
        done=done,
        cached=cached,
        failed=failed,
        requests=requests,
        chunks={s.value: by_status[s][0] for s in ChunkStatus if s in by_status},
        workers=sorted(w for w in workers if w),
        error=job.error,
        created_at=job.created_at.isoformat() if job.created_at else None,
        updated_at=job.updated_at.isoformat() if job.updated_at else None,
        waiting=_waiting(session, job, by_status, worker_timeout),
    )


def _waiting(
    session: Session,
    job: ScoreJob,
    by_status: dict[ChunkStatus, tuple[int, ...]],
    worker_timeout: float | None,
) -> str | None:
    """Why the job's pending chunks are not taken, if no live worker serves its judge."""
    if job.status in FINISHED or not job.params.get(DISPATCHED_TO_WORKERS):
        return None
    if ChunkStatus.PENDING not in by_status or worker_timeout is None:
        return None
    judge = job.judge_config.name
    live, last_seen = presence.serving(session, judge, worker_timeout)
    if live:
        return None
    seen = f"last seen {last_seen[:19]}" if last_seen else "none has announced itself"
    return (
        f"no worker serves judge {judge} ({seen}): its chunks wait in their queue; "
        f"start one with `rubricsvc worker --judge {judge}`"
    )


def mark_dispatched_to_workers(session: Session, job: ScoreJob) -> None:
    """Record that the job's chunks go to workers through a broker (``progress`` then says
    when no worker serves its judge)."""
    if not job.params.get(DISPATCHED_TO_WORKERS):
        job.params = {**job.params, DISPATCHED_TO_WORKERS: True}
        session.flush()


def list_jobs(session: Session, limit: int = 50) -> list[ScoreJob]:
    return list(session.scalars(select(ScoreJob).order_by(ScoreJob.id.desc()).limit(limit)))


def pending_chunks(session: Session, job_id: int) -> list[int]:
    return list(
        session.scalars(
            select(ScoreChunk.id)
            .where(ScoreChunk.job_id == job_id, ScoreChunk.status == ChunkStatus.PENDING)
            .order_by(ScoreChunk.position)
        )
    )


def count_jobs(session: Session) -> int:
    return session.scalar(select(func.count(ScoreJob.id))) or 0


def job_report(session: Session, job_id: int) -> ScoreReport:
    """The job's scores read back from the database, as ``score`` reports them in-process."""
    job = get_job(session, job_id)
    state = progress(session, job_id)
    report = ScoreReport(judge=state.judge, aggregation=job.aggregation)
    report.judgments, report.cached, report.failed = state.total, state.cached, state.failed
    report.computed = max(state.done - state.cached - state.failed, 0)
    report.backend_requests = state.requests
    report.without_rubric = list(job.params.get("without_rubric", []))
    completion_ids = job_completion_ids(session, job_id)
    for batch in batches(completion_ids):
        report.scores.extend(job_scores(session, job, batch))
    report.checks = sum(1 for s in report.scores for c in s.criteria if c["status"] == "check")
    return report


def job_completion_ids(session: Session, job_id: int) -> list[int]:
    """The completions a job scores, in id order."""
    chunks = session.scalars(select(ScoreChunk.completion_ids).where(ScoreChunk.job_id == job_id))
    return sorted({c for ids in chunks for c in ids})


def job_scores(
    session: Session, job: ScoreJob, completion_ids: Sequence[int]
) -> list[ScoredCompletion]:
    """The stored scores of these completions under the job's judge, aggregation and versions
    (at most ``BATCH_SIZE`` ids: one statement)."""
    rows = session.execute(
        select(Score, Completion, Prompt, RubricVersion)
        .join(Completion, Score.completion_id == Completion.id)
        .join(Prompt, Completion.prompt_id == Prompt.id)
        .join(RubricVersion, Score.rubric_version_id == RubricVersion.id)
        .where(
            Score.judge_config_id == job.judge_config_id,
            Score.aggregation == job.aggregation,
            Score.completion_id.in_(completion_ids),
            Score.rubric_version_id.in_(job.params.get("versions", [])),
        )
        .order_by(Score.completion_id, Score.rubric_version_id)
    ).all()
    return [_scored(*row) for row in rows]


def _scored(
    row: Score, completion: Completion, prompt: Prompt, version: RubricVersion
) -> ScoredCompletion:
    details = row.details or {}
    return ScoredCompletion(
        completion.id,
        completion.external_id,
        prompt.external_id,
        completion.source,
        version.ref,
        row.value,
        row.coverage,
        row.status.value,
        list(details.get("reasons", [])),
        list(details.get("criteria", [])),
        {**empty_counts(), **details.get("failures", {})},
    )
