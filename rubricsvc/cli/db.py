"""``rubricsvc db ...``."""

from __future__ import annotations

import typer

from rubricsvc import db
from rubricsvc.cli.context import CliExit, console, engine
from rubricsvc.config import get_settings

db_app = typer.Typer(help="Create and migrate the database.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(revision: str = typer.Argument("head", help="Target revision.")) -> None:
    """Migrate the database to REVISION (default: the newest)."""
    url = get_settings().db.url
    console.print(f"Migrating {db.display_url(url)} to {revision} ...")
    try:
        db.upgrade(url, revision)
    except Exception as err:  # alembic raises many kinds; the message is what matters
        raise CliExit(f"migration failed: {str(err).splitlines()[0]}") from None
    console.print(f"Database is at revision {db.current_revision(engine())}.")


@db_app.command("current")
def db_current() -> None:
    """Print the database's migration revision and the newest one."""
    console.print(f"database: {db.display_url(get_settings().db.url)}")
    console.print(
        f"revision: {db.current_revision(engine()) or '(empty)'}  newest: {db.head_revision()}"
    )
