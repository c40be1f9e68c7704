"""The review pages' security: a signed-out session is refused everywhere (in every process of
``serve --workers 2``), failed sign-ins and unknown API keys are throttled per client address
(and logged without flooding the log), invisible characters are shown as markers, and the
pages' own errors are error pages with the pages' headers, after the session check.

The live-server tests run one `rubricsvc serve --workers 2` for the module, on a PostgreSQL
database of its own; the rest use the app in this process."""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from rubricsvc import db
from rubricsvc.api import create_app
from rubricsvc.apikeys import create_key
from rubricsvc.db import make_engine, session_scope
from rubricsvc.models import VersionStatus
from rubricsvc.models.base import utcnow
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.versions import save_rubric
from tests.api_harness import settings_for
from tests.helpers import read_database
from tests.integration.test_ui import csrf_of, draft, sign_in, versions_of
from tests.servers import RubricsvcServer

# Every bidirectional control and zero-width (or otherwise invisible) character the issue
# named, and the bidirectional controls that were already marked.
INVISIBLE = ["\u200f", "\u061c", "\u200b", "\u2060", "\ufeff", "\u00ad", "\u200e", "\u200d"]
ALREADY_MARKED = ["\u202e", "\u2067"]
THROTTLE = 5  # failed authentications per minute per address, in the in-process apps
THROTTLE_LOGGER = "rubricsvc.api.authfailures"
UI_HEADERS = ("content-security-policy", "x-frame-options", "cache-control")


def marker(char: str) -> str:
    return f"\u27e8U+{ord(char):04X}\u27e9"


@dataclass
class Pages:
    """An app with a draft rubric and a reviewer's key, on one database."""

    app: FastAPI
    client: TestClient
    secret: str
    version_id: int
    database_url: str

    def client_at(self, address: str) -> TestClient:
        """Another client of the same app, from another address."""
        return TestClient(self.app, follow_redirects=False, client=(address, 50000))


def _pages(database_url: str, **api: Any) -> Iterator[Pages]:
    engine = make_engine(database_url)
    hidden = "".join(INVISIBLE + ALREADY_MARKED)
    with session_scope(engine) as session:
        secret = create_key(session, f"ana{INVISIBLE[2]}", ["read", "author", "review"]).secret
        spec = draft(
            "sec/sleep", f"How can I{hidden} sleep better?", [], title=f"Sleep{hidden} advice"
        )
        spec["criteria"] = [
            {"text": f"Recommends a regular{c} schedule", "weight": 1}
            for c in INVISIBLE + ALREADY_MARKED
        ]
        version_id = save_rubric(session, RubricSpec.model_validate(spec)).version.id
    app = create_app(settings_for(database_url, **api), engine)
    with TestClient(app, base_url="http://testserver", follow_redirects=False) as client:
        yield Pages(app, client, secret, version_id, database_url)
    engine.dispose()


@pytest.fixture
def pages(database_url: str) -> Iterator[Pages]:
    yield from _pages(database_url, failed_auth_per_minute=THROTTLE)


@pytest.fixture
def sqlite_pages(sqlite_url: str) -> Iterator[Pages]:
    yield from _pages(sqlite_url, failed_auth_per_minute=THROTTLE)


def status_of(database_url: str, version_id: int) -> VersionStatus:
    (version,) = versions_of(database_url, "sec/sleep")
    assert version.id == version_id
    return version.status


def throttle_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == THROTTLE_LOGGER]


# -- Row 3: signing out ends the session, on the server -------------------------------------------


def test_a_signed_out_session_is_refused(pages: Pages) -> None:
    client = pages.client
    version = f"/ui/versions/{pages.version_id}"
    sign_in(client, pages.secret)
    cookie = client.cookies["rubricsvc_session"]
    token = csrf_of(client.get("/ui/queue").text)
    # A second session of the same key, in another browser.
    other = pages.client_at("testclient")
    sign_in(other, pages.secret)

    signed_out = client.post("/ui/logout", data={"csrf_token": token})
    assert signed_out.status_code == 303 and signed_out.headers["location"] == "/ui/login"

    # The old cookie and token, replayed: nothing is shown, nothing is done.
    client.cookies.clear()
    client.cookies.set("rubricsvc_session", cookie)
    replayed = client.get("/ui/queue")
    assert replayed.status_code == 303, replayed.text
    assert replayed.headers["location"].startswith("/ui/login")
    assert client.get(version).status_code == 303
    for action in ("retire", "approve"):
        refused = client.post(f"{version}/{action}", data={"csrf_token": token, "note": "x"})
        assert refused.status_code == 403 and "sign in again" in refused.text, refused.text
    assert client.post("/ui/logout", data={"csrf_token": token}).status_code == 403
    assert status_of(pages.database_url, pages.version_id) == VersionStatus.DRAFT

    # Only that session ended: the other one goes on.
    assert other.get("/ui/queue").status_code == 200


