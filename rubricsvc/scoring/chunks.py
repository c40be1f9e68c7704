"""Running one chunk of a score job: claim it, score it with a heartbeat, record it.

Every dispatcher ends here: a Celery worker's task and the API's local threads call
``run_chunk`` with the chunk's id.

A claim is one atomic UPDATE (pending, or running with a stale heartbeat, becomes running
under this worker's token), so two deliveries of the same message cannot both score the
chunk; every later write names the token, so a worker whose chunk was given to another
cannot overwrite it. Judgments and scores are written idempotently by the scorer.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, and_, or_, select, update
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.orm import Session

from rubricsvc.backends.base import BackendError, JudgeBackend
from rubricsvc.config import JobSettings
from rubricsvc.db import session_scope
from rubricsvc.errors import RubricsvcError
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.failures import DEFAULT_JUDGE_FAILURE_ALARM, ResponseFailurePolicy
from rubricsvc.models import ChunkStatus, JobStatus, ScoreChunk, ScoreJob
from rubricsvc.models.base import utcnow
from rubricsvc.scoring.jobs import get_job, rollup
from rubricsvc.scoring.judge_configs import stored_spec
from rubricsvc.scoring.scorer import ScoreOptions, ScoreReport, score
from rubricsvc.scoring.selection import Selection

log = logging.getLogger(__name__)

BackendFor = Callable[[JudgeSpec], JudgeBackend]


@dataclass
class ChunkRun:
    chunk_id: int
    outcome: str  # done, skipped (not claimable), failed, stopped (cancelled or taken over)
    report: ScoreReport | None = None
    error: str | None = None


class ChunkStopped(RubricsvcError):
    """The chunk was cancelled, or given to another worker, while this one scored it."""


def is_transient(err: BaseException) -> bool:
    """Whether trying the chunk again later may help (the database or a backend was away)."""
    if isinstance(err, BackendError):
        return err.retryable
    if isinstance(err, OperationalError | InterfaceError | DisconnectionError):
        return True
    # Redis (shared API limits) unreachable; checked by name so redis stays optional.
    return type(err).__module__.startswith("redis.") and "Connection" in type(err).__name__


def worker_token() -> str:
    """Who holds a claim: host, process and a nonce (one process may claim a chunk twice)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def run_chunk(
    engine: Engine, chunk_id: int, backend_for: BackendFor, settings: JobSettings
) -> ChunkRun:
    """Claim chunk ``chunk_id`` and score it.

    A transient error (the database or the backend away) gives the chunk back and is raised,
    for the task to retry; any other error marks the chunk failed with its message.
    """
    token = worker_token()
    attempts = _claim(engine, chunk_id, token, settings.heartbeat_timeout)
    if attempts is None:
        return ChunkRun(chunk_id, "skipped")
    if attempts > settings.max_attempts:
        message = f"gave up after {settings.max_attempts} attempts: its workers were lost"
        _fail(engine, chunk_id, token, message)
        return ChunkRun(chunk_id, "failed", error=message)
    beat = Heartbeat(engine, chunk_id, token, settings.heartbeat_interval)
    beat.start()
    try:
        with session_scope(engine) as session:
            report = _score_chunk(session, chunk_id, token, backend_for, beat)
            _record(session, chunk_id, token, report)
        return ChunkRun(chunk_id, "done", report)
    except ChunkStopped as err:
        return ChunkRun(chunk_id, "stopped", error=str(err))
    except Exception as err:
        if is_transient(err):
            _release(engine, chunk_id, token)
            raise
        if not isinstance(err, RubricsvcError):
            log.exception("chunk %d failed", chunk_id)
        message = str(err) if isinstance(err, RubricsvcError) else f"{type(err).__name__}: {err}"
        _fail(engine, chunk_id, token, message)
        return ChunkRun(chunk_id, "failed", error=message)
    finally:
        beat.stop()


