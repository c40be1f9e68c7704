"""What ``rubricsvc serve`` hands uvicorn: one write per response in every process, no
access-log line made where the log level would drop it, and the same connection settings and
response headers with one process or several."""

from __future__ import annotations

from typing import Any

import pytest

from tests.requirements import require_module

require_module("uvicorn", "api")

import uvicorn  # noqa: E402

import rubricsvc.api  # noqa: E402
from rubricsvc.api import app as app_module  # noqa: E402
from rubricsvc.api.transport import JoinedWritesProtocol  # noqa: E402
from rubricsvc.cli import serve  # noqa: E402
from rubricsvc.config import get_settings  # noqa: E402


def served_with(monkeypatch: pytest.MonkeyPatch, workers: int, log_level: str) -> dict[str, Any]:
    """The keywords ``serve`` runs uvicorn with (uvicorn, the app and the database stubbed:
    this is about the arguments only)."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: calls.append(kwargs))
    monkeypatch.setattr(rubricsvc.api, "create_app", lambda *args, **kwargs: object())
    monkeypatch.setattr(serve, "engine", lambda: None)
    monkeypatch.setattr(serve, "require_migrated", lambda engine: None)
    monkeypatch.delenv(serve.SESSION_SECRET_VARIABLE, raising=False)  # restored after
    monkeypatch.setattr(JoinedWritesProtocol, "limits", None)  # restored after
    serve.serve_command(host="127.0.0.1", port=8999, workers=workers, log_level=log_level)
    (kwargs,) = calls
    return kwargs


@pytest.mark.parametrize("workers", [1, 3])
def test_every_process_writes_each_response_once(
    monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    assert served_with(monkeypatch, workers, "info")["http"] is JoinedWritesProtocol


@pytest.mark.parametrize(
    ("log_level", "access_log"),
    [("trace", True), ("debug", True), ("info", True), ("warning", False),
     ("error", False), ("critical", False)],
)  # fmt: skip
@pytest.mark.parametrize("workers", [1, 2])
def test_access_log_lines_are_made_only_where_they_are_written(
    monkeypatch: pytest.MonkeyPatch, workers: int, log_level: str, access_log: bool
) -> None:
    kwargs = served_with(monkeypatch, workers, log_level)
    assert kwargs["access_log"] is access_log and kwargs["log_level"] == log_level


@pytest.mark.parametrize("workers", [1, 3])
def test_every_process_gets_the_connection_settings_and_the_response_headers(
    monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    monkeypatch.setenv("RUBRICSVC_API_KEEP_ALIVE_TIMEOUT", "7")
    monkeypatch.setenv("RUBRICSVC_API_BACKLOG", "99")
    get_settings.cache_clear()
    try:
        kwargs = served_with(monkeypatch, workers, "info")
    finally:
        get_settings.cache_clear()
    assert kwargs["timeout_keep_alive"] == 7 and kwargs["backlog"] == 99
    assert ("X-Content-Type-Options", "nosniff") in kwargs["headers"]
    # The protocol's own cap replaces uvicorn's, which refuses every request once it is hit.
    assert kwargs.get("limit_concurrency") is None
    # One process applies its connection limits here; several, each in its app's factory.
    assert (JoinedWritesProtocol.limits is not None) is (workers == 1)


def test_each_of_several_processes_applies_the_connection_limits_of_its_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RUBRICSVC_API_HEADER_TIMEOUT", "3")
    monkeypatch.setenv("RUBRICSVC_API_MAX_CONNECTIONS", "40")
    monkeypatch.setattr(JoinedWritesProtocol, "limits", None)  # restored after
    monkeypatch.setattr(app_module, "create_app", lambda *args, **kwargs: object())
    get_settings.cache_clear()
    try:
        app_module.create_served_app()  # what uvicorn calls in each process
    finally:
        get_settings.cache_clear()
    limits = JoinedWritesProtocol.limits
    assert limits is not None and limits.header_timeout == 3 and limits.max_connections == 40