def test_a_session_past_its_end_is_refused_and_its_row_deleted(pages: Pages) -> None:
    from rubricsvc.models import ReviewSession  # here: the module runs on code without it

    client = pages.client
    sign_in(client, pages.secret)
    engine = make_engine(pages.database_url)
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(ReviewSession)) == 1
        session.execute(update(ReviewSession).values(expires_at=utcnow() - timedelta(seconds=1)))
    assert client.get("/ui/queue").status_code == 303
    sign_in(client, pages.secret)  # a new session; the one past its end is gone
    assert client.get("/ui/queue").status_code == 200
    with session_scope(engine) as session:
        (row,) = session.scalars(select(ReviewSession))
        ends = row.expires_at if row.expires_at.tzinfo else row.expires_at.replace(tzinfo=UTC)
        assert ends > utcnow() + timedelta(hours=11)  # session_hours: 12
    engine.dispose()


# -- Row 6: failed sign-ins and unknown keys throttled per client address -------------------------


def sign_in_attempt(client: TestClient | httpx.Client, secret: str, token: str) -> Any:
    return client.post("/ui/login", data={"api_key": secret, "csrf_token": token})


def wrong_sign_ins(client: TestClient | httpx.Client, attempts: int) -> tuple[list[int], Any, str]:
    """``attempts`` sign-ins with unknown keys: their statuses, the last answer, and the sign-in
    token to try next (each sign-in page has a token of its own)."""
    token = csrf_of(client.get("/ui/login").text)
    statuses = []
    for _ in range(attempts):
        answer = sign_in_attempt(client, "rsk_" + secrets.token_urlsafe(32), token)
        statuses.append(answer.status_code)
        if answer.status_code == 401:
            token = csrf_of(answer.text)
    return statuses, answer, token


