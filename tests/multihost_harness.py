"""A data host and worker hosts on a test network, and a job split over them, measured.

Used by ``tests/integration/test_multihost.py`` and ``benchmarks/bench_multihost.py``: the
same job of fixed-latency judgments is scored by one worker host, then by two, on one
data host (PostgreSQL and Redis on its own address).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select

from rubricsvc import db
from rubricsvc.models import ScoreChunk, ScoreJob
from tests.cli_runner import CliResult
from tests.netns import Host, Network
from tests.workers_harness import (
    Cluster,
    PrivatePostgres,
    PrivateRedis,
    Worker,
    fast_judge,
    private_postgres,
    private_redis,
    seed,
)


@contextmanager
def data_host(network: Network) -> Iterator[tuple[Host, PrivatePostgres, PrivateRedis]]:
    """The data host: PostgreSQL (migrated) and Redis, both on the host's own address."""
    host = network.add_host("data")
    with private_postgres(host) as postgres, private_redis(host) as redis:
        db.upgrade(postgres.url)
        yield host, postgres, redis


def job_id_of(result: CliResult) -> int:
    found = re.search(r"^job (\d+):", result.stderr, re.MULTILINE)
    assert found, result.stderr
    return int(found.group(1))


def pid_of(token: str | None) -> int:
    return int(token.split(":")[1]) if token else -1


@dataclass
class JobRun:
    judgments: int
    seconds: float  # the job's creation to its last chunk's end, from the database
    by_pid: dict[int, int]  # judgments planned in the chunks each worker process finished


@dataclass
class Split:
    one_host: JobRun
    two_hosts: JobRun
    shares: dict[str, float]  # host name -> share of the two-host job's judgments

    @property
    def ratio(self) -> float:
        return self.two_hosts.seconds / self.one_host.seconds


def job_run(url: str, job_id: int) -> JobRun:
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            created = conn.execute(
                select(ScoreJob.created_at).where(ScoreJob.id == job_id)
            ).scalar_one()
            ended: datetime = conn.scalar(
                select(func.max(ScoreChunk.heartbeat_at)).where(ScoreChunk.job_id == job_id)
            )
            rows = conn.execute(
                select(ScoreChunk.worker, ScoreChunk.judgments).where(ScoreChunk.job_id == job_id)
            ).all()
    finally:
        engine.dispose()
    by_pid: dict[int, int] = {}
    for token, judgments in rows:
        by_pid[pid_of(token)] = by_pid.get(pid_of(token), 0) + judgments
    return JobRun(sum(by_pid.values()), (ended - created).total_seconds(), by_pid)


class SplitBench:
    """Two worker hosts: A serves judges ``solo-N`` and ``pair-N``, B serves ``pair-N``;
    round N scores the same work with ``solo-N`` (host A alone), then ``pair-N`` (both)."""

    def __init__(
        self,
        network: Network,
        cluster: Cluster,
        url: str,
        rounds: int,
        shape: tuple[int, int, int] = (10, 25, 8),
        latency: float = 0.005,
    ) -> None:
        self.cluster = cluster
        self.url = url
        names = [f"{kind}-{n}" for n in range(rounds) for kind in ("solo", "pair")]
        # Judges of the same settings are one judge: each differs in the injector's seed.
        judges = [
            fast_judge(name, latency=latency).model_copy(
                update={
                    "backend_options": {**fast_judge(latency=latency).backend_options, "seed": i}
                }
            )
            for i, name in enumerate(names)
        ]
        self.judgments = seed(url, *shape, judges)
        self.hosts = network.add_host("wa"), network.add_host("wb")
        self.a: Worker = cluster.start_worker(names, self.hosts[0])
        self.b: Worker = cluster.start_worker(
            [n for n in names if n.startswith("pair")], self.hosts[1]
        )
        self.a.wait_ready()
        self.b.wait_ready()

    def score(self, judge: str) -> JobRun:
        result = self.cluster.cli("score", "--judge", judge, "--via", "celery", "--json")
        assert result.code == 0, result.stderr
        return job_run(self.url, job_id_of(result))

    def round(self, n: int) -> Split:
        one = self.score(f"solo-{n}")
        two = self.score(f"pair-{n}")
        assert one.judgments == two.judgments == self.judgments
        assert set(one.by_pid) == {self.a.pid}
        names = {self.a.pid: self.hosts[0].name, self.b.pid: self.hosts[1].name}
        shares = {names[pid]: count / two.judgments for pid, count in two.by_pid.items()}
        return Split(one, two, shares)
