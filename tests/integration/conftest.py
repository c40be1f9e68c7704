"""Fixtures the integration tests share: clusters of real workers over real brokers, and a
client of the shared Redis."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rubricsvc import db
from tests.netns import Network, require_netns
from tests.requirements import require_module, unavailable
from tests.workers_harness import (
    RABBITMQ_URL,
    REDIS_URL,
    Cluster,
    MakeCluster,
    clean_rabbitmq,
    clean_redis,
    rabbitmq_unavailable,
    redis_unavailable,
    require,
)


@pytest.fixture
def make_cluster(
    make_postgres_database: Callable[[], str], tmp_path: Path
) -> Iterator[MakeCluster]:
    """Clusters on fresh migrated databases; workers stopped and queues deleted afterwards."""
    made: list[Cluster] = []

    def make(broker: str = "redis", database_url: str | None = None, **env: str) -> Cluster:
        if broker == "redis":
            require(redis_unavailable())
            broker_url = REDIS_URL
        else:
            require(rabbitmq_unavailable())
            broker_url = RABBITMQ_URL
        if database_url is None:
            database_url = make_postgres_database()
            db.upgrade(database_url)
        cluster = Cluster(database_url, broker_url, tmp_path, extra_env=env)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.stop()
        if cluster.broker_url.startswith("redis"):
            clean_redis(cluster.broker_url, cluster.prefix)
        else:
            clean_rabbitmq(
                cluster.broker_url, [f"{cluster.prefix}fast", f"{cluster.prefix}default"]
            )


@pytest.fixture
def network() -> Iterator[Network]:
    """An empty test network (a bridge; hosts are added by the test), deleted afterwards with
    every process its hosts run, also when the test fails. Its users are marked ``netns``."""
    require_netns()
    made = Network()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def redis_client() -> Iterator[Any]:
    """A client of the shared Redis (``RUBRICSVC_TEST_REDIS_URL``); without it, skip saying how
    to start it (with CI=true, fail)."""
    redis = require_module("redis", "workers")
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        client.ping()
    except Exception as err:
        client.close()
        unavailable(
            f"Redis not reachable at {REDIS_URL} ({err}); start it or set RUBRICSVC_TEST_REDIS_URL"
        )
    yield client
    client.close()
