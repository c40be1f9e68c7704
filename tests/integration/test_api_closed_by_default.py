"""Closed by default: every route of the app, walked from ``app.routes``, declares the scope a
key needs or that it is open; one that declares neither, a plugin's added after
``create_app()`` included, stops the server at start-up naming it, and answers 401 without a
key (only an admin key gets through) until then."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.requirements import require_module

require_module("fastapi", "api")

from fastapi import Depends, FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from starlette.routing import BaseRoute  # noqa: E402

from rubricsvc.api.auth import (  # noqa: E402
    KeyRule,
    Open,
    UndeclaredRoutes,
    access_of,
    undeclared_routes,
)
from rubricsvc.api.deps import public  # noqa: E402
from tests.api_harness import api_client, bearer  # noqa: E402


@pytest.fixture
def served(sqlite_url: str) -> Iterator[tuple[TestClient, dict[str, str]]]:
    with api_client(sqlite_url) as served:
        yield served


def _app(client: TestClient) -> FastAPI:
    app = client.app
    assert isinstance(app, FastAPI)
    return app


def _requests(routes: list[BaseRoute]) -> Iterator[tuple[str, str, KeyRule]]:
    """(method, a concrete path, rule) for every route that asks for a key."""
    for route in routes:
        access = access_of(route)
        if not isinstance(access, KeyRule):
            continue
        path = re.sub(r"\{[^}]+\}", "1", getattr(route, "path", ""))
        for method in sorted(getattr(route, "methods", None) or []):
            yield method, path, access


def test_every_route_declares_a_scope_or_why_it_is_open(
    served: tuple[TestClient, dict[str, str]],
) -> None:
    app = _app(served[0])
    assert undeclared_routes(app.routes) == []
    for route in app.routes:
        access = access_of(route)
        path = getattr(route, "path", "")
        if isinstance(access, Open):
            assert access.reason.strip(), path
            # Only the docs, the health probe and the review pages (their own sessions).
            assert not path.startswith("/v1/") and path != "/metrics", (path, access)
    keyed = list(_requests(app.routes))
    assert len(keyed) >= 20, keyed  # the walk reached the API's routes


def test_every_route_that_asks_for_a_key_answers_401_without_one(
    served: tuple[TestClient, dict[str, str]],
) -> None:
    client, _ = served
    for method, path, _rule in _requests(_app(client).routes):
        for headers in ({}, bearer("rsk_not-a-key")):
            response = client.request(method, path, headers=headers, json={})
            assert response.status_code == 401, (method, path, response.text)
            assert response.json()["error"]["code"] == "unauthorized"


def _plugin_route(app: FastAPI, path: str, **route: Any) -> None:
    @app.get(path, **route)
    async def plugin_page() -> dict[str, str]:
        return {"plugin": "answered"}


def test_a_route_added_after_create_app_without_a_declaration_is_closed(sqlite_url: str) -> None:
    with api_client(sqlite_url) as (client, keys):
        app = _app(client)
        _plugin_route(app, "/v1/plugin/undeclared")
        assert undeclared_routes(app.routes) == ["GET /v1/plugin/undeclared"]
        # The running server (started before the route came) refuses it to all but admin.
        assert client.get("/v1/plugin/undeclared").status_code == 401
        refused = client.get("/v1/plugin/undeclared", headers=bearer(keys["read"]))
        assert refused.status_code == 403, refused.text
        admitted = client.get("/v1/plugin/undeclared", headers=bearer(keys["admin"]))
        assert admitted.json() == {"plugin": "answered"}
        # A server starting with it refuses to start, naming it.
        with pytest.raises(UndeclaredRoutes, match=r"GET /v1/plugin/undeclared"), TestClient(app):
            pass


def test_a_plugin_route_declared_public_is_open_and_the_server_starts(sqlite_url: str) -> None:
    with api_client(sqlite_url) as (client, _keys):
        app = _app(client)
        _plugin_route(
            app, "/v1/plugin/open", dependencies=[Depends(public("a plugin's status page"))]
        )
        with TestClient(app) as restarted:
            assert restarted.get("/v1/plugin/open").json() == {"plugin": "answered"}


def test_an_open_route_must_say_why() -> None:
    with pytest.raises(ValueError, match="say why"):
        public("  ")
