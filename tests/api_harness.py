"""An API app on a real migrated database, with one key per scope and a little data."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient

from rubricsvc.api import create_app
from rubricsvc.apikeys import Scope, create_key
from rubricsvc.config import ApiSettings, BrokerSettings, DatabaseSettings, Settings
from rubricsvc.db import make_engine, session_scope
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.service import approve, save_rubric

# Check criteria only: scoring it needs no model, so routes that score answer at once.
WORD_RUBRIC: dict[str, Any] = {
    "name": "api/blue-sea",
    "prompt": {"external_id": "api-sea", "text": "Write one sentence about the sea."},
    "criteria": [
        {
            "text": "Uses the word blue",
            "weight": 3,
            "kind": "check",
            "check": {"type": "contains", "text": "blue"},
        },
        {
            "text": "Stays under 20 words",
            "weight": 1,
            "kind": "check",
            "check": {"type": "word_count", "max": 20},
        },
    ],
}


def settings_for(database_url: str, **api: Any) -> Settings:
    return Settings(
        db=DatabaseSettings(url=database_url),
        broker=BrokerSettings(url=None),
        api=ApiSettings(**api),
    )


@contextmanager
def api_client(
    database_url: str, rubrics: list[dict[str, Any]] | None = None, **api: Any
) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """A client of a new app, and a header set per scope (plus "none": a scope-less key)."""
    engine = make_engine(database_url)
    headers: dict[str, str] = {}
    with session_scope(engine) as session:
        for scope in Scope:
            secret = create_key(session, f"test-{scope.value}", [scope.value]).secret
            headers[scope.value] = secret
        for data in rubrics if rubrics is not None else [WORD_RUBRIC]:
            approve(session, save_rubric(session, RubricSpec.model_validate(data)).version)
    app = create_app(settings_for(database_url, **api), engine)
    with TestClient(app) as client:
        yield client, headers


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}
