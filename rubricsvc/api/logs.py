"""API keys never reach the logs: the access log line of ``?api_key=...`` shows it redacted.

uvicorn's access logger writes each request's path with its query string, which is where
OpenRLHF's client has to put its key. ``RedactSecrets`` rewrites a record's message and
arguments (the access formatter reads the path from the arguments) so that any ``api_key``
query parameter, and anything shaped like a key (``rsk_...``), reads ``[REDACTED]``. The app
installs it on uvicorn's loggers when it starts (``rubricsvc serve`` runs it so).

A client's doing never floods the log either: ``LogTally`` writes what may happen at a
client's pace (a client gone mid-request, a connection timed out or refused) as one line for
the first, then at most one line a window saying how many more there were.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

from rubricsvc.apikeys import SECRET_PREFIX

REDACTED = "[REDACTED]"
# Loggers that may write a request's path or headers.
LOGGERS = ("uvicorn.access", "uvicorn.error")

# The server decodes a percent-encoded query (api%5Fkey=rsk%5F...) before it checks the key,
# but the access log shows it as sent: underscores may be written %5F.
_UNDERSCORE = r"(?:_|%5F)"
_QUERY_KEY = re.compile(r"((?:^|[?&;\s])api" + _UNDERSCORE + r"key=)[^&;\s\"']*", re.IGNORECASE)
_SECRET = re.compile(
    re.escape(SECRET_PREFIX).replace("_", _UNDERSCORE) + r"[A-Za-z0-9_\-%]+", re.IGNORECASE
)


def redact(text: str) -> str:
    return _SECRET.sub(REDACTED, _QUERY_KEY.sub(r"\1" + REDACTED, text))


def _redacted(value: Any) -> Any:
    return redact(value) if isinstance(value, str) else value


class RedactSecrets(logging.Filter):
    """A filter that keeps every record, with keys in its message and arguments redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redacted(arg) for arg in record.args)
        elif isinstance(record.args, dict):
            record.args = {name: _redacted(arg) for name, arg in record.args.items()}
        return True


def install_redaction(loggers: tuple[str, ...] = LOGGERS) -> None:
    """Add ``RedactSecrets`` to ``loggers`` (once each; later calls change nothing)."""
    for name in loggers:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactSecrets) for f in logger.filters):
            logger.addFilter(RedactSecrets())


class LogTally:
    """Lines about something that happens at a client's pace: the first at once, then, while
    more keep coming, one line every ``every`` seconds that counts them (``summary``)."""

    def __init__(self, logger: logging.Logger, level: int, summary: str, every: float = 10.0):
        self.logger = logger
        self.level = level
        self.summary = summary
        self.every = every
        self._quiet_until = 0.0  # (monotonic) no line of its own before this
        self._more = 0  # since the last line
        self._report: asyncio.TimerHandle | None = None

    def note(self, message: str, *args: Any) -> None:
        """One occurrence, ``message % args``: written at once outside a window, else
        counted into the window's line."""
        if not self.logger.isEnabledFor(self.level):
            return
        now = time.monotonic()
        if now >= self._quiet_until and not self._more:
            self._quiet_until = now + self.every
            self.logger.log(self.level, message, *args)
            return
        self._more += 1
        if self._report is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop to report from later: now
                self._write_summary()
                return
            self._report = loop.call_later(max(self._quiet_until - now, 0.0), self._write_summary)

    def _write_summary(self) -> None:
        self._report = None
        more, self._more = self._more, 0
        self._quiet_until = time.monotonic() + self.every
        if more:
            self.logger.log(
                self.level, "%s: %d more in the last %g s", self.summary, more, self.every
            )
