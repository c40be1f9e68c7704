"""When a call to the reward API is worth another try, and how long to wait before it.

Tried again: a connection error or a time-out (no answer at all), HTTP 429 (the server asks
for a pause) and any 5xx (the server restarting, or a busy proxy in front of it). Not tried
again: any other 4xx, which the same request would get again. A ``Retry-After`` header (in
seconds or an HTTP date) is honoured, up to ``MAX_RETRY_AFTER``; without one, the wait is
``backoff x 2^attempt``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from rubricsvc.errors import RubricsvcError

# A server asking for longer than this is waited on only this long: past it, a training step
# is better told (the retries run out and the error names the status) than left hanging.
MAX_RETRY_AFTER = 120.0


def worth_retrying(status: int) -> bool:
    return status == 429 or status >= 500


def retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """The pause a ``Retry-After`` header asks for, in seconds (None without a readable one)."""
    value = headers.get("retry-after") or headers.get("Retry-After")
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def retry_wait(attempt: int, backoff: float, headers: Mapping[str, str] | None = None) -> float:
    """Seconds to wait before try ``attempt + 1`` (``attempt`` counts from 0)."""
    asked = retry_after(headers) if headers is not None else None
    return asked if asked is not None else backoff * 2**attempt


def next_wait(
    url: str,
    attempt: int,
    retries: int,
    backoff: float,
    response: Any = None,
    error: Exception | None = None,
) -> float | None:
    """After try ``attempt`` (from 0) of ``retries + 1``, which got ``response`` (an httpx
    response) or failed to connect with ``error``: the seconds to wait before the next try, or
    None to stop and read ``response``. A connection that failed on the last try raises."""
    last = attempt == retries
    if error is not None:
        if last:
            raise RubricsvcError(f"POST {url}: {type(error).__name__}: {error}") from None
        return retry_wait(attempt, backoff)
    if last or not worth_retrying(response.status_code):
        return None
    return retry_wait(attempt, backoff, response.headers)
