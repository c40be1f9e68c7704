"""Engines, sessions and migrations.

Transactions belong to the boundary (a CLI command, a request, a task): it opens
``session_scope()``; services and repositories only flush.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from rubricsvc import jsontext
from rubricsvc.errors import ImmutableError
from rubricsvc.models import MUTABLE_VERSION_COLUMNS, Criterion, JudgeConfig, RubricVersion

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"

# PostgreSQL's side of each session probes a client that has gone quiet and ends the session
# when it stops answering. A worker host cut off inside a transaction (a chunk's checkpoint
# holds the chunk's row lock until it commits) otherwise leaves that session, and its locks,
# to the kernel's defaults: two hours before the first probe. Until then the reaper's
# reclaim of that chunk waits on the lock and the job hangs. With these, the server probes
# a client silent for 4 s every second and ends its session 10 s after it fell silent (on
# Linux the user timeout also decides when unanswered probes end a connection; measured
# 10.2-10.3 s from a cut to the lock's release). A live client's kernel answers the probes,
# however long its transaction.
POSTGRES_DEAD_CLIENT_SETTINGS = {
    "tcp_keepalives_idle": "4",
    "tcp_keepalives_interval": "1",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "10000",
}
# The client's side of the same: a connection attempt gives up after 10 s, and a session
# whose server stops answering (its host cut off or gone) fails within about 30 s, whether a
# statement's packets go unacknowledged (the user timeout) or the client waits quietly on a
# reply (probes after 10 s of silence), instead of TCP's own limits: minutes for a connect,
# about 15 for a statement, forever for a quiet wait. A live server's kernel answers the
# probes, however long its statement runs. A URL's own values win (``?connect_timeout=60``).
POSTGRES_CLIENT_TIMEOUTS = {
    "connect_timeout": "10",
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
}
# Every statement planned with its values. The batched lookups (the judgment cache, a reward
# batch's completions, the records of a file being added) send one statement with hundreds
# of values IN one list, again and again; psycopg prepares it after five runs, and
# PostgreSQL may then plan it once for any values. Such a plan cannot hash the list, and on
# a table whose statistics lag a bulk write (a database's first large run, before autovacuum
# analyzes it) it compares every row with every value: looking up the 20,000 keys of a run
# right after it stored them took 18.8 s, and 0.8-0.9 s with their values or once the table
# was analyzed. Planning each execution has its cost, highest for the batch inserts (a
# statement of up to 1,000 rows): 5,000 rollouts rewarded in batches of 256 took 11.0-11.3 s,
# and 8.6-9.2 s with the URL's ``-c plan_cache_mode=auto`` (one-off). A lookup planned for any
# values cost up to 20x; scoping the setting to the lookups alone would save the rest.
POSTGRES_PLANNING_SETTINGS = {"plan_cache_mode": "force_custom_plan"}
POSTGRES_SESSION_SETTINGS = POSTGRES_DEAD_CLIENT_SETTINGS | POSTGRES_PLANNING_SETTINGS
# Set on each new connection, and only where nothing else set them (``pg_settings.source`` is
# 'default'): the server's configuration, ALTER DATABASE/ROLE ... SET and a URL's own
# ``options`` win. Not as startup ``options`` ourselves: PgBouncer refuses a connection whose
# options name settings it does not track (these).
_SET_UNSET = (
    "SELECT set_config(name, wanted.value, false) FROM pg_settings"
    " JOIN (VALUES {rows}) AS wanted (name, value) USING (name) WHERE source = 'default'"
).format(rows=", ".join(f"('{k}', '{v}')" for k, v in POSTGRES_SESSION_SETTINGS.items()))


def _enable_sqlite_foreign_keys(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    # WAL lets readers (a progress query) run beside a writer (the scoring loop).
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def _set_session_settings(dbapi_connection: Any, _record: Any) -> None:
    with dbapi_connection.cursor() as cursor:
        cursor.execute(_SET_UNSET)
    dbapi_connection.commit()  # session settings made in a transaction end with it otherwise


def make_engine(url: str, echo: bool = False) -> Engine:
    """An engine for ``url``, creating a SQLite file's folder."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        # JSON columns are written as json.dumps writes them, by an encoder built once.
        engine = create_engine(url, echo=echo, json_serializer=jsontext.dumps)
        event.listen(engine, "connect", _enable_sqlite_foreign_keys)
        return engine
    if parsed.drivername == "postgresql":
        # psycopg 3 is the driver we install; plain postgresql:// would look for psycopg2.
        url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    postgres = parsed.get_backend_name() == "postgresql"
    options: dict[str, Any] = {}
    if postgres:
        options = _native_placeholders()
        timeouts = {k: v for k, v in POSTGRES_CLIENT_TIMEOUTS.items() if k not in parsed.query}
        options["connect_args"] = timeouts | options["connect_args"]
    engine = create_engine(
        url, echo=echo, pool_pre_ping=True, json_serializer=jsontext.dumps, **options
    )
    if postgres:
        event.listen(engine, "connect", _set_session_settings)
    return engine


