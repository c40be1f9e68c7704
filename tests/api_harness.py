"""An API app on a real migrated database, with one key per scope and a little data."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from rubricsvc.api import create_app
from rubricsvc.apikeys import Scope, create_key
from rubricsvc.config import ApiSettings, BrokerSettings, DatabaseSettings, Settings
from rubricsvc.db import make_engine, session_scope
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.versions import approve, save_rubric
from tests.helpers import blue_sea_rubric

# Check criteria only: scoring it needs no model, so routes that score answer at once.
WORD_RUBRIC: dict[str, Any] = blue_sea_rubric("api/blue-sea", "api-sea", max_words=20)


def settings_for(database_url: str, **api: Any) -> Settings:
    return Settings(
        db=DatabaseSettings(url=database_url),
        broker=BrokerSettings(url=None),
        api=ApiSettings(**api),
    )


class BodyCounter:
    """An ASGI app in front of another: counts the request body bytes the app pulls in."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.received = 0

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        async def counted() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                self.received += len(message.get("body", b""))
            return message

        await self.app(scope, counted, send)


@contextmanager
def api_client(
    database_url: str,
    rubrics: list[dict[str, Any]] | None = None,
    *,
    build_backend: Callable[[Any], Any] | None = None,
    wrap: Callable[[ASGIApp], ASGIApp] | None = None,
    **api: Any,
) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """A client of a new app, and a key per scope. ``build_backend`` loads its judges (default:
    the real backends), ``wrap`` puts an ASGI app in front of it, ``api`` are ApiSettings."""
    engine = make_engine(database_url)
    headers: dict[str, str] = {}
    with session_scope(engine) as session:
        for scope in Scope:
            secret = create_key(session, f"test-{scope.value}", [scope.value]).secret
            headers[scope.value] = secret
        for data in rubrics if rubrics is not None else [WORD_RUBRIC]:
            approve(session, save_rubric(session, RubricSpec.model_validate(data)).version)
    app = create_app(settings_for(database_url, **api), engine, build_backend=build_backend)
    with TestClient(wrap(app) if wrap else app) as client:
        yield client, headers


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def wait_for_job(
    client: TestClient, job_id: int, headers: dict[str, str], timeout: float = 120
) -> dict[str, Any]:
    """The state of score job ``job_id`` once it is neither pending nor running (a job the
    server runs itself goes on after its 202); fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        state: dict[str, Any] = client.get(f"/v1/score-jobs/{job_id}", headers=headers).json()
        if state["status"] not in {"pending", "running"}:
            return state
        assert time.monotonic() < deadline, f"score job {job_id} still running: {state}"
        time.sleep(0.05)
