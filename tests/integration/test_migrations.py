"""Migrations go up, down and up again on both databases, and match the ORM models exactly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from rubricsvc import db
from rubricsvc.models import Base

REPO = Path(__file__).resolve().parents[2]
TABLES = {t.name for t in Base.metadata.sorted_tables}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.sqlite'}"
    return str(request.getfixturevalue("make_postgres_database")())


def _tables(url: str) -> set[str]:
    engine = db.make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def _drift(url: str) -> list[object]:
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            return list(compare_metadata(MigrationContext.configure(conn), Base.metadata))
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(empty_database_url: str) -> None:
    db.upgrade(empty_database_url)
    assert _tables(empty_database_url) == TABLES
    db.downgrade(empty_database_url, "base")
    assert _tables(empty_database_url) == set()
    db.upgrade(empty_database_url)
    assert _tables(empty_database_url) == TABLES


def test_models_and_migrations_do_not_drift(empty_database_url: str) -> None:
    db.upgrade(empty_database_url)
    assert _drift(empty_database_url) == []


def test_drift_check_detects_a_model_change(empty_database_url: str) -> None:
    """The comparison above would notice a column added to the models but not migrated."""
    from sqlalchemy import Column, Integer

    db.upgrade(empty_database_url)
    table = Base.metadata.tables["prompts"]
    extra = Column("not_migrated", Integer)
    table.append_column(extra)
    try:
        diffs = _drift(empty_database_url)
    finally:
        table._columns.remove(extra)  # undo: the metadata is shared by every test
    assert any("not_migrated" in str(d) for d in diffs)


@pytest.mark.slow  # 5-20 s here: left out of the inner loop (make test-fast), run by make test
def test_alembic_command_line_round_trip(tmp_path: Path) -> None:
    """`alembic upgrade head / downgrade base / upgrade head` from the repository root."""
    url = f"sqlite:///{tmp_path / 'cli.sqlite'}"
    alembic = [sys.executable, "-m", "alembic", "-x", f"url={url}"]
    for step in (["upgrade", "head"], ["downgrade", "base"], ["upgrade", "head"]):
        subprocess.run([*alembic, *step], cwd=REPO, check=True, capture_output=True)
    assert _tables(url) == TABLES


def _insert_version(url: str, origin: str) -> None:
    """A rubric and one version of ``origin``, in raw SQL (the database's CHECK decides)."""
    from sqlalchemy import text

    engine = db.make_engine(url)
    try:
        with engine.begin() as conn:
            rubric_id = conn.execute(
                text("INSERT INTO rubrics (name) VALUES (:name) RETURNING id"),
                {"name": f"r-{origin}"},
            ).scalar_one()
            conn.execute(
                text(
                    "INSERT INTO rubric_versions (rubric_id, number, content_hash, origin, "
                    "origin_detail, status) VALUES (:rubric, 1, :hash, :origin, '{}', 'draft')"
                ),
                {"rubric": rubric_id, "hash": "0" * 64, "origin": origin},
            )
    finally:
        engine.dispose()


def test_evolved_origin_is_allowed_from_0015_and_not_before(empty_database_url: str) -> None:
    """0015 widens the CHECK of rubric_versions.origin to ``evolved`` (a version an evolution
    run grew), still refuses unknown origins, keeps the immutability triggers, and its
    downgrade narrows the CHECK again."""
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    db.upgrade(empty_database_url)
    db.downgrade(empty_database_url, "0014")
    with pytest.raises(DBAPIError):
        _insert_version(empty_database_url, "evolved")
    db.upgrade(empty_database_url)
    _insert_version(empty_database_url, "evolved")
    with pytest.raises(DBAPIError):
        _insert_version(empty_database_url, "grown")
    engine = db.make_engine(empty_database_url)
    try:
        with pytest.raises(DBAPIError, match="immutable"), engine.begin() as conn:
            conn.execute(text("UPDATE rubric_versions SET origin = 'human'"))
    finally:
        engine.dispose()