def _native_placeholders() -> dict[str, Any]:
    """Statements written with PostgreSQL's own ``$1`` placeholders and sent as written
    (psycopg's ``RawCursor``).

    With ``%(name)s`` placeholders psycopg rewrites every statement into ``$1`` form in
    Python, and caches the rewrite only for statements under 4 KB and 50 parameters: a batch
    insert of judgments (hundreds of rows, a dozen values each) was parsed anew each time,
    a third of a reward batch's time on PostgreSQL (5,000 rollouts x 4 criteria in batches
    of 256: 16.2 s, 10.1-12.4 s with these). SQLAlchemy writes ``$1`` itself for this style, as
    for asyncpg."""
    import psycopg

    return {"paramstyle": "numeric_dollar", "connect_args": {"cursor_factory": psycopg.RawCursor}}


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """One transaction: commit on success, roll back on any error."""
    session = make_sessionmaker(engine)()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def _changed_columns(obj: object) -> set[str]:
    state = inspect(obj)
    return {attr.key for attr in state.attrs if attr.history.has_changes()}


@event.listens_for(Session, "before_flush")
def _guard_immutable_rows(session: Session, _ctx: Any, _instances: Any) -> None:
    """Refuse to flush an edit of saved rubric content or a saved judge config.

    The database triggers (see the first migration) enforce the same rule for raw SQL;
    this guard gives ORM users a clear error before the statement is sent.
    """
    for obj in session.dirty:
        if isinstance(obj, RubricVersion):
            frozen = (
                _changed_columns(obj) - MUTABLE_VERSION_COLUMNS - {"criteria", "rubric", "parent"}
            )
            if frozen:
                raise ImmutableError(
                    f"rubric version {obj.id} is immutable (tried to change {', '.join(sorted(frozen))}); "
                    "save an edit as a new version"
                )
        elif isinstance(obj, Criterion) and _changed_columns(obj) - {"version"}:
            raise ImmutableError(
                f"criterion {obj.id} belongs to a saved rubric version and is immutable; "
                "save an edit as a new version"
            )
        elif isinstance(obj, JudgeConfig) and _changed_columns(obj):
            raise ImmutableError(f"judge config {obj.name!r} is immutable; create a new one")
    for obj in session.deleted:
        if isinstance(obj, RubricVersion | Criterion):
            raise ImmutableError(
                "rubric versions and their criteria cannot be deleted; retire the version"
            )


def alembic_config(url: str) -> Any:
    """An Alembic config pointing at this package's migrations and ``url``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


@lru_cache(maxsize=1)
def head_revision() -> str | None:
    """The newest migration (read once: parsing the scripts costs ~15 ms, and /healthz asks)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def insert_for(session: Session, model: type[Any]) -> Any:
    """An INSERT for ``model`` in the session's dialect, which has ``on_conflict_do_*``.

    Idempotent writes (insert-on-conflict) are how concurrent workers and repeated
    imports avoid duplicates; both supported databases offer them with the same API.
    """
    return insert_in(session.get_bind().dialect.name, model)


def insert_in(dialect: str, target: Any) -> Any:
    """``insert_for`` by dialect name, for statements built once and reused."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(target)
    if dialect == "sqlite":
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(target)
    raise NotImplementedError(f"no idempotent insert for {dialect}")


def display_url(url: str) -> str:
    """``url`` with any password masked, for messages and logs."""
    return make_url(url).render_as_string(hide_password=True)