def test_failed_sign_ins_are_throttled_per_address(
    sqlite_pages: Pages, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    client = sqlite_pages.client
    statuses, answer, token = wrong_sign_ins(client, 40)
    assert statuses == [401] * THROTTLE + [429] * (40 - THROTTLE)
    assert "Retry-After" in answer.headers and int(answer.headers["retry-after"]) >= 1
    assert answer.headers["content-type"].startswith("text/html")
    assert all(name in answer.headers for name in UI_HEADERS)
    assert "Too many failed sign-ins" in answer.text
    # The right key from that address is refused too while it waits ...
    assert sign_in_attempt(client, sqlite_pages.secret, token).status_code == 429
    # ... and from another address it works.
    elsewhere = sqlite_pages.client_at("198.51.100.7")
    sign_in(elsewhere, sqlite_pages.secret)
    # Logged, but not once per refusal: the first failure and the first refusal.
    lines = throttle_lines(caplog)
    assert 1 <= len(lines) <= 3, lines
    assert any("testclient" in line and "429" in line for line in lines), lines


def test_unknown_api_keys_are_throttled_per_address(
    sqlite_pages: Pages, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    client = sqlite_pages.client
    same = sqlite_pages.client_at("testclient")  # the same address
    with session_scope(make_engine(sqlite_pages.database_url)) as session:
        reader = create_key(session, "reader", ["read"]).secret

    def prompts(client: TestClient, secret: str) -> Any:
        return client.get("/v1/prompts", headers={"Authorization": f"Bearer {secret}"})

    # Successful requests count for nothing.
    for _ in range(3 * THROTTLE):
        assert prompts(same, reader).status_code == 200
    answers = [prompts(client, "rsk_" + secrets.token_urlsafe(32)) for _ in range(50)]
    assert [a.status_code for a in answers] == [401] * THROTTLE + [429] * (50 - THROTTLE)
    refused = answers[-1]
    assert int(refused.headers["retry-after"]) >= 1
    body = refused.json()["error"]
    assert (body["status"], body["code"]) == (429, "too_many_requests")
    assert "failed" in body["message"]
    # While it waits, that address is refused whatever it sends; another is not.
    assert prompts(client, reader).status_code == 429
    assert client.get("/v1/prompts").status_code == 429
    assert prompts(sqlite_pages.client_at("203.0.113.9"), reader).status_code == 200
    assert client.get("/healthz").status_code == 200  # open routes stay open
    lines = throttle_lines(caplog)
    assert 1 <= len(lines) <= 3, lines


# -- Row 8: invisible characters shown as markers --------------------------------------------------


def test_invisible_characters_are_marked_on_the_version_page(pages: Pages) -> None:
    client = pages.client
    sign_in(client, pages.secret)
    page = client.get(f"/ui/versions/{pages.version_id}")
    assert page.status_code == 200
    for char in INVISIBLE + ALREADY_MARKED:
        assert char not in page.text, f"U+{ord(char):04X} is on the page as itself"
        assert f"Recommends a regular{marker(char)} schedule" in page.text, f"U+{ord(char):04X}"
    # In the title, the prompt and the reviewer's (key's) name too.
    shown = "".join(marker(c) for c in INVISIBLE + ALREADY_MARKED)
    assert f"Sleep{shown} advice" in page.text
    assert f"How can I{shown} sleep better?" in page.text
    assert re.search(r'id="who"[^>]*>ana' + re.escape(marker(INVISIBLE[2])) + "<", page.text)
    # A filter's value in a form is sent back as it came, not as markers.
    queue = client.get("/ui/queue", params={"tag": f"topic=hea{INVISIBLE[2]}lth"})
    assert f'name="tag" value="topic=hea{INVISIBLE[2]}lth"' in queue.text


# -- Row 9: the pages' errors are error pages, after the session check ----------------------------


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/ui/versions/abc", 422, "version_id"),
        ("/ui/queue?page=abc", 422, "page"),
        ("/ui/nope", 404, "No page"),
    ],
)
def test_page_errors_are_error_pages_after_the_session_check(
    sqlite_pages: Pages, path: str, status: int, says: str
) -> None:
    client = sqlite_pages.client
    # Not signed in: sent to sign in, told nothing about the address.
    answer = client.get(path)
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"].startswith("/ui/login?next=")
    posted = client.post(path, data={"csrf_token": "x"})
    assert posted.status_code == 403 and "sign in again" in posted.text, posted.text
    assert posted.headers["content-type"].startswith("text/html")

    sign_in(client, sqlite_pages.secret)
    answer = client.get(path)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("text/html")
    assert answer.headers["cache-control"] == "no-store"
    assert answer.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    assert says in answer.text and 'id="who"' in answer.text  # the page, signed in
    # The API's own errors stay JSON.
    api = client.get("/v1/nope", headers={"Authorization": f"Bearer {sqlite_pages.secret}"})
    assert api.status_code == 404 and api.json()["error"]["code"] == "not_found"


# -- On a live `rubricsvc serve --workers 2` -----------------------------------------------------

SERVED_THROTTLE = 10
METRICS_COUNT = re.compile(
    r'rubricsvc_http_requests_total\{method="GET",route="/metrics",status="200"\} (\S+)'
)


@dataclass(frozen=True)
class Served:
    base_url: str
    database_url: str
    server: RubricsvcServer
    reviewer: str  # secret of a key with read, author, review
    admin: str
    version_id: int

    def client(self, **headers: str) -> httpx.Client:
        """A client on a new connection (the kernel hands it to either process)."""
        return httpx.Client(
            base_url=self.base_url,
            follow_redirects=False,
            trust_env=False,
            timeout=30,
            headers=headers,
        )


