"""Requests per minute per API key: past the limit, 429 with ``Retry-After``.

One bucket per key, holding at most N requests and refilled continuously at N per minute (a
key idle for a minute may send N at once, and then one every 60/N seconds). It is the bucket
of the shared judge limits (``rubricsvc.backends.limits``): in this process's memory
by default, or in Redis, clocked by Redis's own ``TIME`` and shared by every server process,
when ``RUBRICSVC_API_RATE_LIMIT_URL`` is set. While Redis cannot be reached, each process
counts on its own (and says so in its log) rather than refusing every request.

The same buckets, one per client address, count failed authentications
(``failed_auth_limiter``, ``authfailures``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeAlias

from rubricsvc.config import ApiLimits, ApiSettings
from rubricsvc.errors import DependencyMissing

log = logging.getLogger(__name__)

# What a bucket is for: an API key's id, or a client's address (failed authentications).
BucketKey: TypeAlias = int | str


class RateLimiter(Protocol):
    per_minute: int

    def take(self, key_id: BucketKey) -> float:
        """Count one request of key ``key_id``: 0 if it is allowed, else the seconds until
        one would be (nothing is counted then)."""
        ...


def retry_after(wait: float) -> int:
    """``Retry-After`` in whole seconds: never 0, so a client that obeys it is admitted."""
    return max(1, math.ceil(wait))


class MemoryRateLimiter:
    """The buckets of one process. ``max_buckets``: past that many, the full ones (no
    different from none) are dropped, so that buckets for anyone (addresses) stay bounded."""

    def __init__(
        self,
        per_minute: int,
        clock: Callable[[], float] = time.monotonic,
        max_buckets: int | None = None,
    ) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self.max_buckets = max_buckets
        self._buckets: dict[BucketKey, tuple[float, float]] = {}  # key -> (level, at)
        self._lock = threading.Lock()

    def take(self, key_id: BucketKey) -> float:
        cap = float(self.per_minute)
        now = self.clock()
        with self._lock:
            if self.max_buckets is not None and len(self._buckets) >= self.max_buckets:
                self._drop_full(now)
            level, at = self._buckets.get(key_id, (cap, now))
            level = min(cap, level + (now - at) * cap / 60)
            if level >= 1:
                self._buckets[key_id] = (level - 1, now)
                return 0.0
            self._buckets[key_id] = (level, now)
            return (1 - level) * 60 / cap

    def _drop_full(self, now: float) -> None:
        """Drop the buckets refilled to the brim; if that leaves more than three quarters of
        ``max_buckets``, the first half too (so that this runs once per many requests)."""
        assert self.max_buckets is not None
        refill = self.per_minute / 60
        for key in [
            k
            for k, (level, at) in self._buckets.items()
            if level + (now - at) * refill >= self.per_minute
        ]:
            del self._buckets[key]
        if len(self._buckets) >= self.max_buckets * 3 // 4:
            for key in list(self._buckets)[: len(self._buckets) // 2]:
                del self._buckets[key]


class RedisRateLimiter:
    """Buckets in Redis under ``rubricsvc:ratelimit:key:<id>`` (``prefix``), shared by every
    process."""

    def __init__(
        self,
        client: Any,
        per_minute: int,
        fallback: MemoryRateLimiter,
        prefix: str = "rubricsvc:ratelimit:key",
    ) -> None:
        self.client = client
        self.per_minute = per_minute
        self.limits = ApiLimits(requests_per_minute=per_minute)
        self.fallback = fallback
        self.prefix = prefix
        self._limiters: dict[BucketKey, Any] = {}
        self._warned_at = -math.inf

    def _limiter(self, key_id: BucketKey) -> Any:
        from rubricsvc.backends.limits import SharedLimiter

        limiter = self._limiters.get(key_id)
        if limiter is None:
            if len(self._limiters) >= 10_000:  # buckets for anyone (addresses): bounded
                self._limiters.clear()
            limiter = SharedLimiter(self.client, f"api-key-{key_id}", self.limits)
            limiter.prefix = f"{self.prefix}:{key_id}"  # apart from judges' limits
            self._limiters[key_id] = limiter
        return limiter

    def take(self, key_id: BucketKey) -> float:
        import redis

        try:
            return float(self._limiter(key_id).try_spend(1, 0))
        except redis.RedisError as err:
            now = time.monotonic()
            if now - self._warned_at > 60:
                self._warned_at = now
                log.warning("rate limits counted in this process only: Redis failed (%s)", err)
            return self.fallback.take(key_id)


def rate_limiter(settings: ApiSettings) -> RateLimiter | None:
    """The limiter ``settings`` ask for, or None when rate limits are off."""
    per_minute = settings.rate_limit_per_minute
    if not per_minute:
        return None
    return _limiter(settings, per_minute, "rubricsvc:ratelimit:key")


def failed_auth_limiter(settings: ApiSettings) -> RateLimiter | None:
    """The buckets of failed authentications, one per client address (None: not counted)."""
    per_minute = settings.failed_auth_per_minute
    if not per_minute:
        return None
    return _limiter(settings, per_minute, "rubricsvc:ratelimit:failed-auth", max_buckets=100_000)


def _limiter(
    settings: ApiSettings, per_minute: int, prefix: str, max_buckets: int | None = None
) -> RateLimiter:
    local = MemoryRateLimiter(per_minute, max_buckets=max_buckets)
    if not settings.rate_limit_url:
        return local
    try:
        import redis
    except ImportError:
        raise DependencyMissing(
            "RUBRICSVC_API_RATE_LIMIT_URL needs the redis client: pip install 'rubricsvc[workers]'"
        ) from None
    client = redis.Redis.from_url(
        settings.rate_limit_url, socket_timeout=2.0, socket_connect_timeout=2.0
    )
    return RedisRateLimiter(client, per_minute, local, prefix)
