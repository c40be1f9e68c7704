"""`rubricsvc serve --workers N`, and the API-key cache's TTL across processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path

import pytest
from sqlalchemy import update

from tests.requirements import require_module

require_module("fastapi", "api")

import httpx  # noqa: E402

from rubricsvc.apikeys import create_key  # noqa: E402
from rubricsvc.db import make_engine, session_scope  # noqa: E402
from rubricsvc.models import ApiKey  # noqa: E402
from rubricsvc.models.base import utcnow  # noqa: E402
from tests.api_harness import api_client, bearer  # noqa: E402
from tests.servers import free_port  # noqa: E402

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
METRICS_COUNT = re.compile(
    r'rubricsvc_http_requests_total\{method="GET",route="/metrics",status="200"\} (\S+)'
)


def revoke_behind_the_server(database_url: str, name: str) -> None:
    """Revoke a key as another process would: in the database, unseen by this one's caches."""
    engine = make_engine(database_url)
    with session_scope(engine) as session:
        session.execute(update(ApiKey).where(ApiKey.name == name).values(revoked_at=utcnow()))
    engine.dispose()


def test_a_key_revoked_elsewhere_is_admitted_until_its_cache_entry_expires(
    sqlite_url: str,
) -> None:
    with api_client(sqlite_url, key_cache_seconds=1.0) as (client, keys):
        assert client.get("/v1/prompts", headers=bearer(keys["read"])).status_code == 200
        revoke_behind_the_server(sqlite_url, "test-read")
        assert client.get("/v1/prompts", headers=bearer(keys["read"])).status_code == 200
        time.sleep(1.1)
        assert client.get("/v1/prompts", headers=bearer(keys["read"])).status_code == 401


def test_without_the_cache_a_key_revoked_elsewhere_is_refused_at_once(sqlite_url: str) -> None:
    with api_client(sqlite_url, key_cache_seconds=0) as (client, keys):
        assert client.get("/v1/prompts", headers=bearer(keys["read"])).status_code == 200
        revoke_behind_the_server(sqlite_url, "test-read")
        assert client.get("/v1/prompts", headers=bearer(keys["read"])).status_code == 401


@pytest.fixture
def two_process_server(sqlite_url: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`rubricsvc serve --workers 2` with no session secret set, and an admin key's secret."""
    engine = make_engine(sqlite_url)
    with session_scope(engine) as session:
        secret = create_key(session, "ana", ["admin"]).secret
    engine.dispose()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUBRICSVC_API_")}
    env["RUBRICSVC_DATABASE_URL"] = sqlite_url
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "rubricsvc", "serve", "--port", str(port), "--workers", "2"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, log_path.read_text()
            try:
                if httpx.get(f"{base}/healthz", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.3)
        yield base, secret
    finally:
        server.terminate()
        server.wait(timeout=30)


def fresh(base: str) -> httpx.Client:
    """A client on a new connection: the kernel may hand it to either process."""
    return httpx.Client(base_url=base, trust_env=False, timeout=30, follow_redirects=False)


def metrics_count(base: str, secret: str) -> float:
    """How many GET /metrics the answering process had counted: each process counts its own."""
    with fresh(base) as client:
        found = METRICS_COUNT.search(client.get("/metrics", headers=bearer(secret)).text)
    return float(found.group(1)) if found else 0.0


@pytest.mark.slow
def test_serve_workers_answers_from_several_processes_with_one_session(
    two_process_server: tuple[str, str],
) -> None:
    base, secret = two_process_server
    # One after another, one process's count grows with every answer (each answer counts the
    # requests before it); a count that does not grow came from another process (two
    # processes taking turns report 0, 0, 1, 1, ...: never one that goes back). Concurrent
    # requests would not show it: one process answering two at once can report the same count.
    counts = [metrics_count(base, secret) for _ in range(120)]
    assert any(later <= earlier for earlier, later in pairwise(counts)), (
        "every answer came from one process"
    )

    with fresh(base) as client:
        form = client.get("/ui/login")
        token = CSRF.search(form.text)
        assert token is not None
        signed_in = client.post(
            "/ui/login", data={"api_key": secret, "csrf_token": token.group(1), "next": "/ui/queue"}
        )
        assert signed_in.status_code == 303, signed_in.text
        cookies = dict(client.cookies)

    def page_and_form(_: int) -> tuple[int, int]:
        """A page, and a CSRF-checked form post, each on a new connection with the session
        (a retirement of a version that does not exist: the token passes, then 404; signing
        out would end the session)."""
        with fresh(base) as client:
            client.cookies.update(cookies)
            page = client.get("/ui/queue")
            found = CSRF.search(page.text)
        with fresh(base) as client:
            client.cookies.update(cookies)
            posted = client.post(
                "/ui/versions/999999/retire",
                data={"csrf_token": found.group(1) if found else "", "note": "x"},
            )
        return page.status_code, posted.status_code

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(page_and_form, range(24)))
    assert set(answers) == {(200, 404)}, answers
