"""Failed authentications per client address: past a limit, 429 with ``Retry-After``.

An unknown or revoked API key on any route that needs one (``auth.KeyGate``) and a wrong key
on the review pages' sign-in form (``ui.routes.auth``) count against the address they came
from, in a bucket like the per-key rate limit's (``ratelimit``): at most
``RUBRICSVC_API_FAILED_AUTH_PER_MINUTE`` failures at once, refilled continuously at that many
a minute, counted in this process's memory or, with ``RUBRICSVC_API_RATE_LIMIT_URL``, in Redis
for every server process. Once an address's bucket is empty, every request from it that needs
a key, and every sign-in, is refused with 429 until the bucket holds one failure again,
whatever key it carries: a right key found meanwhile is refused too, so guessing is held to
that rate. A refused request costs no key lookup.

Successful requests are never counted; while no address is refused they pay one test of an
empty dict. Each process remembers the addresses it refused: with a shared bucket, a process
learns that an address is refused from its own next failure from it.

The address is the client's as the server sees it (behind a proxy, the one that uvicorn takes
from ``X-Forwarded-For``, from the addresses in ``FORWARDED_ALLOW_IPS``); IPv6 addresses count
by their /64 network, which one client usually holds whole.

Logged at WARNING, without letting a flood flood the log: the first failure of an address in
a minute and its first refusal, each naming it; the rest are counted, and the count is logged
in one line at the first failure after that minute (or when the server stops). At most
``MAX_LINES`` such lines a minute whatever the number of addresses.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable

from rubricsvc.api.ratelimit import MemoryRateLimiter, RateLimiter

log = logging.getLogger(__name__)

WINDOW_SECONDS = 60.0  # of the log's counting, as of the buckets' refill
MAX_LINES = 20  # lines naming an address, per window, all addresses together
MAX_ADDRESSES = 100_000  # refused addresses remembered by a process (the oldest go first)


def client_address(host: str | None) -> str:
    """The address failures count against: the host as given, an IPv6 address's /64."""
    if not host:
        return "unknown"
    if ":" in host:
        try:
            return str(ipaddress.IPv6Network((host, 64), strict=False))
        except ValueError:
            pass
    if len(host) <= 64 and host.isascii() and host.isprintable():
        return host
    # Printable and short, whatever a proxy header held: it is logged.
    return "".join(c if c.isprintable() and c.isascii() else "?" for c in host[:64])


class FailureLog:
    """The throttle's log lines: the first of each kind per address and window, then counts."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._window_end = -math.inf
        self._named: set[tuple[str, str]] = set()
        self._quiet: Counter[str] = Counter()  # events not logged, by kind
        self._quiet_addresses: Counter[str] = Counter()
        self._started = 0.0

    def note(self, address: str, kind: str, line: str) -> None:
        """Log ``line`` if it is the first of ``kind`` for ``address`` in this window (and
        there is room), else count it."""
        now = self.clock()
        with self._lock:
            summary = None
            if now >= self._window_end:
                summary = self._summary(now)
                self._reset(now)
            logged = (address, kind) not in self._named and len(self._named) < MAX_LINES
            if logged:
                self._named.add((address, kind))
            else:
                self._quiet[kind] += 1
                if address in self._quiet_addresses or len(self._quiet_addresses) < 1000:
                    self._quiet_addresses[address] += 1
        if summary:
            log.warning("%s", summary)
        if logged:
            log.warning("%s", line)

    def flush(self) -> None:
        now = self.clock()
        with self._lock:
            summary = self._summary(now)
            self._reset(now)
        if summary:
            log.warning("%s", summary)

    def _reset(self, now: float) -> None:
        self._started = now
        self._window_end = now + WINDOW_SECONDS
        self._named.clear()
        self._quiet.clear()
        self._quiet_addresses.clear()

    def _summary(self, now: float) -> str | None:
        if not self._quiet:
            return None
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(self._quiet.items()))
        most = ", ".join(f"{a} ({n})" for a, n in self._quiet_addresses.most_common(3))
        return (
            f"failed authentication: {counts} not logged one by one in the last "
            f"{now - self._started:.0f} s, from {len(self._quiet_addresses)} address(es); "
            f"most from {most}"
        )


class FailedAuthThrottle:
    """Failed authentications counted per client address, and the addresses refused."""

    def __init__(self, limiter: RateLimiter, clock: Callable[[], float] = time.monotonic) -> None:
        self.limiter = limiter  # one bucket per address
        self.per_minute = limiter.per_minute
        # Counting a failure needs no I/O: the gate counts it on the event loop.
        self.in_memory = isinstance(limiter, MemoryRateLimiter)
        self.clock = clock
        # Address -> when it may try again (monotonic): tested on every request, so a plain
        # dict, empty while no one is refused.
        self.refused: dict[str, float] = {}
        self._lock = threading.Lock()
        self._next_sweep = -math.inf
        self.log = FailureLog(clock)

    @staticmethod
    def address_of(host: str | None) -> str:
        """``client_address``, for callers that cannot import this module (the pages)."""
        return client_address(host)

    def waiting(self, address: str, what: str = "") -> float:
        """Seconds ``address`` must still wait before it may try again (0: it may). No I/O."""
        until = self.refused.get(address)
        now = self.clock()
        if until is not None and now < until:
            self.log.note(address, "refusals (429)", self._refusal_line(address, what, until - now))
            return until - now
        if until is not None or now >= self._next_sweep:
            self._sweep(now)
        return 0.0

    def failed(self, address: str, what: str) -> float:
        """Count a failed authentication from ``address`` (``what``: which, where): 0 while
        under the limit, else the seconds it must wait (refused till then)."""
        wait = self.limiter.take(address)
        if wait <= 0:
            self.log.note(
                address,
                "failures",
                f"failed authentication from {address}: {what} (the address's further "
                f"failures this minute are counted, not logged; past {self.per_minute} a "
                "minute it is refused with 429)",
            )
            return 0.0
        now = self.clock()
        with self._lock:
            self.refused.pop(address, None)  # re-inserted last: the dict keeps arrival order
            self.refused[address] = now + wait
            while len(self.refused) > MAX_ADDRESSES:
                del self.refused[next(iter(self.refused))]
        self.log.note(address, "refusals (429)", self._refusal_line(address, what, wait))
        return wait

    def _refusal_line(self, address: str, what: str, wait: float) -> str:
        return (
            f"failed authentication: {address} refused with 429 for {math.ceil(wait)} s, past "
            f"{self.per_minute} failed authentications a minute{f' ({what})' if what else ''}; "
            "its further refusals this minute are counted, not logged"
        )

    def _sweep(self, now: float) -> None:
        """Forget every address whose wait is over (so that the dict empties again)."""
        with self._lock:
            self._next_sweep = now + 1.0
            for done in [a for a, until in self.refused.items() if until <= now]:
                del self.refused[done]

    def close(self) -> None:
        """Log what was counted and not logged yet (the server is stopping)."""
        self.log.flush()
