"""Distributed scoring on real Celery workers over PostgreSQL with Redis or RabbitMQ.

Worker processes are started as a user would (``rubricsvc worker --judge NAME``) and jobs
are submitted and followed with ``rubricsvc score --via celery``. Delivery is what these
tests are about, so the thousands of judgments come from the scripted backend (behind the
fault injector, which also makes it slow enough to be interrupted); the real model judges
in the failure test and in the comparison of the in-process and Celery paths.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select

from rubricsvc import db
from rubricsvc.judging.aggregation import Outcome, aggregate
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import (
    ChunkStatus,
    Criterion,
    Judgment,
    JudgmentStatus,
    Score,
    ScoreChunk,
)
from tests.cli_runner import CliResult
from tests.requirements import require_module
from tests.tiny_model import tiny_judge_dir, tiny_judge_spec
from tests.workers_harness import (
    Cluster,
    MakeCluster,
    Worker,
    fast_judge,
    finish,
    load_examples,
    private_postgres,
    private_redis,
    score_via_celery,
    seed,
    tally,
    wait_for,
)

pytestmark = [pytest.mark.postgres, pytest.mark.broker, pytest.mark.slow]

require_module("celery", "workers")


def job_id_of(result: CliResult) -> int:
    found = re.search(r"^job (\d+):", result.stderr, re.MULTILINE)
    assert found, result.stderr
    return int(found.group(1))


def running_chunk(url: str, workers: list[Worker]) -> tuple[Worker, int, str] | None:
    """A chunk being scored right now by one of ``workers`` (alive), with its claim token."""
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(ScoreChunk.id, ScoreChunk.worker).where(
                    ScoreChunk.status == ChunkStatus.RUNNING
                )
            ).all()
    finally:
        engine.dispose()
    alive = {w.pid: w for w in workers if w.process.poll() is None}
    for chunk_id, token in rows:
        pid = int(token.split(":")[1]) if token else -1
        if pid in alive:
            return alive[pid], chunk_id, token
    return None


def chunk_state(url: str, chunk_id: int) -> tuple[ChunkStatus, str | None]:
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                select(ScoreChunk.status, ScoreChunk.worker).where(ScoreChunk.id == chunk_id)
            ).one()
        return row[0], row[1]
    finally:
        engine.dispose()


def done_chunks(url: str) -> int:
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            statuses = conn.scalars(select(ScoreChunk.status)).all()
        return sum(1 for s in statuses if s == ChunkStatus.DONE)
    except Exception:  # the database is restarting
        return -1
    finally:
        engine.dispose()


def done_at_least(url: str, wanted: int) -> int | None:
    """The number of done chunks once it reaches ``wanted``."""
    done = done_chunks(url)
    return done if done >= wanted else None


# --- 1. two workers, every judgment once ---------------------------------------------------


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_two_workers_judge_every_pair_exactly_once(make_cluster: MakeCluster, broker: str) -> None:
    cluster = make_cluster(broker, RUBRICSVC_JOBS_CHUNK_JUDGMENTS="64")
    seed(cluster.database_url, 10, 25, 8, [fast_judge(latency=0.002)])
    workers = [cluster.start_worker("fast") for _ in range(2)]
    for worker in workers:
        worker.wait_ready()

    result = score_via_celery(cluster)
    report = result.json()
    assert (report["judgments"], report["computed"], report["cached"], report["failed"]) == (
        2000,
        2000,
        0,
        0,
    )
    assert len(report["scores"]) == 250
    assert {s["status"] for s in report["scores"]} == {"ok"}

    counted = tally(cluster.database_url, job_id_of(result))
    assert counted.judgments == 2000
    assert (counted.duplicated_pairs, counted.missing_pairs) == (0, 0)
    assert counted.scores == 250
    assert counted.job_status == "done"
    assert counted.chunks["done"] == 32 and counted.chunks["pending"] == 0
    # Both processes took part: each done chunk names the process that scored it.
    engine = db.make_engine(cluster.database_url)
    with engine.connect() as conn:
        tokens = conn.scalars(select(ScoreChunk.worker)).all()
    engine.dispose()
    assert {int(t.split(":")[1]) for t in tokens} == {w.pid for w in workers}


# --- 2. SIGKILL three times ----------------------------------------------------------------


def test_workers_killed_mid_chunk_lose_and_duplicate_nothing(make_cluster: MakeCluster) -> None:
    cluster = make_cluster("redis", RUBRICSVC_JOBS_CHUNK_JUDGMENTS="64")
    seed(cluster.database_url, 10, 25, 8, [fast_judge(latency=0.015)])
    for _ in range(2):
        cluster.start_worker("fast").wait_ready()
    follower = cluster.start_follower("score", "--judge", "fast", "--via", "celery", "--json")

    kills_mid_chunk = 0
    for _ in range(10):  # a kill can land just after a chunk finished; those do not count
        victim, chunk_id, token = wait_for(
            lambda: running_chunk(cluster.database_url, cluster.workers), 90, "a running chunk"
        )
        victim.kill()
        status, holder = chunk_state(cluster.database_url, chunk_id)
        if status == ChunkStatus.RUNNING and holder == token:
            kills_mid_chunk += 1
        cluster.start_worker("fast").wait_ready()
        if kills_mid_chunk == 3:
            break
    assert kills_mid_chunk == 3

    result = finish(follower, timeout=300)
    assert result.code == 0, result.stderr
    report = result.json()
    assert report["judgments"] == 2000 and report["failed"] == 0
    assert len(report["scores"]) == 250

    counted = tally(cluster.database_url, job_id_of(result))
    assert counted.judgments == 2000
    assert (counted.duplicated_pairs, counted.missing_pairs) == (0, 0)
    assert counted.scores == 250
    assert counted.job_status == "done"
    assert counted.chunks["done"] == 32
    assert counted.attempts_beyond_first >= 3  # the killed chunks were claimed again


# --- 3. broker, then database, restarted during the job ------------------------------------


def test_the_job_survives_restarts_of_the_broker_then_the_database(tmp_path: Path) -> None:
    with private_redis() as broker, private_postgres() as postgres:
        db.upgrade(postgres.url)
        total = seed(postgres.url, 5, 25, 8, [fast_judge(latency=0.01)])
        cluster = Cluster(
            postgres.url, broker.url, tmp_path, extra_env={"RUBRICSVC_JOBS_CHUNK_JUDGMENTS": "40"}
        )
        try:
            for _ in range(2):
                cluster.start_worker("fast").wait_ready()
            follower = cluster.start_follower(
                "score", "--judge", "fast", "--via", "celery", "--json"
            )
            chunks = total // 40
            at_restart = wait_for(lambda: done_at_least(postgres.url, 3), 90, "3 chunks done")
            assert at_restart < chunks  # the job is still going on
            broker.stop()
            time.sleep(1)
            broker.start()
            before_db = wait_for(
                lambda: done_at_least(postgres.url, at_restart + 3), 120, "progress after it"
            )
            assert before_db < chunks
            postgres.stop()
            time.sleep(1)
            postgres.start()

            result = finish(follower, timeout=300)
            assert result.code == 0, result.stderr
            counted = tally(postgres.url, job_id_of(result))
            assert counted.judgments == total
            assert (counted.duplicated_pairs, counted.missing_pairs) == (0, 0)
            assert counted.scores == total // 8
            assert counted.job_status == "done"
            assert counted.chunks["done"] == chunks
        finally:
            cluster.stop()


# --- 5. the same job submitted twice -------------------------------------------------------


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_a_second_submission_does_no_judging_work(
    make_cluster: MakeCluster, database: str, tmp_path: Path
) -> None:
    url = None
    if database == "sqlite":
        url = f"sqlite:///{tmp_path / 'workers.sqlite'}"
        db.upgrade(url)
    cluster = make_cluster("redis", database_url=url, RUBRICSVC_JOBS_CHUNK_JUDGMENTS="64")
    total = seed(cluster.database_url, 4, 5, 8, [fast_judge()])
    cluster.start_worker("fast").wait_ready()

    first = score_via_celery(cluster)
    assert first.json()["computed"] == total == 160
    before = _snapshot(cluster.database_url)

    second = score_via_celery(cluster)
    assert job_id_of(second) == job_id_of(first)
    assert "this work was submitted before" in second.stderr
    assert _snapshot(cluster.database_url) == before  # no chunk claimed, no request, no row
    assert second.json()["scores"] == first.json()["scores"]

    # Other work on the same judgments (another aggregation) is a new job served by the cache.
    third = score_via_celery(cluster, "--aggregation", "healthbench")
    assert job_id_of(third) != job_id_of(first)
    report = third.json()
    assert (report["cached"], report["computed"], report["backend_requests"]) == (total, 0, 0)
    assert len(report["scores"]) == 20


def _snapshot(url: str) -> tuple[object, ...]:
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            chunks = conn.execute(
                select(
                    ScoreChunk.id, ScoreChunk.attempts, ScoreChunk.requests, ScoreChunk.status
                ).order_by(ScoreChunk.id)
            ).all()
            judgments = conn.execute(select(Judgment.id, Judgment.attempts)).all()
        return tuple(chunks), len(judgments), sorted(judgments)
    finally:
        engine.dispose()


# --- 4 and 6: the real model ---------------------------------------------------------------


@pytest.mark.model
def test_failing_backend_calls_end_as_failed_judgments_never_as_scores(
    make_cluster: MakeCluster,
) -> None:
    """A model behind a fault injector failing 30% of requests at random: the tiny judge of the
    embedded model's architecture (tests/tiny_model.py), read by the transformers backend."""
    flaky = JudgeSpec(
        name="flaky",
        model=str(tiny_judge_dir()),
        backend="faulty",
        backend_options={"inner": "transformers", "failure_rate": 0.3, "seed": 11},
        retries=1,
        retry_backoff=0.05,
    )
    cluster = make_cluster("redis")
    load_examples(cluster, (flaky,))
    cluster.start_worker("flaky").wait_ready(timeout=120)

    # One prompt's three completions keep the model's share of the run short.
    report = score_via_celery(cluster, "--prompt", "demo-sleep", judge="flaky").json()
    assert report["judgments"] == 15
    assert report["computed"] + report["failed"] == 15
    assert report["backend_requests"] > 15  # failures were retried
    assert 0 < report["failed"] < 15  # some failed twice; the seed makes it so

    engine = db.make_engine(cluster.database_url)
    with db.session_scope(engine) as session:
        judgments = {j.id: j for j in session.scalars(select(Judgment))}
        required = {c.id: c.required for c in session.scalars(select(Criterion))}
        scores = session.scalars(select(Score)).all()
        for judgment in judgments.values():
            if judgment.status == JudgmentStatus.FAILED:
                assert judgment.value is None
                assert judgment.error and judgment.error.startswith("injected fault")
                assert judgment.attempts == 2
            else:
                assert judgment.status == JudgmentStatus.OK and judgment.error is None
                assert judgment.value is not None and 0.0 < judgment.value < 1.0
        assert len(judgments) == 15 and len(scores) == 3
        for stored in scores:
            _assert_failures_are_masked(stored, judgments, required)
    engine.dispose()


