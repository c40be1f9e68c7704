"""Concurrent requests whose key is not in the cache read it from the database once, together:
a trainer's dozens of reward requests in flight when the key's cache entry expires used to
read it once each."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.requirements import require_module

require_module("fastapi", "api")

import httpx  # noqa: E402
from sqlalchemy import Engine, event  # noqa: E402

from rubricsvc.api import create_app  # noqa: E402
from rubricsvc.apikeys import create_key  # noqa: E402
from rubricsvc.db import make_engine, session_scope  # noqa: E402
from tests.api_harness import settings_for  # noqa: E402

CONCURRENT = 20
LOOKUP_SECONDS = 0.2  # every read of the api_keys table is made this slow


class KeyReads:
    """Counts the statements that read the api_keys table, each held ``LOOKUP_SECONDS``; with
    ``failing``, each fails instead (the database gone)."""

    def __init__(self, engine: Engine) -> None:
        self.count = 0
        self.failing = False
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "FROM api_keys" not in statement:
            return
        self.count += 1
        time.sleep(LOOKUP_SECONDS)
        if self.failing:
            raise RuntimeError("the database is gone")


@pytest.fixture
def served(sqlite_url: str) -> Iterator[tuple[httpx.AsyncClient, KeyReads, str]]:
    engine = make_engine(sqlite_url)
    with session_scope(engine) as session:
        secret = create_key(session, "trainer", ["read"]).secret
    reads = KeyReads(engine)
    app = create_app(settings_for(sqlite_url, key_cache_seconds=60), engine)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    yield httpx.AsyncClient(transport=transport, base_url="http://test"), reads, secret
    engine.dispose()


def statuses(client: httpx.AsyncClient, secret: str) -> list[int]:
    async def all_at_once() -> list[int]:
        async with client:
            headers = {"Authorization": f"Bearer {secret}"}
            answers = await asyncio.gather(
                *(client.get("/v1/prompts", headers=headers) for _ in range(CONCURRENT))
            )
        return [answer.status_code for answer in answers]

    return asyncio.run(all_at_once())


def test_concurrent_requests_share_one_read_of_their_key(
    served: tuple[httpx.AsyncClient, KeyReads, str],
) -> None:
    client, reads, secret = served
    assert statuses(client, secret) == [200] * CONCURRENT
    assert reads.count == 1


def test_a_refused_key_is_read_once_for_its_concurrent_requests(
    served: tuple[httpx.AsyncClient, KeyReads, str],
) -> None:
    client, reads, _ = served
    assert statuses(client, "rsk_not-a-key") == [401] * CONCURRENT
    assert reads.count == 1


def test_a_failed_read_fails_every_request_that_waited_on_it(
    served: tuple[httpx.AsyncClient, KeyReads, str],
) -> None:
    client, reads, secret = served
    reads.failing = True
    assert statuses(client, secret) == [500] * CONCURRENT
    assert reads.count == 1