@pytest.fixture(scope="module")
def served(
    make_postgres_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    database_url = make_postgres_database()
    db.upgrade(database_url)
    engine = make_engine(database_url)
    with session_scope(engine) as session:
        reviewer = create_key(session, "rev", ["read", "author", "review"]).secret
        admin = create_key(session, "adm", ["admin"]).secret
        spec = draft("sec/served", "How can I sleep better?", ["Recommends a schedule"])
        version_id = save_rubric(session, RubricSpec.model_validate(spec)).version.id
    engine.dispose()
    folder = tmp_path_factory.mktemp("serve-security")
    server = RubricsvcServer(
        database_url,
        log_path=folder / "server.log",
        env={
            "RUBRICSVC_API_SESSION_SECRET": secrets.token_urlsafe(32),
            "RUBRICSVC_API_FAILED_AUTH_PER_MINUTE": str(SERVED_THROTTLE),
        },
        args=("--workers", "2"),
    )
    server.start(timeout=60)
    try:
        yield Served(server.base_url, database_url, server, reviewer, admin, version_id)
    finally:
        server.stop()


def served_status(served: Served) -> VersionStatus:
    def read(session: Any) -> VersionStatus:
        from rubricsvc.models import RubricVersion

        version = session.get(RubricVersion, served.version_id)
        return VersionStatus(version.status)

    status: VersionStatus = read_database(served.database_url, read)
    return status


def test_sign_out_ends_the_session_in_every_server_process(served: Served) -> None:
    with served.client() as client:
        form = client.get("/ui/login")
        signed_in = sign_in_attempt(client, served.reviewer, csrf_of(form.text))
        assert signed_in.status_code == 303, signed_in.text
        cookie = client.cookies["rubricsvc_session"]
        token = csrf_of(client.get("/ui/queue").text)
        assert client.post("/ui/logout", data={"csrf_token": token}).status_code == 303

    # Each replay on a new connection, after a GET /metrics on that connection: the count of
    # those that the answering process reports grows by at least one from one to the next
    # within one process, so a count that does not grow shows the replays reached (at least)
    # two processes. (Not only one that goes back: two processes taking turns report 0, 0,
    # 1, 1, 2, 2, ...)
    counts: list[float] = []
    version = f"/ui/versions/{served.version_id}"
    for _ in range(40):
        with served.client() as client:
            metrics = client.get("/metrics", headers={"Authorization": f"Bearer {served.admin}"})
            assert metrics.status_code == 200, metrics.text
            found = METRICS_COUNT.search(metrics.text)
            counts.append(float(found.group(1)) if found else 0.0)
            client.cookies.set("rubricsvc_session", cookie, domain="127.0.0.1", path="/ui")
            page = client.get("/ui/queue")
            assert page.status_code == 303 and page.headers["location"].startswith("/ui/login")
            retired = client.post(f"{version}/retire", data={"csrf_token": token, "note": "x"})
            assert retired.status_code == 403, retired.text
        if any(later <= earlier for earlier, later in pairwise(counts)):
            break
    else:
        pytest.fail(f"every replay reached one process: {counts}")
    assert served_status(served) == VersionStatus.DRAFT


def test_failed_authentications_are_throttled_by_the_server(served: Served) -> None:
    flood = {"X-Forwarded-For": "203.0.113.6"}  # uvicorn takes it from 127.0.0.1, a proxy
    unknown = {"Authorization": "Bearer rsk_" + secrets.token_urlsafe(32)}
    # One connection: one process, which counts the failures it sees.
    with served.client(**flood) as client:
        answers = [client.get("/v1/prompts", headers=unknown) for _ in range(300)]
        statuses = [a.status_code for a in answers]
        assert statuses == [401] * SERVED_THROTTLE + [429] * (300 - SERVED_THROTTLE)
        assert answers[-1].json()["error"]["code"] == "too_many_requests"
        assert int(answers[-1].headers["retry-after"]) >= 1
        right = {"Authorization": f"Bearer {served.reviewer}"}
        assert client.get("/v1/prompts", headers=right).status_code == 429

        # The sign-in form from that address: refused before the key is even looked up.
        token = csrf_of(client.get("/ui/login").text)
        page = sign_in_attempt(client, served.reviewer, token)
        assert page.status_code == 429 and "Retry-After" in page.headers
        assert page.headers["x-frame-options"] == "DENY"

    # Another address (this one, 127.0.0.1) is not held back.
    with served.client() as client:
        right = {"Authorization": f"Bearer {served.reviewer}"}
        assert client.get("/v1/prompts", headers=right).status_code == 200

    # Failed sign-ins from a third address.
    with served.client(**{"X-Forwarded-For": "203.0.113.66"}) as client:
        statuses, _, token = wrong_sign_ins(client, 60)
        assert statuses == [401] * SERVED_THROTTLE + [429] * (60 - SERVED_THROTTLE)
        assert sign_in_attempt(client, served.reviewer, token).status_code == 429

    # 360 refusals, a handful of lines.
    log = Path(served.server.log_path).read_text()
    lines = [line for line in log.splitlines() if "failed authentication" in line]
    assert 2 <= len(lines) <= 8, lines
