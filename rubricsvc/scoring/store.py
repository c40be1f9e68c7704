"""Idempotent writes of judgments and scores (insert-on-conflict), on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.batching import batches
from rubricsvc.db import insert_for
from rubricsvc.models import Judgment, JudgmentStatus, Score


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


def save_judgments(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Store judgments; a new ok verdict replaces a stored failure, nothing replaces an ok one."""
    if not rows:
        return
    for batch in batches(rows):
        statement = insert_for(session, Judgment).values(batch)
        excluded = statement.excluded
        # Retrying a failed judgment overwrites it; a concurrent writer's ok row is kept.
        statement = statement.on_conflict_do_update(
            index_elements=["cache_key"],
            set_={
                column: getattr(excluded, column)
                for column in (
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
            },
            where=Judgment.status == JudgmentStatus.FAILED,
        )
        session.execute(statement)
    session.flush()


def save_scores(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Insert or replace scores on (completion, rubric version, judge config, aggregation)."""
    for batch in batches(rows):
        statement = insert_for(session, Score).values(batch)
        excluded = statement.excluded
        statement = statement.on_conflict_do_update(
            index_elements=["completion_id", "rubric_version_id", "judge_config_id", "aggregation"],
            set_={c: getattr(excluded, c) for c in ("value", "coverage", "status", "details")},
        )
        session.execute(statement)
    session.flush()
