"""The connection limits of ``rubricsvc serve`` read from the settings and fitted under the
open-file limit, and the tally that keeps a client's doings from flooding the log."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.requirements import require_module

require_module("uvicorn", "api")

import resource  # noqa: E402

from rubricsvc.api import transport  # noqa: E402
from rubricsvc.api.logs import LogTally  # noqa: E402
from rubricsvc.api.transport import ConnectionLimits, connection_cap, default_limits  # noqa: E402
from rubricsvc.config import ApiSettings  # noqa: E402


def test_limits_come_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _: (100_000, 100_000))
    api = ApiSettings(
        header_timeout=3,
        body_timeout=4,
        body_min_rate=5,
        max_header_bytes=6000,
        max_connections=700,
    )
    assert ConnectionLimits.from_settings(api) == ConnectionLimits(3, 4, 5, 6000, 700)
    # Where no server applied any: the settings' defaults, the environment unread.
    monkeypatch.setenv("RUBRICSVC_API_HEADER_TIMEOUT", "99")
    default_limits.cache_clear()
    assert default_limits() == ConnectionLimits.from_settings(ApiSettings.model_construct())
    assert default_limits().header_timeout == ApiSettings.model_fields["header_timeout"].default


def test_the_cap_leaves_room_under_the_open_file_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 4096))
    assert connection_cap(5000) == (1024 - transport.FILES_KEPT, 1024)
    assert connection_cap(10) == (10, 1024)
    monkeypatch.setattr(resource, "getrlimit", lambda _: (resource.RLIM_INFINITY,) * 2)
    assert connection_cap(5000) == (5000, None)


def test_a_tally_writes_the_first_line_then_counts_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("tests.tally")
    tally = LogTally(logger, logging.INFO, "clients gone", every=0.2)

    async def many() -> None:
        for n in range(500):
            tally.note("client %d gone", n)
        await asyncio.sleep(0.3)  # the window ends: one line counts the others
        await asyncio.sleep(0.4)  # and the next passes quiet
        tally.note("client %d gone", 500)  # a new window: its own line

    with caplog.at_level(logging.INFO, logger="tests.tally"):
        asyncio.run(many())
    assert [r.getMessage() for r in caplog.records] == [
        "client 0 gone",
        "clients gone: 499 more in the last 0.2 s",
        "client 500 gone",
    ]
