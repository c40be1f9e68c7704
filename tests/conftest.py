"""Shared fixtures: real SQLite and PostgreSQL databases migrated with Alembic.

PostgreSQL tests use ``RUBRICSVC_TEST_POSTGRES_URL`` (default: the local server, database
``test``). Each test run creates its own throw-away databases there and drops them after.
With ``CI=true`` an unreachable server fails the run; elsewhere those tests skip.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from rubricsvc import db
from rubricsvc.models import Base
from tests.requirements import IN_CI, unavailable  # noqa: F401 - IN_CI is imported from here too

POSTGRES_URL = os.environ.get(
    "RUBRICSVC_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _postgres_unavailable_reason() -> str | None:
    try:
        engine = create_engine(POSTGRES_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as err:
        return (
            f"PostgreSQL not reachable at {POSTGRES_URL} ({str(err).splitlines()[0]}); "
            "start it or set RUBRICSVC_TEST_POSTGRES_URL"
        )
    return None


@pytest.fixture(autouse=True)
def _fresh_canaries() -> None:
    """Forget canary outcomes between tests: scripted judges change their behaviour under one
    judge config, which a real judge does not."""
    from rubricsvc.scoring.attribution import CANARIES

    CANARIES.clear()


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The admin URL of a reachable PostgreSQL server (skip, or fail in CI, if there is none)."""
    reason = _postgres_unavailable_reason()
    if reason is not None:
        unavailable(reason)
    return POSTGRES_URL


@pytest.fixture(scope="session")
def make_postgres_database(postgres_server: str) -> Iterator[object]:
    """A factory for fresh empty databases on the server, all dropped at the end of the run."""
    admin = create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    created: list[str] = []

    def factory() -> str:
        name = f"rubricsvc_test_{uuid.uuid4().hex[:12]}"
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        created.append(name)
        return make_url(postgres_server).set(database=name).render_as_string(hide_password=False)

    yield factory
    with admin.connect() as conn:
        for name in created:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def migrated_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "template.sqlite"
    db.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def sqlite_url(migrated_sqlite_template: Path, tmp_path: Path) -> str:
    """A migrated SQLite database of its own for one test."""
    path = tmp_path / "rubricsvc.sqlite"
    shutil.copy(migrated_sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(scope="session")
def postgres_migrated_url(make_postgres_database: object) -> str:
    url = make_postgres_database()  # type: ignore[operator]
    db.upgrade(url)
    return url


def _truncate_all(engine: Engine) -> None:
    # TRUNCATE fires no row-level DELETE triggers, so immutable rows can be cleared between tests.
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A migrated, empty database: each test runs once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        yield request.getfixturevalue("sqlite_url")
        return
    url = request.getfixturevalue("postgres_migrated_url")
    engine = db.make_engine(url)
    _truncate_all(engine)
    yield url
    _truncate_all(engine)
    engine.dispose()


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = db.make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    with Session(engine, expire_on_commit=False) as session:
        yield session
        session.rollback()