def _claim(engine: Engine, chunk_id: int, token: str, timeout: float) -> int | None:
    """Take the chunk if it is pending (or running with a stale heartbeat); its attempt number."""
    now = utcnow()
    with engine.begin() as conn:
        row = conn.execute(
            update(ScoreChunk)
            .where(
                ScoreChunk.id == chunk_id,
                or_(
                    ScoreChunk.status == ChunkStatus.PENDING,
                    and_(
                        ScoreChunk.status == ChunkStatus.RUNNING,
                        ScoreChunk.heartbeat_at < now - timedelta(seconds=timeout),
                    ),
                ),
            )
            .values(
                status=ChunkStatus.RUNNING,
                worker=token,
                heartbeat_at=now,
                attempts=ScoreChunk.attempts + 1,
                error=None,
            )
            .returning(ScoreChunk.job_id, ScoreChunk.attempts)
        ).first()
        if row is None:
            return None
        conn.execute(
            update(ScoreJob)
            .where(ScoreJob.id == row.job_id, ScoreJob.status == JobStatus.PENDING)
            .values(status=JobStatus.RUNNING, updated_at=now)
        )
    return int(row.attempts)


def _mine(chunk_id: int, token: str) -> Any:
    return and_(
        ScoreChunk.id == chunk_id,
        ScoreChunk.worker == token,
        ScoreChunk.status == ChunkStatus.RUNNING,
    )


def placed_elsewhere(job_id: int, stored: dict[str, Any], spec: JudgeSpec) -> None:
    """Refuse, saying why, a job whose judge this machine would place at another device or
    precision than the submitting one did (``dtype: auto`` is bfloat16 on a GPU, float32 on a
    CPU): its verdicts would not be the submitted config's."""
    here = spec.hashed_settings()
    if {k: v for k, v in stored.items() if k != "backend_options"} != {
        k: v for k, v in here.items() if k != "backend_options"
    }:
        return
    keys = ("device", "dtype")
    then = {k: stored.get("backend_options", {}).get(k) for k in keys}
    now = {k: here["backend_options"].get(k) for k in keys}
    if then == now:
        return
    raise RubricsvcError(
        f"job {job_id}'s judge was submitted to run on {_placed(then)}, and this machine would "
        f"run it on {_placed(now)}: set device and dtype in judge {spec.name!r}'s backend "
        "options so every machine runs it alike, or run the job where it was submitted"
    )


def _placed(options: dict[str, Any]) -> str:
    if options.get("device") is None:
        return "the CPU in float32"
    return f"{options['device']} in {options['dtype']}"


def _score_chunk(
    session: Session, chunk_id: int, token: str, backend_for: BackendFor, beat: Heartbeat
) -> ScoreReport:
    chunk = session.get(ScoreChunk, chunk_id)
    assert chunk is not None
    job = get_job(session, chunk.job_id)
    spec = stored_spec(job.judge_config)
    if spec.config_hash() != job.judge_config.config_hash:
        placed_elsewhere(job.id, job.judge_config.settings.get("hashed", {}), spec)
        # Submitted before an upgrade that changed what these settings make the judge see:
        # its scores are read under the job's config, so none may be written under another.
        raise RubricsvcError(
            f"job {job.id} was submitted for judge config {job.judge_config.config_hash[:12]}, "
            "which this rubricsvc would judge differently: submit the work again"
        )
    chosen = job.params.get("selection", {})
    selection = Selection(
        completion_ids=tuple(chunk.completion_ids),
        rubric_ref=chosen.get("rubric_ref"),
        include_drafts=bool(chosen.get("include_drafts", False)),
        # The versions found at submission: the job's report reads scores under exactly these.
        version_ids=tuple(job.params.get("versions", [])),
        # A shared version found through assignments scores only the completions assigned it.
        shared_by_assignment=chosen.get("rubric_ref") is None,
        pairs=tuple((int(a), int(b)) for a, b in chosen.get("pairs", [])),
    )
    options = ScoreOptions(
        aggregation=job.aggregation,
        min_coverage=float(job.params["min_coverage"]),
        gate_cap=job.params.get("gate_cap"),
        chunk_judgments=max(chunk.judgments, 1),  # the whole chunk in one backend batch
        response_failure=ResponseFailurePolicy(
            job.params.get("response_failure", ResponseFailurePolicy.WORST)
        ),
        judge_failure_alarm=float(
            job.params.get("judge_failure_alarm", DEFAULT_JUDGE_FAILURE_ALARM)
        ),
    )

    def checkpoint() -> None:
        # The claim is checked, and its row locked, in the transaction that holds this
        # batch's judgments and scores: a worker whose chunk was given to another (a host
        # that was cut off and came back) rolls its late writes back instead of committing.
        _hold_claim(session, chunk_id, token)
        session.commit()

    return score(
        session,
        spec,
        selection,
        options,
        backend_factory=lambda: backend_for(spec),
        progress=beat.progress,
        checkpoint=checkpoint,
        judge_row=job.judge_config,
    )


