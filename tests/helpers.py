"""Small builders shared by tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from rubricsvc import db
from rubricsvc.rubrics.schemas import RubricSpec


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
