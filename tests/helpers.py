"""Small builders shared by tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc import db
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import RubricVersion
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.versions import approve, save_rubric
from rubricsvc.scoring.judge_configs import ensure_judge_config
from tests.cli_runner import cli_ok


def rubric_dict(name: str = "t/sleep", **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": name,
        "prompt": {"text": f"Prompt of {name}", "external_id": f"{name}-prompt"},
        "criteria": [
            {"text": "Recommends a regular schedule", "weight": 5, "category": "essential"},
            {"text": "Mentions caffeine", "weight": 2},
            {"text": "Recommends pills without a doctor", "weight": -4},
        ],
    }
    data.update(overrides)
    return data


def check_criterion(text: str, check: dict[str, Any], weight: float = 1) -> dict[str, Any]:
    """A criterion the platform computes with ``check`` (no judge, no model), as rubric data."""
    return {"text": text, "weight": weight, "kind": "check", "check": check}


def blue_sea_rubric(name: str, external_id: str, max_words: int) -> dict[str, Any]:
    """Check criteria only, on a prompt about the sea: the word blue (weight 3) and fewer than
    ``max_words`` words (weight 1). Scoring it needs no model."""
    return {
        "name": name,
        "prompt": {"external_id": external_id, "text": "Write one sentence about the sea."},
        "criteria": [
            check_criterion("Uses the word blue", {"type": "contains", "text": "blue"}, weight=3),
            check_criterion(
                f"Stays under {max_words} words", {"type": "word_count", "max": max_words}
            ),
        ],
    }


def rubric_spec(name: str = "t/sleep", **overrides: Any) -> RubricSpec:
    return RubricSpec.model_validate(rubric_dict(name, **overrides))


def read_database(database_url: str, read: Callable[[Session], Any]) -> Any:
    """``read(session)`` on a short-lived connection of its own (the engine is disposed after)."""
    engine = db.make_engine(database_url)
    try:
        with Session(engine) as session:
            return read(session)
    finally:
        engine.dispose()


def table_counts(database_url: str, models: Iterable[Any]) -> dict[str, int]:
    """Rows in each model's table, by table name (to show what a command added, or left)."""

    def read(session: Session) -> dict[str, int]:
        return {
            model.__tablename__: session.scalar(select(func.count()).select_from(model)) or 0
            for model in models
        }

    counts: dict[str, int] = read_database(database_url, read)
    return counts


def detached_versions(session: Session, name: str) -> list[RubricVersion]:
    """Every version of rubric ``name``, oldest first, with their criteria and rubric loaded,
    detached from ``session`` (to read after it is closed)."""
    rows = list(
        session.scalars(
            select(RubricVersion)
            .where(RubricVersion.rubric.has(name=name))
            .order_by(RubricVersion.number)
        )
    )
    for row in rows:
        _ = [c.text for c in row.criteria], row.rubric.name
    session.expunge_all()
    return rows


def add_judge_file(database_url: str, folder: Path, entry: dict[str, Any]) -> str:
    """The judge ``entry`` describes, added as a user adds one: a judge file (in ``folder``)
    through ``judges add``; its name."""
    judges = folder / f"{entry['name']}-judge.yaml"
    judges.write_text(yaml.safe_dump({"judges": [entry]}), encoding="utf-8")
    cli_ok("judges", "add", str(judges), database_url=database_url)
    return str(entry["name"])


def add_scripted_judge(database_url: str, tmp_path: Path) -> None:
    """The judge ``scripted`` (the scripted backend, mode criterion-prob)."""
    entry = {"name": "scripted", "backend": "scripted", "mode": "criterion-prob"}
    add_judge_file(database_url, tmp_path, entry)


def approve_rubrics(
    database_url: str,
    *rubrics: dict[str, Any],
    judges: Iterable[JudgeSpec] = (),
    reviewer: str | None = None,
) -> None:
    """Save each rubric (as data) and approve it, and register each judge, in one transaction on
    an engine of its own (disposed after)."""
    engine = db.make_engine(database_url)
    try:
        with db.session_scope(engine) as session:
            for data in rubrics:
                version = save_rubric(session, RubricSpec.model_validate(data)).version
                approve(session, version, reviewer)
            for judge in judges:
                ensure_judge_config(session, judge)
    finally:
        engine.dispose()
