"""What ``rubricsvc serve`` hands uvicorn: one write per response in every process, and no
access-log line made where the log level would drop it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.requirements import require_module

require_module("uvicorn", "api")

import uvicorn  # noqa: E402

import rubricsvc.api  # noqa: E402
from rubricsvc.api.transport import JoinedWritesProtocol  # noqa: E402
from rubricsvc.cli import serve  # noqa: E402


def served_with(monkeypatch: pytest.MonkeyPatch, workers: int, log_level: str) -> dict[str, Any]:
    """The keywords ``serve`` runs uvicorn with (uvicorn, the app and the database stubbed:
    this is about the arguments only)."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: calls.append(kwargs))
    monkeypatch.setattr(rubricsvc.api, "create_app", lambda *args, **kwargs: object())
    monkeypatch.setattr(serve, "engine", lambda: None)
    monkeypatch.setattr(serve, "require_migrated", lambda engine: None)
    monkeypatch.delenv(serve.SESSION_SECRET_VARIABLE, raising=False)  # restored after
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
