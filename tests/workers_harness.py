"""Real parts for the worker tests: worker processes, brokers, private servers, seeded data.

The shared Redis and RabbitMQ are used with queue names unique to each test (and a Redis
database of their own), and cleaned after; a test that restarts a server starts a private
one on a free port, so nothing else on the machine notices.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TypeVar

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc import db
from rubricsvc.completions import CompletionRecord, add_completions
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import (
    ChunkStatus,
    Completion,
    Criterion,
    CriterionKind,
    Judgment,
    Rubric,
    RubricVersion,
    Score,
    ScoreChunk,
    ScoreJob,
)
from rubricsvc.rubrics import versions as rubrics
from rubricsvc.scoring.judge_configs import ensure_judge_config
from tests.cli_runner import DEMO_RUBRICS, EXAMPLES, CliResult
from tests.helpers import rubric_spec
from tests.netns import Host
from tests.requirements import prepared_model_dir, require_module, unavailable, uses
from tests.servers import free_port

REDIS_URL = os.environ.get("RUBRICSVC_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")
RABBITMQ_URL = os.environ.get("RUBRICSVC_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")
REPO = Path(__file__).resolve().parents[1]
T = TypeVar("T")
MakeCluster = Callable[..., "Cluster"]  # the make_cluster fixture (tests/integration)

# Fast recovery for tests: production defaults are minutes, not seconds.
FAST_RECOVERY = {
    "RUBRICSVC_JOBS_HEARTBEAT_INTERVAL": "1",
    "RUBRICSVC_JOBS_HEARTBEAT_TIMEOUT": "6",
    "RUBRICSVC_JOBS_REAP_INTERVAL": "2",
    "RUBRICSVC_JOBS_REQUEUE_AFTER": "15",
    "RUBRICSVC_JOBS_MAX_ATTEMPTS": "10",
}


def require(reason: str | None) -> None:
    """Skip with ``reason`` (how to provide the missing part); with CI=true, fail instead."""
    if reason is not None:
        unavailable(reason)


def redis_unavailable(url: str = REDIS_URL) -> str | None:
    uses("broker")
    try:
        import redis

        redis.Redis.from_url(url, socket_connect_timeout=3).ping()
    except Exception as err:
        return f"Redis not reachable at {url} ({err}); start it or set RUBRICSVC_TEST_REDIS_URL"
    return None


def rabbitmq_unavailable(url: str = RABBITMQ_URL) -> str | None:
    uses("broker")
    try:
        from kombu import Connection

        with Connection(url, connect_timeout=3) as conn:
            conn.ensure_connection(max_retries=1)
    except Exception as err:
        return (
            f"RabbitMQ not reachable at {url} ({err}); start it or set RUBRICSVC_TEST_RABBITMQ_URL"
        )
    return None


def wait_for(check: Callable[[], T | None], timeout: float, what: str, every: float = 0.2) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


# --- data -----------------------------------------------------------------------------------


def fast_judge(name: str = "fast", latency: float = 0.0, failure_rate: float = 0.0) -> JudgeSpec:
    """A scripted judge behind the fault injector (which can also make it slow)."""
    return JudgeSpec(
        name=name,
        backend="faulty",
        backend_options={"inner": "scripted", "failure_rate": failure_rate, "latency": latency},
        retry_backoff=0,
    )


def seed(url: str, prompts: int, per_prompt: int, criteria: int, judges: list[JudgeSpec]) -> int:
    """Approved rubrics of ``criteria`` criteria and distinct completions; returns judgments."""
    engine = db.make_engine(url)
    try:
        with db.session_scope(engine) as session:
            for p in range(prompts):
                items = [
                    {"text": f"Criterion {c} of prompt {p}", "weight": c + 1}
                    for c in range(criteria)
                ]
                prompt = {"text": f"Question {p}?", "external_id": f"p{p}"}
                spec = rubric_spec(f"load/{p}", criteria=items, prompt=prompt)
                version = rubrics.save_rubric(session, spec).version
                rubrics.approve(session, version, "tests")
                records = [
                    (
                        "tests",
                        CompletionRecord(
                            prompt_external_id=f"p{p}",
                            text=f"Answer {i} to {p}.",
                            external_id=f"p{p}/c{i}",
                        ),
                    )
                    for i in range(per_prompt)
                ]
                add_completions(session, records)
            for judge in judges:
                ensure_judge_config(session, judge)
    finally:
        engine.dispose()
    return prompts * per_prompt * criteria


@dataclass
class Tally:
    judgments: int
    duplicated_pairs: int  # (completion, criterion) pairs with more than one judgment
    missing_pairs: int  # (completion, criterion) pairs of judged criteria without one
    scores: int
    job_status: str
    chunks: dict[str, int]
    attempts_beyond_first: int


def tally(url: str, job_id: int) -> Tally:
    """What the database holds for a job: rows counted, unique keys checked pair by pair."""
    engine = db.make_engine(url)
    try:
        with db.session_scope(engine) as session:
            job = session.get(ScoreJob, job_id)
            assert job is not None
            chunks = session.scalars(select(ScoreChunk).where(ScoreChunk.job_id == job_id)).all()
            completion_ids = {c for chunk in chunks for c in chunk.completion_ids}
            judged = session.execute(
                select(Judgment.completion_id, Judgment.criterion_id, func.count())
                .where(Judgment.judge_config_id == job.judge_config_id)
                .group_by(Judgment.completion_id, Judgment.criterion_id)
            ).all()
            pairs = {(c, k): n for c, k, n in judged}
            expected = _expected_pairs(session, completion_ids, job.params["versions"])
            return Tally(
                judgments=sum(pairs.values()),
                duplicated_pairs=sum(1 for n in pairs.values() if n > 1),
                missing_pairs=len(expected - set(pairs)),
                scores=session.scalar(
                    select(func.count())
                    .select_from(Score)
                    .where(
                        Score.judge_config_id == job.judge_config_id,
                        Score.aggregation == job.aggregation,
                    )
                )
                or 0,
                job_status=job.status.value,
                chunks=dict(
                    sorted(
                        {
                            s.value: sum(1 for c in chunks if c.status == s) for s in ChunkStatus
                        }.items()
                    )
                ),
                attempts_beyond_first=sum(max(c.attempts - 1, 0) for c in chunks),
            )
    finally:
        engine.dispose()


def _expected_pairs(
    session: Session, completion_ids: set[int], versions: list[int]
) -> set[tuple[int, int]]:
    """Every (completion, judged criterion) pair the job covers."""
    criteria = session.execute(
        select(Rubric.prompt_id, Criterion.id)
        .join(RubricVersion, RubricVersion.rubric_id == Rubric.id)
        .join(Criterion, Criterion.version_id == RubricVersion.id)
        .where(RubricVersion.id.in_(versions), Criterion.kind != CriterionKind.CHECK)
    ).all()
    by_prompt: dict[int | None, list[int]] = {}
    for prompt_id, criterion_id in criteria:
        by_prompt.setdefault(prompt_id, []).append(criterion_id)
    completions = session.execute(
        select(Completion.id, Completion.prompt_id).where(Completion.id.in_(completion_ids))
    ).all()
    return {(c, k) for c, p in completions for k in by_prompt.get(p, [])}


# --- processes ------------------------------------------------------------------------------


@dataclass
class Cluster:
    """One database, one broker, unique queue names: the settings every process shares."""

    database_url: str
    broker_url: str
    logs: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    prefix: str = field(default_factory=lambda: f"test-{uuid.uuid4().hex[:10]}.")
    workers: list[Worker] = field(default_factory=list)
    followers: list[subprocess.Popen[str]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "RUBRICSVC_DATABASE_URL": self.database_url,
            "RUBRICSVC_BROKER_URL": self.broker_url,
            "RUBRICSVC_BROKER_QUEUE_PREFIX": self.prefix,
            "COLUMNS": "200",
            **FAST_RECOVERY,
            **self.extra_env,
        }

    def cli(self, *args: str, timeout: float = 300) -> CliResult:
        proc = subprocess.run(
            [sys.executable, "-m", "rubricsvc", *args],
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
            cwd=REPO,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    def start_follower(self, *args: str) -> subprocess.Popen[str]:
        """``rubricsvc ARGS`` in the background (e.g. ``score --via celery``)."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "rubricsvc", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(),
            cwd=REPO,
            start_new_session=True,
        )
        self.followers.append(proc)
        return proc

    def start_worker(self, judge: str | list[str], host: Host | None = None) -> Worker:
        """A worker of ``judge``, here or on ``host`` (a test network's namespace)."""
        name = f"worker-{len(self.workers)}{'-' + host.name if host else ''}.log"
        worker = Worker(judge, self.env(), self.logs / name, host)
        self.workers.append(worker)
        return worker

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        for proc in self.followers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def finish(proc: subprocess.Popen[str], timeout: float) -> CliResult:
    """Wait for a background command (bounded) and collect its output."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=10)
        raise AssertionError(
            f"command still running after {timeout:.0f} s; stderr: {stderr[-2000:]}"
        ) from None
    return CliResult(proc.returncode, stdout, stderr)


class Worker:
    """``rubricsvc worker --judge NAME --pool solo``: one process, so SIGKILL loses it whole."""

    def __init__(
        self,
        judge: str | list[str],
        env: dict[str, str],
        log_path: Path,
        host: Host | None = None,
    ) -> None:
        self.log_path = log_path
        self.host = host
        self._log: IO[bytes] = log_path.open("ab")
        judges = [judge] if isinstance(judge, str) else judge
        served = [arg for name in judges for arg in ("--judge", name)]
        command = [sys.executable, "-m", "rubricsvc", "worker", *served, "--pool", "solo"]
        self.process = subprocess.Popen(
            # ``ip netns exec`` execs the command: the pid stays the worker's own.
            host.command(command) if host else command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 60) -> Worker:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"worker exited with {self.process.returncode}:\n{self.log()[-3000:]}"
                )
            return " ready." in self.log()

        wait_for(ready, timeout, f"worker {self.pid} to be ready")
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown, no acknowledgement, no release of its chunk."""
        os.kill(self.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # a warm shutdown: the running chunk finishes
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self._log.close()


# --- brokers --------------------------------------------------------------------------------


def clean_redis(url: str, prefix: str) -> None:
    """Delete a test's queues, bindings and unacknowledged messages from a shared Redis."""
    import redis

    client = redis.Redis.from_url(url)
    for key in client.scan_iter(match=f"*{prefix}*"):
        client.delete(key)
    for tag, raw in client.hgetall("unacked").items():
        with suppress(Exception):
            message = json.loads(raw)
            if any(prefix in str(part) for part in message[1:]):
                client.hdel("unacked", tag)
                client.zrem("unacked_index", tag)


def clean_rabbitmq(url: str, queues: list[str]) -> None:
    """Delete a test's queues (and their exchanges) from the shared RabbitMQ."""
    from kombu import Connection

    with Connection(url, connect_timeout=5) as conn:
        channel = conn.default_channel
        for name in queues:
            with suppress(Exception):
                channel.queue_delete(name)
            with suppress(Exception):
                channel.exchange_delete(name)


class PrivateRedis:
    """A redis-server of our own on a free port, with nothing on disk, that we may restart;
    with ``host``, on that test host's address (port 6379)."""

    def __init__(self, host: Host | None = None) -> None:
        self.binary = shutil.which("redis-server")
        self.host = host
        self.address = host.address if host else "127.0.0.1"
        self.port = 6379 if host else free_port()
        self.url = f"redis://{self.address}:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert self.binary is not None
        args = [
            "--port",
            str(self.port),
            "--bind",
            self.address,
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        command = [self.binary, *args, "--protected-mode", "no"]
        self.process = subprocess.Popen(
            self.host.command(command) if self.host else command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(lambda: redis_unavailable(self.url) is None, 20, "the private Redis")

    def stop(self) -> None:
        """Shut down as a crash would for the queues: nothing is saved."""
        if self.process is not None and self.process.poll() is None:
            subprocess.run(
                # This server's address: never the machine's shared Redis on the same port.
                ["redis-cli", "-h", self.address, "-p", str(self.port), "shutdown", "nosave"],
                capture_output=True,
                timeout=20,
            )
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


class PrivatePostgres:
    """A PostgreSQL cluster of our own (initdb in a temporary folder) on a free port.

    PostgreSQL refuses to run as root, so as root it runs as the ``postgres`` user. With
    ``host``, it runs on that test host, listening on its address (port 5432).
    """

    def __init__(self, host: Host | None = None) -> None:
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        self.bin = found[-1].parent if found else None
        self.host = host
        self.address = host.address if host else "127.0.0.1"
        self.port = 5432 if host else free_port()
        self.url = f"postgresql+psycopg://postgres@{self.address}:{self.port}/postgres"
        self.data: Path | None = None

    def unavailable(self) -> str | None:
        if self.bin is None:
            return "PostgreSQL server binaries (initdb, pg_ctl) not found under /usr/lib/postgresql"
        if os.geteuid() == 0 and shutil.which("runuser") is None:
            return "running as root needs runuser to start a private PostgreSQL as postgres"
        return None

    def _run(self, *args: str, timeout: float = 60) -> None:
        assert self.bin is not None
        command = [str(self.bin / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        if self.host is not None:
            command = self.host.command(command)
        subprocess.run(command, check=True, capture_output=True, timeout=timeout)

    def init(self) -> None:
        self.data = Path(tempfile.mkdtemp(prefix="rubricsvc-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.data, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")
        if self.host is not None:  # the other test hosts connect from their own addresses
            subnet = self.address.rsplit(".", 1)[0] + ".0/24"
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {subnet} trust\n")
        self.start()

    def start(self) -> None:
        assert self.data is not None, "init() makes the data directory"
        options = (
            f"-p {self.port} -c listen_addresses={self.address} -c unix_socket_directories= "
            "-c fsync=off"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-w",
            "-l",
            str(self.data / "log"),
            "start",
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def destroy(self) -> None:
        if self.data is not None:
            with suppress(Exception):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
            shutil.rmtree(self.data, ignore_errors=True)


@contextmanager
def private_postgres(host: Host | None = None) -> Iterator[PrivatePostgres]:
    uses("postgres")
    server = PrivatePostgres(host)
    require(server.unavailable())
    server.init()
    try:
        yield server
    finally:
        server.destroy()


@contextmanager
def private_redis(host: Host | None = None) -> Iterator[PrivateRedis]:
    uses("broker")
    server = PrivateRedis(host)
    require(None if server.binary else "redis-server not found on PATH")
    server.start()
    try:
        yield server
    finally:
        server.stop()


# --- the demo set on a cluster -----------------------------------------------------------


def score_via_celery(cluster: Cluster, *args: str, judge: str = "fast") -> CliResult:
    result = cluster.cli("score", "--judge", judge, "--via", "celery", "--json", *args, timeout=300)
    assert result.code == 0, result.stderr
    return result


def require_embedded_model() -> None:
    """The workers load the embedded model: transformers installed, the model prepared."""
    require_module("transformers", "transformers")
    prepared_model_dir()


def load_examples(cluster: Cluster, judges: tuple[JudgeSpec, ...] = ()) -> None:
    """The demo's rubrics (approved) and completions: 39 judgments per judge."""
    for args in (
        ("rubrics", "add", str(EXAMPLES / "rubrics.yaml")),
        ("completions", "add", str(EXAMPLES / "completions.jsonl")),
        ("rubrics", "approve", *DEMO_RUBRICS),
    ):
        result = cluster.cli(*args)
        assert result.code == 0, result.stderr
    if judges:
        path = cluster.logs / "judges.json"
        path.write_text(json.dumps({"judges": [j.model_dump(mode="json") for j in judges]}))
        result = cluster.cli("judges", "add", str(path))
        assert result.code == 0, result.stderr
