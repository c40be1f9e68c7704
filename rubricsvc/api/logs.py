"""API keys never reach the logs: the access log line of ``?api_key=...`` shows it redacted.

uvicorn's access logger writes each request's path with its query string, which is where
OpenRLHF's client has to put its key. ``RedactSecrets`` rewrites a record's message and
arguments (the access formatter reads the path from the arguments) so that any ``api_key``
query parameter, and anything shaped like a key (``rsk_...``), reads ``[REDACTED]``. The app
installs it on uvicorn's loggers when it starts (``rubricsvc serve`` runs it so).
"""

from __future__ import annotations

import logging
import re
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
