"""The count of failed authentications per client address (``rubricsvc.api.authfailures``) on
a clock of the test's own: refusal and its end, IPv6 networks, bounded memory and a bounded
log. What clients see of it (429 on the API and the review pages, on a live server too) is in
tests/integration/test_ui_security.py."""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rubricsvc.api import create_app
from rubricsvc.api.authfailures import MAX_LINES, FailedAuthThrottle, client_address
from rubricsvc.api.ratelimit import MemoryRateLimiter
from tests.api_harness import api_client, settings_for

LOGGER = "rubricsvc.api.authfailures"
REDIS_URL = os.environ.get("RUBRICSVC_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")
BUCKETS = "rubricsvc:ratelimit:failed-auth:*"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def throttle(per_minute: int, clock: Clock, **limits: int) -> FailedAuthThrottle:
    return FailedAuthThrottle(MemoryRateLimiter(per_minute, clock, **limits), clock)


def test_an_address_is_refused_past_the_limit_until_its_bucket_refills() -> None:
    clock = Clock()
    failures = throttle(6, clock)  # six at once, then one every 10 s
    assert [failures.failed("192.0.2.1", "x") for _ in range(6)] == [0.0] * 6
    assert failures.waiting("192.0.2.1") == 0.0
    assert failures.failed("192.0.2.1", "x") == pytest.approx(10.0)
    assert failures.waiting("192.0.2.1") == pytest.approx(10.0)
    assert failures.waiting("192.0.2.2") == 0.0  # another address is not held back
    clock.now += 9.5
    assert failures.waiting("192.0.2.1") == pytest.approx(0.5)
    clock.now += 0.5
    assert failures.waiting("192.0.2.1") == 0.0
    assert failures.refused == {}  # forgotten: admitted requests test an empty dict again
    assert failures.failed("192.0.2.1", "x") == 0.0  # one more try, then refused again
    assert failures.failed("192.0.2.1", "x") > 0


def test_ipv6_addresses_count_by_their_64_network() -> None:
    assert client_address("2001:db8:1:2::5") == client_address("2001:db8:1:2:ffff::9")
    assert client_address("2001:db8:1:2::5") != client_address("2001:db8:1:3::5")
    assert client_address("203.0.113.7") == "203.0.113.7"
    assert client_address(None) == "unknown"
    assert client_address("a\nb\u202e") == "a?b?"  # logged: printable whatever a proxy sent


def test_the_buckets_of_many_addresses_stay_bounded() -> None:
    clock = Clock()
    failures = throttle(3, clock, max_buckets=1000)
    for n in range(20_000):
        failures.failed(f"10.{n >> 16}.{(n >> 8) & 255}.{n & 255}", "x")
    limiter = failures.limiter
    assert isinstance(limiter, MemoryRateLimiter)
    assert len(limiter._buckets) <= 1000


def test_a_flood_from_many_addresses_logs_a_bounded_number_of_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    clock = Clock()
    failures = throttle(3, clock)
    for n in range(500):  # 500 addresses, 10 tries each: 1500 failures, 3500 refusals
        address = f"198.51.{n // 250}.{n % 250}"
        for _ in range(10):
            if failures.waiting(address) == 0:
                failures.failed(address, "unknown key")
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(lines) == MAX_LINES
    clock.now += 61  # the next minute's first failure logs the count of the last one
    failures.failed("192.0.2.200", "unknown key")
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(lines) == MAX_LINES + 2
    assert "not logged one by one" in lines[-2] and "from 500 address(es)" in lines[-2]
    total = sum(int(part.split()[0]) for part in lines[-2].split(": ", 1)[1].split(",")[:2])
    assert total == 5000 - MAX_LINES
    failures.close()  # nothing left to count
    assert len([r for r in caplog.records if r.name == LOGGER]) == MAX_LINES + 2


@pytest.fixture
def failure_buckets(redis_client: Any) -> Iterator[Any]:
    """The shared Redis, without failed-authentication buckets before and after the test."""
    for name in redis_client.scan_iter(BUCKETS):
        redis_client.delete(name)
    yield redis_client
    for name in redis_client.scan_iter(BUCKETS):
        redis_client.delete(name)


def test_failures_are_counted_once_for_every_process_through_redis(
    sqlite_url: str, failure_buckets: Any
) -> None:
    limits: dict[str, Any] = {"failed_auth_per_minute": 4, "rate_limit_url": REDIS_URL}
    unknown = {"Authorization": "Bearer rsk_" + secrets.token_urlsafe(32)}
    # The second client is another server process on the same database and Redis.
    with (
        api_client(sqlite_url, **limits) as (first, keys),
        TestClient(create_app(settings_for(sqlite_url, **limits))) as second,
    ):
        statuses = [c.get("/v1/prompts", headers=unknown).status_code for c in (first, second) * 2]
        assert statuses == [401] * 4
        assert second.get("/v1/prompts", headers=unknown).status_code == 429  # the fifth
        assert first.get("/v1/prompts", headers=unknown).status_code == 429
        # Each process refuses the address once it saw a failure past the limit itself.
        right = {"Authorization": f"Bearer {keys['read']}"}
        assert first.get("/v1/prompts", headers=right).status_code == 429
    buckets = [name.decode() for name in failure_buckets.scan_iter(BUCKETS)]
    assert buckets == ["rubricsvc:ratelimit:failed-auth:testclient:requests"], buckets
    assert failure_buckets.ttl(buckets[0]) > 0  # they expire