def _assert_failures_are_masked(
    stored: Score, judgments: dict[int, Judgment], required: dict[int, bool]
) -> None:
    """The stored score is the aggregate of its ok judgments only, never of a failure as 0."""
    outcomes, as_zero = [], []
    for entry in stored.details["criteria"]:
        value = entry["value"]
        if entry["status"] != "check":
            judgment = judgments[entry["judgment_id"]]
            assert entry["status"] == judgment.status.value
            value = judgment.value if judgment.status == JudgmentStatus.OK else None
            assert entry["value"] == value
        outcome = Outcome(
            entry["criterion_id"],
            entry["weight"],
            value,
            entry["theme"],
            required=required[entry["criterion_id"]],
        )
        outcomes.append(outcome)
        as_zero.append(Outcome(outcome.criterion_id, outcome.weight, value or 0.0))
    expected = aggregate("rar", outcomes)
    assert stored.value == expected.value
    assert stored.coverage == expected.coverage
    if any(o.value is None for o in outcomes):
        assert stored.coverage < 1.0
        if stored.value is not None:
            assert stored.value != aggregate("rar", as_zero).value


@pytest.mark.model
def test_in_process_and_celery_scores_are_identical(
    make_cluster: MakeCluster, make_postgres_database: Callable[[], str]
) -> None:
    """The same examples scored by the same model in this process and on a worker: the tiny
    judge of the embedded model's architecture (tests/tiny_model.py), read by the transformers
    backend as the embedded one is; the two paths are under test, not its verdicts."""
    judge = tiny_judge_spec()
    inprocess = make_cluster("redis")
    load_examples(inprocess, (judge,))
    local = inprocess.cli("score", "--judge", judge.name, "--via", "inprocess", "--json")
    assert local.code == 0, local.stderr

    remote_cluster = make_cluster("redis")
    load_examples(remote_cluster, (judge,))
    remote_cluster.start_worker(judge.name).wait_ready(timeout=120)
    remote = score_via_celery(remote_cluster, judge=judge.name)

    def by_completion(result: CliResult) -> dict[str, tuple[object, ...]]:
        report = result.json()
        assert (report["judgments"], report["computed"], report["failed"]) == (39, 39, 0)
        return {
            s["completion_external_id"]: (
                s["value"],
                s["coverage"],
                s["status"],
                [(c["text"], c["status"], c["value"]) for c in s["criteria"]],
            )
            for s in report["scores"]
        }

    assert len(by_completion(local)) == 9
    assert by_completion(remote) == by_completion(local)
