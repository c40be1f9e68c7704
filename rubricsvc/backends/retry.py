"""When a failed backend call is tried again, and how long to wait first.

One policy for judging, drafting and refinement: only failures that say retrying may help are
retried, and each retry waits longer than the last (exponential backoff with jitter, so clients
that failed together do not come back together). A 429 is the provider asking to slow down: it
is never retried at once, whatever the configured backoff.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rubricsvc.backends.base import BackendError

RATE_LIMITED_DELAY = 1.0  # seconds, at least, before retrying after a 429


def rate_limited(error: BackendError | None) -> bool:
    """Whether ``error`` is the provider's "too many requests"."""
    return error is not None and error.status == 429


@dataclass(frozen=True)
class Backoff:
    """Up to ``retries`` further attempts, waiting ``base`` seconds before the first, doubled
    before each later one."""

    retries: int
    base: float
    sleep: Callable[[float], None] = time.sleep

    def allows(self, retryable: bool, attempt: int) -> bool:
        """Whether a failure of attempt ``attempt`` (0: the first) is tried again."""
        return retryable and attempt < self.retries

    def delay(self, attempt: int, *, after_429: bool = False) -> float:
        """Seconds to wait after attempt ``attempt`` failed: ``base * 2**attempt`` plus up to
        half as much again at random."""
        delay: float = self.base * 2.0**attempt
        delay += random.uniform(0, delay / 2)
        return max(delay, RATE_LIMITED_DELAY) if after_429 else delay

    def wait(self, attempt: int, errors: Iterable[BackendError | None] = ()) -> None:
        """Wait before retrying what attempt ``attempt`` left failed with ``errors``."""
        self.sleep(self.delay(attempt, after_429=any(rate_limited(e) for e in errors)))
