"""Score jobs without a broker: chunking, job identity, claims, reaping, cancel and resume.

The chunk runner is called in this process, as a worker's task calls it, on SQLite and
PostgreSQL; the backend is scripted because these tests are about the bookkeeping.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from sqlalchemy import Engine, func, select, text, update
from sqlalchemy.orm import Session

from rubricsvc.backends.base import BackendError, JudgeBackend
from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.config import JobSettings
from rubricsvc.db import session_scope
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import ChunkStatus, Judgment, Score, ScoreChunk, ScoreJob, WorkerPresence
from rubricsvc.models.base import utcnow
from rubricsvc.scoring import jobs, lifecycle, presence
from rubricsvc.scoring.chunks import ChunkRun, run_chunk
from rubricsvc.scoring.dispatch import LocalDispatcher
from rubricsvc.scoring.scorer import ScoreOptions, ScoreReport, score
from rubricsvc.scoring.selection import Selection
from tests.cli_runner import CliResult, run_cli
from tests.requirements import require_module
from tests.workers_harness import (
    REDIS_URL,
    clean_redis,
    fast_judge,
    redis_unavailable,
    require,
    seed,
)

JUDGE = fast_judge()
SETTINGS = JobSettings(heartbeat_interval=0.2, heartbeat_timeout=30, max_attempts=3)


@pytest.fixture
def seeded(database_url: str, engine: Engine) -> Iterator[Engine]:
    """3 prompts x 4 completions x 5 criteria = 60 judgments."""
    seed(database_url, 3, 4, 5, [JUDGE])
    yield engine


def submit(engine: Engine, aggregation: str = "rar", size: int = 12) -> jobs.Submission:
    with session_scope(engine) as session:
        submission = jobs.submit(
            session, JUDGE, Selection(), ScoreOptions(aggregation=aggregation), size
        )
        session.expunge(submission.job)
    return submission


def scripted(_spec: JudgeSpec) -> JudgeBackend:
    return ScriptedBackend()


def run(engine: Engine, chunk_id: int, backend_for: object = scripted) -> ChunkRun:
    return run_chunk(engine, chunk_id, backend_for, SETTINGS)  # type: ignore[arg-type]


def chunks(engine: Engine) -> list[ScoreChunk]:
    with session_scope(engine) as session:
        rows = list(session.scalars(select(ScoreChunk).order_by(ScoreChunk.id)))
        session.expunge_all()
    return rows


def job_state(engine: Engine, job_id: int) -> jobs.JobProgress:
    with session_scope(engine) as session:
        return jobs.progress(session, job_id)


def test_a_job_is_whole_completions_in_chunks_and_the_same_work_finds_it(seeded: Engine) -> None:
    first = submit(seeded)
    assert first.created
    planned = chunks(seeded)
    # 5 judgments per completion, chunks of at least 12: 3 completions (15) a chunk.
    assert [c.judgments for c in planned] == [15, 15, 15, 15]
    assert sorted(c for chunk in planned for c in chunk.completion_ids) == list(range(1, 13))
    assert first.outbox == {"fast": [c.id for c in planned]}
    assert first.job.total == 60

    again = submit(seeded)
    assert (again.created, again.job.id, again.outbox) == (False, first.job.id, {})
    other = submit(seeded, aggregation="healthbench")
    assert other.created and other.job.id != first.job.id
    with session_scope(seeded) as session:
        assert session.scalar(select(func.count()).select_from(ScoreJob)) == 2


def test_chunks_are_sent_only_after_the_commit(seeded: Engine) -> None:
    sent: list[tuple[str, list[int]]] = []

    def send(judge: str, ids: object) -> None:
        sent.append((judge, list(ids)))  # type: ignore[call-overload]

    with pytest.raises(RuntimeError), session_scope(seeded) as session:
        submission = jobs.submit(session, JUDGE, Selection(), ScoreOptions(), 12)
        jobs.send_after_commit(session, send, submission.outbox)
        raise RuntimeError("the command fails after submitting")
    assert sent == []
    assert chunks(seeded) == []  # rolled back with it

    with session_scope(seeded) as session:
        submission = jobs.submit(session, JUDGE, Selection(), ScoreOptions(), 12)
        jobs.send_after_commit(session, send, submission.outbox)
        assert sent == []  # not before the commit
    assert sent == [("fast", [c.id for c in chunks(seeded)])]


def test_chunks_score_like_the_in_process_path_and_run_once(seeded: Engine) -> None:
    job = submit(seeded).job
    outcomes = [run(seeded, c.id) for c in chunks(seeded)]
    assert [o.outcome for o in outcomes] == ["done"] * 4
    assert run(seeded, outcomes[0].chunk_id).outcome == "skipped"  # a redelivered message
    state = job_state(seeded, job.id)
    assert (state.status, state.total, state.done, state.cached, state.failed) == (
        "done",
        60,
        60,
        0,
        0,
    )
    assert state.requests == 60
    with session_scope(seeded) as session:
        report = jobs.job_report(session, job.id)
        assert session.scalar(select(func.count()).select_from(Judgment)) == 60
        # The in-process path over the same database reads every verdict from the cache
        # and computes the same scores.
        local = score(session, JUDGE, Selection(), ScoreOptions(), lambda: ScriptedBackend())
    assert local.cached == 60 and local.computed == 0
    assert sorted((s.completion_id, s.value, s.coverage) for s in report.scores) == sorted(
        (s.completion_id, s.value, s.coverage) for s in local.scores
    )


def test_a_claim_is_exclusive_until_its_heartbeat_is_stale(seeded: Engine) -> None:
    submit(seeded)
    first = chunks(seeded)[0]
    with session_scope(seeded) as session:
        session.execute(
            update(ScoreChunk)
            .where(ScoreChunk.id == first.id)
            .values(status=ChunkStatus.RUNNING, worker="elsewhere:1:x", heartbeat_at=utcnow())
        )
    assert run(seeded, first.id).outcome == "skipped"  # a live worker holds it
    with session_scope(seeded) as session:
        session.execute(
            update(ScoreChunk)
            .where(ScoreChunk.id == first.id)
            .values(heartbeat_at=utcnow() - timedelta(seconds=SETTINGS.heartbeat_timeout + 1))
        )
    assert run(seeded, first.id).outcome == "done"  # its worker stopped reporting
    (taken,) = [c for c in chunks(seeded) if c.id == first.id]
    assert (taken.status, taken.attempts) == (ChunkStatus.DONE, 1)
    assert taken.worker is not None and not taken.worker.startswith("elsewhere")


def test_a_worker_that_lost_its_claim_writes_nothing(seeded: Engine) -> None:
    """A worker cut off mid-chunk whose chunk went to another comes back: the judgments and
    scores it made are rolled back with the refused claim, not committed."""
    submit(seeded)
    first = chunks(seeded)[0]

    def taken_over(_spec: JudgeSpec) -> JudgeBackend:
        def reclaim() -> None:
            # While this worker judges, its chunk is reclaimed and another claims it.
            with session_scope(seeded) as session:
                session.execute(
                    update(ScoreChunk)
                    .where(ScoreChunk.id == first.id)
                    .values(worker="elsewhere:1:x", attempts=ScoreChunk.attempts + 1)
                )

        def probs(_request: object) -> dict[str, float]:
            reclaim()
            return {"yes": 0.9, "no": 0.1}

        def text(_request: object) -> str:
            reclaim()
            return "It does.\nVERDICT: YES"

        return ScriptedBackend(text=text, probs=probs)

    outcome = run(seeded, first.id, taken_over)
    assert outcome.outcome == "stopped" and "given to another worker" in (outcome.error or "")
    with session_scope(seeded) as session:
        assert session.scalar(select(func.count()).select_from(Judgment)) == 0
        assert session.scalar(select(func.count()).select_from(Score)) == 0
    (held,) = [c for c in chunks(seeded) if c.id == first.id]
    assert (held.status, held.worker, held.done) == (ChunkStatus.RUNNING, "elsewhere:1:x", 0)


def lose_its_worker(session: Session, chunk_id: int) -> None:
    """The chunk is running on worker ``gone:1:x``, whose heartbeat stopped 5 minutes ago."""
    session.execute(
        update(ScoreChunk)
        .where(ScoreChunk.id == chunk_id)
        .values(
            status=ChunkStatus.RUNNING,
            worker="gone:1:x",
            heartbeat_at=utcnow() - timedelta(minutes=5),
        )
    )


def test_the_reaper_gives_back_lost_chunks_and_resends_old_messages(seeded: Engine) -> None:
    submit(seeded)
    lost, queued, fresh, _ = chunks(seeded)
    now = utcnow()
    with session_scope(seeded) as session:
        lose_its_worker(session, lost.id)
        session.execute(
            update(ScoreChunk)
            .where(ScoreChunk.id == fresh.id)
            .values(status=ChunkStatus.RUNNING, worker="alive:2:y", heartbeat_at=now)
        )
        session.execute(
            update(ScoreChunk)
            .where(ScoreChunk.id == queued.id)
            .values(enqueued_at=now - timedelta(hours=1))
        )
        presence.announce(session, "alive:2:y", "host-a", ["fast"])  # a worker serves "fast"
    with session_scope(seeded) as session:
        outbox = jobs.reap(session, heartbeat_timeout=60, requeue_after=600)
    assert outbox == {"fast": [lost.id, queued.id]}
    states = {c.id: (c.status, c.worker) for c in chunks(seeded)}
    assert states[lost.id] == (ChunkStatus.PENDING, None)
    assert states[fresh.id] == (ChunkStatus.RUNNING, "alive:2:y")
    with session_scope(seeded) as session:
        assert jobs.reap(session, heartbeat_timeout=60, requeue_after=600) == {}


@pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)  # row locks: SQLite has none
def test_the_reaper_skips_chunks_another_session_holds_locked(seeded: Engine) -> None:
    """A session that locked a chunk's row and stopped answering (its worker frozen mid
    checkpoint) does not stall the reaper: the other chunks are reaped at once, the locked
    ones at the first pass after the lock goes."""
    submit(seeded)
    stale_locked, stale, unsent_locked, unsent = chunks(seeded)
    with session_scope(seeded) as session:
        lose_its_worker(session, stale_locked.id)
        lose_its_worker(session, stale.id)
        session.execute(
            update(ScoreChunk)
            .where(ScoreChunk.id.in_([unsent_locked.id, unsent.id]))
            .values(enqueued_at=None)
        )
    locked = [stale_locked.id, unsent_locked.id]
    with seeded.connect() as holder:
        holder.execute(select(ScoreChunk.id).where(ScoreChunk.id.in_(locked)).with_for_update())
        with session_scope(seeded) as session:
            # Waiting on the lock instead would fail here after 5 s (LockNotAvailable).
            session.execute(text("SET LOCAL lock_timeout = '5s'"))
            assert jobs.reap(session, heartbeat_timeout=60, requeue_after=600) == {
                "fast": [stale.id, unsent.id]
            }
        holder.rollback()
    states = {c.id: c.status for c in chunks(seeded)}
    assert (states[stale.id], states[stale_locked.id]) == (ChunkStatus.PENDING, ChunkStatus.RUNNING)
    with session_scope(seeded) as session:
        assert jobs.reap(session, heartbeat_timeout=60, requeue_after=600) == {"fast": locked}
    assert {c.id: c.status for c in chunks(seeded)}[stale_locked.id] == ChunkStatus.PENDING


def test_the_reaper_sends_a_judge_nobody_serves_each_chunk_once(seeded: Engine) -> None:
    """Without a live worker of its judge, a pending chunk's message stays the one in its
    queue: never-sent chunks are sent, old ones are not sent again at every pass (copies would
    pile up for as long as no worker comes). They are once a worker of the judge is live."""
    submit(seeded)
    never, old, recent, lost = chunks(seeded)
    now = utcnow()
    with session_scope(seeded) as session:
        for chunk, sent in ((never, None), (old, now - timedelta(hours=1)), (recent, now)):
            session.execute(
                update(ScoreChunk).where(ScoreChunk.id == chunk.id).values(enqueued_at=sent)
            )
        lose_its_worker(session, lost.id)
        # A worker of another judge is live, one of "fast" was last seen ten minutes ago.
        presence.announce(session, "other:3:z", "host-a", ["slow"])
        presence.announce(session, "gone:1:x", "host-b", ["fast"])
        session.execute(
            update(WorkerPresence)
            .where(WorkerPresence.name == "gone:1:x")
            .values(seen_at=now - timedelta(minutes=10))
        )
    with session_scope(seeded) as session:
        # The never-sent chunk and the one its worker lost are sent (once); the old one not.
        assert jobs.reap(session, heartbeat_timeout=60, requeue_after=600) == {
            "fast": [never.id, lost.id]
        }
    with session_scope(seeded) as session:
        assert jobs.reap(session, heartbeat_timeout=60, requeue_after=600) == {}
        assert session.get(ScoreChunk, old.id).enqueued_at is not None
    with session_scope(seeded) as session:
        presence.announce(session, "back:4:w", "host-b", ["fast"])
    with session_scope(seeded) as session:
        assert jobs.reap(session, heartbeat_timeout=60, requeue_after=600) == {"fast": [old.id]}


def test_cancel_then_resume(seeded: Engine) -> None:
    job = submit(seeded).job
    first, *rest = chunks(seeded)
    assert run(seeded, first.id).outcome == "done"
    with session_scope(seeded) as session:
        assert jobs.cancel(session, job.id).status.value == "cancelled"
    assert {c.status for c in chunks(seeded) if c.id != first.id} == {ChunkStatus.CANCELLED}
    assert run(seeded, rest[0].id).outcome == "skipped"

    with session_scope(seeded) as session:
        outbox = jobs.resume(session, job.id)
    assert outbox == {"fast": [c.id for c in rest]}
    assert job_state(seeded, job.id).status == "running"
    for chunk in rest:
        assert run(seeded, chunk.id).outcome == "done"
    assert job_state(seeded, job.id).status == "done"
    assert submit(seeded).outbox == {}  # done: submitting again sends nothing


def test_a_configuration_error_fails_the_chunk_and_the_job_says_why(seeded: Engine) -> None:
    job = submit(seeded).job

    def broken(_spec: JudgeSpec) -> JudgeBackend:
        raise ValidationFailed("unknown judge backend 'nope'")

    results = [run(seeded, c.id, broken) for c in chunks(seeded)]
    assert {r.outcome for r in results} == {"failed"}
    state = job_state(seeded, job.id)
    assert state.status == "failed"
    assert state.error == "4 chunk(s) failed; first: unknown judge backend 'nope'"
    with session_scope(seeded) as session:
        assert session.scalar(select(func.count()).select_from(Score)) == 0

    again = submit(seeded)  # submitting a failed job again resumes it
    assert again.job.id == job.id and len(again.outbox["fast"]) == 4
    assert {c.status for c in chunks(seeded)} == {ChunkStatus.PENDING}


def test_a_transient_error_gives_the_chunk_back_for_a_retry(seeded: Engine) -> None:
    submit(seeded)
    first = chunks(seeded)[0]

    def away(_spec: JudgeSpec) -> JudgeBackend:
        raise BackendError("model server restarting", retryable=True, status=503)

    with pytest.raises(BackendError):
        run(seeded, first.id, away)
    (back,) = [c for c in chunks(seeded) if c.id == first.id]
    assert (back.status, back.worker, back.attempts) == (ChunkStatus.PENDING, None, 1)
    assert run(seeded, first.id).outcome == "done"


def test_a_chunk_that_keeps_losing_its_worker_is_given_up(seeded: Engine) -> None:
    job = submit(seeded).job
    first = chunks(seeded)[0]
    with session_scope(seeded) as session:
        session.execute(
            update(ScoreChunk)
            .where(ScoreChunk.id == first.id)
            .values(attempts=SETTINGS.max_attempts)
        )
    result = run(seeded, first.id)
    assert result.outcome == "failed"
    assert result.error == "gave up after 3 attempts: its workers were lost"
    assert job_state(seeded, job.id).chunks == {"failed": 1, "pending": 3}


# --- dispatchers ----------------------------------------------------------------------------


def test_the_local_dispatcher_runs_chunks_on_threads_after_the_commit(seeded: Engine) -> None:
    reports: list[ScoreReport] = []
    with ThreadPoolExecutor(2) as executor:
        local = LocalDispatcher(executor, seeded, scripted, SETTINGS, reports.append)
        with session_scope(seeded) as session:
            submission = lifecycle.submit(session, local, JUDGE, Selection(), ScoreOptions(), 12)
            job_id = submission.job.id
            executor.submit(lambda: None).result()
            assert reports == []  # nothing was handed over before the commit
    # Leaving the executor waited for its threads.
    state = job_state(seeded, job_id)
    assert (state.status, state.done, state.total) == ("done", 60, 60)
    assert sorted(r.judgments for r in reports) == [15, 15, 15, 15]


def test_submitting_again_resends_what_a_lost_process_left_only_without_a_broker(
    seeded: Engine,
) -> None:
    submit(seeded)
    sent: list[int] = []

    class Recorder:
        keeps_messages = True

        def send(self, _judge: str, chunk_ids: object) -> None:
            sent.extend(chunk_ids)  # type: ignore[call-overload]

    broker = Recorder()
    with session_scope(seeded) as session:
        lifecycle.submit(session, broker, JUDGE, Selection(), ScoreOptions(), 12)
    assert sent == []  # the broker still holds the messages
    broker.keeps_messages = False  # as the local dispatcher: its threads died with the process
    with session_scope(seeded) as session:
        lifecycle.submit(session, broker, JUDGE, Selection(), ScoreOptions(), 12)
    assert sent == [c.id for c in chunks(seeded)]


def test_a_delivery_counts_what_it_sent_and_keeps_a_failure(seeded: Engine) -> None:
    class Down:
        keeps_messages = True

        def send(self, _judge: str, _chunk_ids: object) -> None:
            raise ConnectionError("broker away")

    send = lifecycle.Delivery(Down())
    with session_scope(seeded) as session:
        submission = lifecycle.submit(session, send, JUDGE, Selection(), ScoreOptions(), 12)
    assert (send.sent, str(send.error)) == (0, "broker away")
    send = lifecycle.Delivery(Down())
    with session_scope(seeded) as session:
        jobs.cancel(session, submission.job.id)
    with session_scope(seeded) as session:
        assert lifecycle.resume(session, send, submission.job.id) == {
            "fast": [c.id for c in chunks(seeded)]
        }
    assert isinstance(send.error, ConnectionError)  # the job is stored and resumable


# --- the commands ---------------------------------------------------------------------------


def test_without_a_broker_scoring_on_workers_says_what_to_set(database_url: str) -> None:
    expected = (
        "error: no broker configured: set RUBRICSVC_BROKER_URL (redis://... or amqp://...) "
        "to score on workers"
    )
    for args in (("score", "--via", "celery"), ("worker", "--judge", "embedded")):
        result = run_cli(*args, database_url=database_url, env={"RUBRICSVC_BROKER_URL": ""})
        assert result.code != 0
        assert result.stderr.strip() == expected


def test_jobs_list_status_cancel(seeded: Engine, database_url: str) -> None:
    job = submit(seeded).job
    run(seeded, chunks(seeded)[0].id)

    def cli(*args: str) -> CliResult:
        return run_cli(*args, database_url=database_url, env={"RUBRICSVC_BROKER_URL": ""})

    listed = cli("jobs", "list", "--json").json()
    assert [(j["id"], j["status"], j["done"], j["total"]) for j in listed] == [
        (job.id, "running", 15, 60)
    ]
    status = cli("jobs", "status", str(job.id), "--json").json()
    assert status["chunks"] == {"done": 1, "pending": 3}
    assert cli("jobs", "cancel", str(job.id)).stdout.strip() == f"job {job.id}: cancelled"
    shown = cli("jobs", "status", str(job.id)).stdout
    assert f"job {job.id}: cancelled, judge fast, rar" in shown
    assert "chunks: 1 done, 3 cancelled" in shown  # in the order of a chunk's life
    missing = cli("jobs", "status", "999")
    assert (missing.code, missing.stderr.strip()) == (3, "error: no score job with id 999")


@pytest.mark.broker
def test_resume_puts_the_chunks_on_the_judges_queue(seeded: Engine, database_url: str) -> None:
    require_module("celery", "workers")
    require(redis_unavailable())
    import redis

    job = submit(seeded).job
    with session_scope(seeded) as session:
        jobs.cancel(session, job.id)
    prefix = f"test-{uuid.uuid4().hex[:8]}."
    env = {"RUBRICSVC_BROKER_URL": REDIS_URL, "RUBRICSVC_BROKER_QUEUE_PREFIX": prefix}
    try:
        result = run_cli("jobs", "resume", str(job.id), database_url=database_url, env=env)
        assert result.code == 0, result.stderr
        assert result.stdout.strip() == f"job {job.id}: 4 chunk(s) sent"
        queued = redis.Redis.from_url(REDIS_URL).lrange(f"{prefix}fast", 0, -1)
        bodies = sorted(json.loads(base64.b64decode(json.loads(m)["body"]))[0] for m in queued)
        assert bodies == [[c.id] for c in chunks(seeded)]  # ids only
    finally:
        clean_redis(REDIS_URL, prefix)


def test_versions_approved_mid_job_do_not_change_it(seeded: Engine) -> None:
    """Chunks score with the versions found at submission, which the job's report reads."""
    from rubricsvc.rubrics import versions as rubrics
    from tests.helpers import rubric_spec

    job = submit(seeded).job
    with session_scope(seeded) as session:
        pinned = set(session.get(ScoreJob, job.id).params["versions"])  # type: ignore[union-attr]
        edited = rubric_spec(
            "load/0",
            criteria=[{"text": "A criterion added after submission", "weight": 1}],
            prompt={"text": "Question 0?", "external_id": "p0"},
        )
        newer = rubrics.save_rubric(session, edited).version
        rubrics.approve(session, newer, "tests")
        newer_id = newer.id
    assert newer_id not in pinned
    for chunk in chunks(seeded):
        assert run(seeded, chunk.id).outcome == "done"
    with session_scope(seeded) as session:
        report = jobs.job_report(session, job.id)
        used = set(session.scalars(select(Score.rubric_version_id)))
    assert len(report.scores) == 12  # every completion, none lost to the new version
    assert used == pinned


