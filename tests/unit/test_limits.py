"""Shared API limits, counted in the real Redis by several limiters as several workers would."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from rubricsvc.backends.base import BackendError
from rubricsvc.backends.kept import KeptView
from rubricsvc.backends.limits import LimitedBackend, SharedLimiter, estimated_tokens
from rubricsvc.backends.provider import BackendProvider, JudgeLimits
from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.backends.types import Generation, GenerationRequest
from rubricsvc.config import ApiLimits, get_settings
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.config import JudgeSpec, VerdictMode
from tests.workers_harness import REDIS_URL, redis_unavailable, require


@pytest.fixture
def redis_client() -> Iterator[Any]:
    require(redis_unavailable())
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    yield client
    client.close()


@pytest.fixture
def name(redis_client: Any) -> Iterator[str]:
    """A judge name of this test's own; its keys are deleted afterwards."""
    judge = f"test-{uuid.uuid4().hex[:8]}"
    yield judge
    for key in redis_client.scan_iter(match=f"rubricsvc:limits:{judge}:*"):
        redis_client.delete(key)


def limiter(client: Any, name: str, **limits: Any) -> SharedLimiter:
    lease = limits.pop("lease", 300.0)
    return SharedLimiter(client, name, ApiLimits(**limits), lease=lease, poll=0.01)


class Recorder:
    """A backend that counts how many requests are in flight across all its users."""

    name = "recorder"
    model = "recorder"
    lock = threading.Lock()

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0
        self.batches: list[int] = []

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation | BackendError]:
        with self.lock:
            self.in_flight += len(requests)
            self.most = max(self.most, self.in_flight)
            self.batches.append(len(requests))
        time.sleep(0.02)
        with self.lock:
            self.in_flight -= len(requests)
        return [
            BackendError("HTTP 429", retryable=True, status=429)
            if r.chat[0]["content"].startswith("fail")
            else Generation(r.chat[0]["content"].upper(), 1, 1)
            for r in requests
        ]

    def choice_probs(self, requests: Sequence[Any]) -> list[Any]:
        raise NotImplementedError

    def close(self) -> None:
        pass


def requests(*texts: str) -> list[GenerationRequest]:
    return [GenerationRequest([{"role": "user", "content": t}], max_tokens=4) for t in texts]


def test_concurrent_calls_are_capped_across_workers(redis_client: Any, name: str) -> None:
    import redis

    inner = Recorder()
    # Two workers: each with its own connection and limiter, sharing the judge's limits.
    workers = [
        LimitedBackend(inner, limiter(redis.Redis.from_url(REDIS_URL), name, concurrent_calls=3))
        for _ in range(2)
    ]
    results: dict[int, list[Generation | BackendError]] = {}

    def call(index: int) -> None:
        batch = requests(*(f"w{index}r{i}" for i in range(6)))
        results[index] = workers[index % 2].generate(batch)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert inner.most <= 3  # 4 callers x 6 requests, never more than 3 at once
    assert sum(inner.batches) == 24
    for index, answers in results.items():
        assert [a.text for a in answers if isinstance(a, Generation)] == [
            f"W{index}R{i}" for i in range(6)
        ]
    assert redis_client.zcard(f"rubricsvc:limits:{name}:calls") == 0  # every slot returned


def test_minute_budgets_are_shared_and_taken_whole(redis_client: Any, name: str) -> None:
    first = limiter(redis_client, name, requests_per_minute=10, tokens_per_minute=1000)
    second = limiter(redis_client, name, requests_per_minute=10, tokens_per_minute=1000)
    assert first.try_spend(6, 700) == 0
    assert second.try_spend(3, 200) == 0
    # 100 tokens left: 300 more need 200 refilled at 1000 a minute, about 12 s.
    wait = first.try_spend(1, 300)
    assert 11.0 < wait <= 12.0
    # Refused whole: the request budget was not spent either, so one request still fits.
    assert second.try_spend(1, 50) == 0
    assert 5.0 < second.try_spend(1, 0) <= 6.0  # requests exhausted: one refills in 6 s


def test_slots_of_a_killed_worker_come_back_after_their_lease(redis_client: Any, name: str) -> None:
    dead = limiter(redis_client, name, concurrent_calls=2, lease=1.0)
    assert dead.try_acquire(5, "dead") == 2  # at most the limit
    alive = limiter(redis_client, name, concurrent_calls=2)
    assert alive.try_acquire(1, "alive") == 0
    time.sleep(1.2)  # the dead holder never releases; its lease runs out
    assert alive.try_acquire(1, "alive") == 1


def test_errors_pass_through_in_order_and_slices_fit_the_limits(
    redis_client: Any, name: str
) -> None:
    inner = Recorder()
    backend = LimitedBackend(
        inner, limiter(redis_client, name, concurrent_calls=2, requests_per_minute=100)
    )
    answers = backend.generate(requests("a", "fail b", "c", "d", "fail e"))
    assert [type(a).__name__ for a in answers] == [
        "Generation",
        "BackendError",
        "Generation",
        "Generation",
        "BackendError",
    ]
    assert max(inner.batches) <= 2 and sum(inner.batches) == 5
    assert estimated_tokens(requests("x" * 400)[0]) == 101 + 4


def provider_limiting_api(monkeypatch: pytest.MonkeyPatch, broker_url: str) -> BackendProvider:
    """A provider made from the settings: the broker at ``broker_url``, and the judge "api"
    limited to 4 concurrent calls."""
    monkeypatch.setenv("RUBRICSVC_BROKER_URL", broker_url)
    monkeypatch.setenv("RUBRICSVC_JUDGE_API_LIMITS", '{"api": {"concurrent_calls": 4}}')
    get_settings.cache_clear()
    try:
        return BackendProvider.from_settings(get_settings())
    finally:
        get_settings.cache_clear()


@pytest.mark.broker
def test_a_provider_puts_judges_with_limits_behind_them(monkeypatch: pytest.MonkeyPatch) -> None:
    require(redis_unavailable())
    provider = provider_limiting_api(monkeypatch, REDIS_URL)
    limited = provider.get(JudgeSpec(name="api", backend="scripted"))
    plain = provider.get(JudgeSpec(name="other", backend="scripted"))
    assert isinstance(limited, KeptView) and isinstance(limited.inner, LimitedBackend)
    assert limited.inner.limiter.limits.concurrent_calls == 4
    assert isinstance(plain, KeptView) and not isinstance(plain.inner, LimitedBackend)
    provider.close_all()


def test_a_judge_with_limits_does_not_share_another_judges_backend() -> None:
    limits = JudgeLimits({"api": ApiLimits(concurrent_calls=1)}, REDIS_URL)
    built: list[str] = []

    def build(spec: Any) -> Any:
        built.append(spec.name)
        return ScriptedBackend()

    provider = BackendProvider(limits, share_models=True, build=build)
    provider.get(JudgeSpec(name="free", backend="scripted"))
    provider.get(JudgeSpec(name="free-text", backend="scripted", mode=VerdictMode.CRITERION_TEXT))
    provider.get(JudgeSpec(name="api", backend="scripted"))
    # One model shared by the two judges without limits; its own for the limited one.
    assert built == ["free", "api"]


def test_limits_without_a_redis_are_refused_before_the_backend_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider = provider_limiting_api(monkeypatch, "amqp://guest:guest@127.0.0.1:5672//")
    # An unknown backend would be refused with its own message if it were made first.
    with pytest.raises(ValidationFailed, match="RUBRICSVC_JUDGE_LIMITS_URL"):
        provider.get(JudgeSpec(name="api", backend="nope"))
