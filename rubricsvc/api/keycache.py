"""Admitted API keys kept in memory for a few seconds, so most requests skip the key lookup.

A live key read from the database is kept for ``RUBRICSVC_API_KEY_CACHE_SECONDS`` (0: never
kept, every request looks its key up). Unknown and revoked keys are never kept: a new key
works at once, a bad one is looked up every time. A key revoked in this process
(``apikeys.revoke_key``) is dropped from this process's caches as soon as the revocation is
committed; one revoked by another process (``rubricsvc keys revoke``, another server) keeps
working here until its entry expires, at most that many seconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rubricsvc.apikeys import hash_secret, on_revocation
from rubricsvc.models import ApiKey


class KeyCache:
    """Live keys by the hash of their secret, each until ``ttl`` seconds after it was read."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        self._keys: dict[str, tuple[ApiKey, float]] = {}  # secret hash -> (key, expires at)
        self._lock = threading.Lock()
        # Counts revocations, so a lookup that raced one does not keep what it read.
        self._revocations = 0
        on_revocation(self)

    def lookup(self, secret: str, load: Callable[[str], ApiKey | None]) -> ApiKey | None:
        """The live key with this secret: kept, else ``load(secret)`` (and kept if live)."""
        digest = hash_secret(secret)
        now = self._clock()
        with self._lock:
            kept = self._keys.get(digest)
            revocations = self._revocations
        if kept is not None and now < kept[1]:
            return kept[0]
        key = load(secret)
        with self._lock:
            if key is None or self.ttl <= 0 or revocations != self._revocations:
                self._keys.pop(digest, None)
            else:
                self._keys[digest] = (key, now + self.ttl)
        return key

    def kept(self, secret: str) -> ApiKey | None:
        """The live key with this secret if it is kept and fresh; None means unknown here
        (``lookup`` reads it), not refused. No I/O: safe on an event loop."""
        digest = hash_secret(secret)
        now = self._clock()
        with self._lock:
            kept = self._keys.get(digest)
        return kept[0] if kept is not None and now < kept[1] else None

    def key_revoked(self, key_id: int) -> None:
        """Forget key ``key_id`` (``apikeys.on_revocation`` calls this)."""
        with self._lock:
            self._revocations += 1
            self._keys = {d: kept for d, kept in self._keys.items() if kept[0].id != key_id}