def test_a_job_no_live_worker_serves_says_it_waits(seeded: Engine) -> None:
    """Workers record the judges they serve (``presence``); a job sent to workers whose judge
    no live worker serves says so, instead of looking merely pending."""

    class Broker:  # a dispatcher whose messages outlive this process, as a broker's do
        keeps_messages = True

        def send(self, judge: str, chunk_ids: object) -> None:
            pass

    with session_scope(seeded) as session:
        submission = lifecycle.submit(session, Broker(), JUDGE, Selection(), ScoreOptions(), 12)
        job_id = submission.job.id
    with session_scope(seeded) as session:
        waiting = jobs.progress(session, job_id, worker_timeout=30).waiting
    assert waiting is not None and "no worker serves judge fast" in waiting
    assert "none has announced itself" in waiting
    with session_scope(seeded) as session:
        presence.announce(session, "host-b:7:abc", "host-b", ["other"])
        presence.announce(session, "host-a:9:def", "host-a", ["fast", "other"])
    with session_scope(seeded) as session:
        assert jobs.progress(session, job_id, worker_timeout=30).waiting is None
        assert [(w.host, w.judges, w.live) for w in presence.workers(session, 30)] == [
            ("host-a", ["fast", "other"], True),
            ("host-b", ["other"], True),
        ]
    with session_scope(seeded) as session:  # host A stops refreshing its row
        session.execute(
            update(WorkerPresence)
            .where(WorkerPresence.name == "host-a:9:def")
            .values(seen_at=utcnow() - timedelta(seconds=60))
        )
    with session_scope(seeded) as session:
        waiting = jobs.progress(session, job_id, worker_timeout=30).waiting
        assert waiting is not None and "last seen" in waiting
        presence.leave(session, "host-b:7:abc")
        assert [w.name for w in presence.workers(session, 30)] == ["host-a:9:def"]
    # The reaper forgets a worker gone for a day; one lost a minute ago is still listed.
    with session_scope(seeded) as session:
        presence.announce(session, "host-c:5:ghi", "host-c", ["fast"])
        session.execute(
            update(WorkerPresence)
            .where(WorkerPresence.name == "host-c:5:ghi")
            .values(seen_at=utcnow() - timedelta(seconds=presence.KEPT_AFTER_LOST_SECONDS + 60))
        )
    with session_scope(seeded) as session:
        jobs.reap(session, heartbeat_timeout=30, requeue_after=3600)
    with session_scope(seeded) as session:
        assert [w.name for w in presence.workers(session, 30)] == ["host-a:9:def"]
    # In process (no broker): nothing waits for a worker.
    with session_scope(seeded) as session:
        other = jobs.submit(
            session, JUDGE, Selection(), ScoreOptions(aggregation="healthbench"), 12
        )
        assert jobs.progress(session, other.job.id, worker_timeout=30).waiting is None