def _hold_claim(session: Session, chunk_id: int, token: str) -> None:
    """Lock the chunk's row if this worker still holds its claim, else raise ``ChunkStopped``.

    The lock lasts until the transaction ends, so a reclaim (``_claim``, the reaper) waits
    for this transaction's commit and cannot slip in between the check and the commit.
    """
    held = session.scalar(select(ScoreChunk.id).where(_mine(chunk_id, token)).with_for_update())
    if held is None:
        raise ChunkStopped(f"chunk {chunk_id} was cancelled or given to another worker")


def _finish(session: Session, chunk_id: int, token: str, **values: Any) -> bool:
    """Write the chunk's final state if this worker still holds it, then roll its job up;
    whether it did."""
    job_id = session.scalar(
        update(ScoreChunk)
        .where(_mine(chunk_id, token))
        .values(**values)
        .returning(ScoreChunk.job_id),
        execution_options={"synchronize_session": False},
    )
    if job_id is not None:
        rollup(session, job_id)
    return job_id is not None


def _record(session: Session, chunk_id: int, token: str, report: ScoreReport) -> None:
    """Mark the chunk done in the transaction of its last writes; a worker that no longer
    holds the claim raises ``ChunkStopped``, so those writes are rolled back."""
    recorded = _finish(
        session,
        chunk_id,
        token,
        status=ChunkStatus.DONE,
        heartbeat_at=utcnow(),
        done=report.judgments,
        cached=report.cached,
        failed=report.failed,
        requests=report.backend_requests,
    )
    if not recorded:
        raise ChunkStopped(f"chunk {chunk_id} was cancelled or given to another worker")


def _fail(engine: Engine, chunk_id: int, token: str, message: str) -> None:
    with session_scope(engine) as session:
        _finish(session, chunk_id, token, status=ChunkStatus.FAILED, error=message[:2000])


def _release(engine: Engine, chunk_id: int, token: str) -> None:
    """Give the chunk back (best effort: if the database is away, the reaper will)."""
    try:
        with engine.begin() as conn:
            conn.execute(
                update(ScoreChunk)
                .where(_mine(chunk_id, token))
                .values(status=ChunkStatus.PENDING, worker=None, enqueued_at=utcnow())
            )
    except Exception as err:
        log.warning("could not give chunk %d back: %s", chunk_id, err)


class Heartbeat:
    """A thread that writes the chunk's heartbeat and progress while its worker lives."""

    def __init__(self, engine: Engine, chunk_id: int, token: str, interval: float) -> None:
        self.engine = engine
        self.chunk_id = chunk_id
        self.token = token
        self.interval = interval
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{chunk_id}", daemon=True)

    def progress(self, done: int, _total: int) -> None:
        self.done = done

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                with self.engine.begin() as conn:
                    conn.execute(
                        update(ScoreChunk)
                        .where(_mine(self.chunk_id, self.token))
                        .values(heartbeat_at=utcnow(), done=self.done)
                    )
            except Exception as err:  # the database is away: the chunk's own writes fail too
                log.warning("heartbeat of chunk %d not written: %s", self.chunk_id, err)
