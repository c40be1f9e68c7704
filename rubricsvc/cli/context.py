"""What every command shares: the database engine, error handling, console output."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

from pydantic import ValidationError
from rich.console import Console
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session

from rubricsvc.config import get_settings
from rubricsvc.db import current_revision, head_revision, make_engine, session_scope
from rubricsvc.errors import RubricsvcError, first_line
from rubricsvc.plugins import load_plugins

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


class CliExit(Exception):
    """Stop the command with this message (already one line) and exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@lru_cache(maxsize=1)
def engine() -> Engine:
    return make_engine(get_settings().db.url)


def load_configured_plugins() -> None:
    """Import the plugins the settings name, before any command reads a judge config."""
    try:
        plugins = get_settings().plugins
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        about = f"setting {where} of {err.title}" if where else "settings"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise CliExit(f"invalid {about}: {message}") from None
    load_plugins(plugins)


def require_migrated(db: Engine) -> None:
    where = db.url.render_as_string(hide_password=True)
    try:
        current = current_revision(db)
    except OperationalError as err:
        raise CliExit(f"cannot open database {where}: {first_line(err)}") from None
    head = head_revision()
    if current != head:
        state = "is empty" if current is None else f"is at revision {current}, not {head}"
        raise CliExit(f"database {where} {state}: run `rubricsvc db upgrade`")


def require_broker() -> str:
    url = get_settings().broker.url
    if not url:
        raise CliExit(
            "no broker configured: set RUBRICSVC_BROKER_URL (redis://... or amqp://...) "
            "to score on workers"
        )
    return url


@contextmanager
def db_session(migrated: bool = True) -> Iterator[Session]:
    """A session in one transaction for a command; errors become one-line exits."""
    db = engine()
    if migrated:
        require_migrated(db)
    try:
        with session_scope(db) as session:
            yield session
    except RubricsvcError as err:
        raise CliExit(str(err), err.exit_code) from None
    except SQLAlchemyError as err:
        raise CliExit(f"database error: {first_line(err)}") from None


def fail(message: str, code: int = 1) -> None:
    err_console.print(f"[red]error:[/red] {message}", soft_wrap=True)
    sys.exit(code)
