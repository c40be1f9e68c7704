"""Idempotent writes of judgments and scores (insert-on-conflict), on SQLite and PostgreSQL.

Each upsert is one statement built once per dialect and executed with a list of rows
(``executemany``): SQLAlchemy compiles it once and reuses the compiled form, where a
multi-row ``VALUES`` would be compiled anew on every call (its shape varies with the row
count, so SQLAlchemy never caches it). psycopg sends all the rows in one pipeline: one round
trip to PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any, NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.batching import batches
from rubricsvc.db import insert_in
from rubricsvc.models import Judgment, JudgmentStatus, Score

# What a new verdict rewrites in a stored failed judgment.
JUDGMENT_RESULT_COLUMNS = (
    "status",
    "value",
    "verdict",
    "reasoning",
    "raw_output",
    "prompt_tokens",
    "completion_tokens",
    "latency_ms",
    "attempts",
    "error",
    "failure",
    "detail",
)
SCORE_KEY_COLUMNS = ("completion_id", "rubric_version_id", "judge_config_id", "aggregation")
SCORE_RESULT_COLUMNS = ("value", "coverage", "status", "details")


def judgments_by_key(session: Session, keys: Iterable[str]) -> dict[str, Judgment]:
    keys = list(dict.fromkeys(keys))
    found: dict[str, Judgment] = {}
    for batch in batches(keys):
        # populate_existing: rows rewritten by a Core upsert must not come back stale
        # from the session's identity map.
        query = select(Judgment).where(Judgment.cache_key.in_(batch))
        for row in session.scalars(query.execution_options(populate_existing=True)):
            found[row.cache_key] = row
    return found


class StoredVerdict(NamedTuple):
    """What a score reads of a stored judgment: a plain row, not an ORM instance (loading
    and tracking one per judgment was a large share of a run's own time)."""

    id: int
    cache_key: str
    status: JudgmentStatus
    value: float | None
    verdict: str | None
    detail: dict[str, Any] | None
    failure: str | None
    error: str | None


_VERDICT_COLUMNS = tuple(Judgment.__table__.c[name] for name in StoredVerdict._fields)


def stored_verdicts(session: Session, keys: Iterable[str]) -> dict[str, StoredVerdict]:
    """``judgments_by_key``, as ``StoredVerdict`` rows (on PostgreSQL the batches are planned
    with their values: ``db.POSTGRES_PLANNING_SETTINGS``)."""
    keys = list(dict.fromkeys(keys))
    found: dict[str, StoredVerdict] = {}
    for batch in batches(keys):
        query = select(*_VERDICT_COLUMNS).where(Judgment.cache_key.in_(batch))
        for row in session.execute(query):
            verdict = StoredVerdict(*row)
            found[verdict.cache_key] = verdict
    return found


@cache
def judgment_upsert(dialect: str) -> Any:
    """Insert judgments; on a stored key, a new verdict replaces a failure only: a concurrent
    writer's ok row is kept."""
    table = Judgment.__table__
    statement = insert_in(dialect, table)
    # RETURNING gives the rows this statement wrote (inserted, or a failure rewritten): the
    # writer knows what they hold without reading them back; a row it left alone (another
    # writer's ok verdict) is not returned.
    return statement.on_conflict_do_update(
        index_elements=["cache_key"],
        set_={column: statement.excluded[column] for column in JUDGMENT_RESULT_COLUMNS},
        where=table.c.status == JudgmentStatus.FAILED,
    ).returning(table.c.cache_key, table.c.id)


@cache
def score_upsert(dialect: str) -> Any:
    """Insert scores, replacing the one stored for the same key."""
    statement = insert_in(dialect, Score.__table__)
    return statement.on_conflict_do_update(
        index_elements=list(SCORE_KEY_COLUMNS),
        set_={column: statement.excluded[column] for column in SCORE_RESULT_COLUMNS},
    )


def save_judgments(session: Session, rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Store judgments; a new ok verdict replaces a stored failure, nothing replaces an ok one.
    The ids of the rows written, by cache key (a key whose stored ok row was kept is absent)."""
    if not rows:
        return {}
    written = session.execute(judgment_upsert(_dialect(session)), list(rows))
    return dict(written.all())


def save_and_read_judgments(
    session: Session, rows: Sequence[dict[str, Any]]
) -> dict[str, StoredVerdict]:
    """``save_judgments``, then each row's key as stored: a written row as it was given, a
    kept one (another writer's ok verdict) read back."""
    written = save_judgments(session, rows)
    stored = {
        row["cache_key"]: StoredVerdict(
            written[row["cache_key"]],
            row["cache_key"],
            row["status"],
            row["value"],
            row["verdict"],
            row["detail"],
            row["failure"],
            row["error"],
        )
        for row in rows
        if row["cache_key"] in written
    }
    kept = [row["cache_key"] for row in rows if row["cache_key"] not in written]
    if kept:
        stored.update(stored_verdicts(session, kept))
    return stored


def save_scores(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Insert or replace scores on (completion, rubric version, judge config, aggregation)."""
    if rows:
        session.execute(score_upsert(_dialect(session)), list(rows))
        session.flush()


def _dialect(session: Session) -> str:
    return session.get_bind().dialect.name
