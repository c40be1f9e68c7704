"""Limits of an API judge shared by every worker: requests and tokens per minute, concurrent calls.

The state lives in Redis, so N workers on M machines stay under one provider quota together:
one token bucket per minute budget, refilled continuously and clocked by Redis's own ``TIME``
(machines' clocks do not matter), and a semaphore whose slots expire, so the slots of a
killed worker come back by themselves.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from rubricsvc.backends.base import BackendError, JudgeBackend
from rubricsvc.backends.types import ChoiceRequest, ChoiceResult, Generation, GenerationRequest
from rubricsvc.config import ApiLimits

R = TypeVar("R")
Q = TypeVar("Q", GenerationRequest, ChoiceRequest)

# Takes ARGV[2] requests and ARGV[4] tokens from two buckets holding at most ARGV[1] and
# ARGV[3] per minute (0: no limit), both or neither; returns the seconds to wait ("0": taken).
_SPEND = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local wait = 0
local levels = {}
for i = 1, 2 do
  local cap = tonumber(ARGV[2 * i - 1])
  local want = math.min(tonumber(ARGV[2 * i]), cap)
  if cap > 0 then
    local state = redis.call('HMGET', KEYS[i], 'level', 'at')
    local level = tonumber(state[1]) or cap
    local at = tonumber(state[2]) or now
    level = math.min(cap, level + (now - at) * cap / 60)
    levels[i] = {level, want}
    if level < want then wait = math.max(wait, (want - level) * 60 / cap) end
  end
end
for i = 1, 2 do
  if levels[i] then
    local left = levels[i][1]
    if wait == 0 then left = left - levels[i][2] end
    redis.call('HSET', KEYS[i], 'level', tostring(left), 'at', tostring(now))
    redis.call('EXPIRE', KEYS[i], 120)
  end
end
return tostring(wait)
"""

# Takes up to ARGV[2] of ARGV[1] slots for ARGV[3] seconds as ARGV[4]:1.., returns how many.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local free = tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[1])
local n = math.max(0, math.min(free, tonumber(ARGV[2])))
for i = 1, n do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[4] .. ':' .. i)
end
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3])) + 1)
return n
"""


class SharedLimiter:
    """The limits of one judge, counted in Redis under ``rubricsvc:limits:<name>``."""

    def __init__(
        self,
        client: Any,
        name: str,
        limits: ApiLimits,
        *,
        lease: float = 300.0,
        poll: float = 0.05,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.limits = limits
        self.prefix = f"rubricsvc:limits:{name}"
        # A slot outlives a call that hangs for at most this long; keep it above the timeout.
        self.lease = lease
        self.poll = poll
        self.sleep = sleep
        self._spend = client.register_script(_SPEND)
        self._acquire = client.register_script(_ACQUIRE)

    def try_spend(self, requests: int, tokens: int) -> float:
        """Take ``requests`` and ``tokens`` from the minute budgets; else the seconds to wait."""
        rpm = self.limits.requests_per_minute or 0
        tpm = self.limits.tokens_per_minute or 0
        keys = [f"{self.prefix}:requests", f"{self.prefix}:tokens"]
        return float(self._spend(keys=keys, args=[rpm, requests, tpm, tokens]))

    def spend(self, requests: int, tokens: int) -> None:
        """Wait until the minute budgets allow ``requests`` and ``tokens``, then take them."""
        while (wait := self.try_spend(requests, tokens)) > 0:
            self.sleep(min(wait, 5.0))

    def try_acquire(self, want: int, holder: str) -> int:
        """Take up to ``want`` free call slots as ``holder``; how many were taken (maybe 0)."""
        limit = self.limits.concurrent_calls
        if limit is None:
            return want
        return int(
            self._acquire(keys=[f"{self.prefix}:calls"], args=[limit, want, self.lease, holder])
        )

    @contextmanager
    def slots(self, want: int) -> Iterator[int]:
        """Hold between 1 and ``want`` call slots (waiting for the first); yields how many."""
        holder = uuid.uuid4().hex
        while (taken := self.try_acquire(want, holder)) == 0:
            self.sleep(self.poll)
        try:
            yield taken
        finally:
            if self.limits.concurrent_calls is not None:
                names = [f"{holder}:{i}" for i in range(1, taken + 1)]
                self.client.zrem(f"{self.prefix}:calls", *names)


def estimated_tokens(request: GenerationRequest | ChoiceRequest) -> int:
    """What a request will cost before it is sent: ~4 characters a token, plus the reply."""
    prompt = sum(len(message.get("content", "")) for message in request.chat) // 4 + 1
    return prompt + (request.max_tokens if isinstance(request, GenerationRequest) else 1)


class LimitedBackend:
    """A backend whose calls wait for the shared limits; batches go out in allowed slices."""

    def __init__(self, inner: JudgeBackend, limiter: SharedLimiter) -> None:
        self.inner = inner
        self.limiter = limiter
        self.name = inner.name
        self.model = inner.model

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation | BackendError]:
        return self._sliced(requests, self.inner.generate)

    def choice_probs(self, requests: Sequence[ChoiceRequest]) -> list[ChoiceResult | BackendError]:
        return self._sliced(requests, self.inner.choice_probs)

    def _sliced(
        self, requests: Sequence[Q], call: Callable[[Sequence[Q]], list[R | BackendError]]
    ) -> list[R | BackendError]:
        out: list[R | BackendError] = []
        start = 0
        per_minute = self.limiter.limits.requests_per_minute or math.inf
        while start < len(requests):
            want = int(min(len(requests) - start, per_minute))
            with self.limiter.slots(want) as taken:
                part = requests[start : start + taken]
                self.limiter.spend(len(part), sum(estimated_tokens(r) for r in part))
                out.extend(call(part))
            start += len(part)
        return out

    def close(self) -> None:
        self.inner.close()


def limited(backend: JudgeBackend, redis_url: str, name: str, limits: ApiLimits) -> LimitedBackend:
    """``backend`` behind the limits of judge ``name``, counted in the Redis at ``redis_url``."""
    import redis

    return LimitedBackend(backend, SharedLimiter(redis.Redis.from_url(redis_url), name, limits))
