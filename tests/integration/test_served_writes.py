"""A write is answered only once it is committed, against a real `rubricsvc serve` (uvicorn,
keep-alive connections): a client told 201 reads the row at once; the same POST twice on one
connection gets the documented answers (201, then 200 with the stored row), never a plain-text
500 that closes the connection; a commit that fails is answered with the error shape, never as
a success.

A route's transaction (``api.deps.DB_SESSION``) and a review page's (``ui.deps.PAGE_SESSION``)
are committed before a byte of the answer is sent; with a yield dependency's default scope
("request") FastAPI committed them after the answer had been sent.
"""

from __future__ import annotations

import secrets
import shutil
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import make_url

from tests.requirements import require_module

require_module("uvicorn", "api")

import httpx  # noqa: E402

from rubricsvc import db  # noqa: E402
from rubricsvc.api import create_app  # noqa: E402
from rubricsvc.api import deps as api_deps  # noqa: E402
from rubricsvc.apikeys import create_key  # noqa: E402
from rubricsvc.db import make_engine, session_scope  # noqa: E402
from rubricsvc.models import Prompt, RubricVersion, VersionStatus  # noqa: E402
from rubricsvc.rubrics.schemas import RubricSpec  # noqa: E402
from rubricsvc.rubrics.versions import approve, save_rubric  # noqa: E402
from rubricsvc.ui import deps as ui_deps  # noqa: E402
from tests.api_harness import bearer, settings_for  # noqa: E402
from tests.helpers import blue_sea_rubric  # noqa: E402
from tests.servers import RubricsvcServer  # noqa: E402

ROUNDS = 50  # of each kind of write to /v1/prompts, each followed at once by a read
REWARDS = 20  # rewards, each completion read at once
DRAFTS = 10  # drafts retired through the review pages' form (one more is kept locked)
SEA = "served-sea"
SEA_RUBRIC = blue_sea_rubric("served/blue-sea", SEA, max_words=20)  # check criteria: no model
# How long the server waits for a lock (the drivers' defaults: SQLite 5 s, PostgreSQL forever).
LOCK_WAIT_S = 0.3


@dataclass(frozen=True)
class Served:
    """The server, the database it serves (the tests' own URL of it) and the seeded data."""

    server: RubricsvcServer
    database_url: str
    secret: str  # a key with the read, author, score and review scopes
    drafts: list[int] = field(default_factory=list)  # draft versions' ids


def _short_lock_wait(database_url: str) -> str:
    """``database_url`` with the server's wait for a lock cut to ``LOCK_WAIT_S``."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        url = url.update_query_dict({"timeout": str(LOCK_WAIT_S)})
    else:
        url = url.update_query_dict({"options": f"-c lock_timeout={int(LOCK_WAIT_S * 1000)}"})
    return url.render_as_string(hide_password=False)


def _draft(number: int) -> RubricSpec:
    rubric = blue_sea_rubric(f"served/draft-{number}", f"served-draft-{number}", max_words=20)
    prompt = {"external_id": f"served-draft-{number}", "text": f"One sentence, sea {number}."}
    return RubricSpec.model_validate({**rubric, "prompt": prompt})


def _seed(database_url: str) -> tuple[str, list[int]]:
    """The key, an approved rubric to reward against and draft versions to retire."""
    engine = make_engine(database_url)
    try:
        with session_scope(engine) as session:
            key = create_key(session, "served-writer", ["read", "author", "score", "review"])
            approve(session, save_rubric(session, RubricSpec.model_validate(SEA_RUBRIC)).version)
            drafts = [save_rubric(session, _draft(i)).version.id for i in range(DRAFTS + 1)]
            return key.secret, drafts
    finally:
        engine.dispose()


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """`rubricsvc serve` on a migrated database of its own, SQLite or PostgreSQL, one for the
    module's tests (starting it is most of their time)."""
    folder = tmp_path_factory.mktemp(f"served-writes-{request.param}")
    if request.param == "sqlite":
        path = folder / "rubricsvc.sqlite"
        shutil.copy(request.getfixturevalue("migrated_sqlite_template"), path)
        database_url = f"sqlite:///{path}"
    else:
        make_database: Callable[[], str] = request.getfixturevalue("make_postgres_database")
        database_url = make_database()
        db.upgrade(database_url)
    secret, drafts = _seed(database_url)
    server = RubricsvcServer(
        _short_lock_wait(database_url),
        log_path=folder / "serve.log",
        env={"RUBRICSVC_API_SESSION_SECRET": secrets.token_urlsafe(32)},
    )
    server.start()
    try:
        yield Served(server, database_url, secret, drafts)
    finally:
        server.stop()


class Connection:
    """One keep-alive connection's client (httpx keeps it open between requests), noting
    every connection it used and every answer that is a 5xx or an error out of shape."""

    def __init__(self, served: Served, secret: str | None = None) -> None:
        headers = bearer(secret) if secret else {}
        self.client = httpx.Client(
            base_url=served.server.base_url, headers=headers, timeout=30, trust_env=False
        )
        self.ports: set[int] = set()
        self.problems: list[str] = []
        self.log_path = served.server.log_path
        self.log_from = self.log_path.stat().st_size

    def logged(self) -> str:
        """What the server logged since this connection was opened."""
        with self.log_path.open("rb") as log:
            log.seek(self.log_from)
            return log.read().decode(errors="replace")

    def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = self.client.request(method, path, **kwargs)
        self.ports.add(local_port(response))
        if response.status_code >= 500 or (
            response.status_code >= 400 and not is_error_shape(response)
        ):
            self.problems.append(f"{method} {path}: {response.status_code} {response.text[:80]!r}")
        return response

    def close(self) -> None:
        self.client.close()


def assert_no_statements_logged(conn: Connection) -> None:
    """SQLAlchemy's message of a database error holds the statement and its parameters: the
    server logs the database's own first line instead."""
    log = conn.logged()
    assert "[parameters:" not in log and "[SQL:" not in log, "statements in the server's log"


@contextmanager
def connection(served: Served, secret: str | None = None) -> Iterator[Connection]:
    opened = Connection(served, secret)
    try:
        yield opened
    finally:
        opened.close()


def local_port(response: httpx.Response) -> int:
    """The client's port of the connection that carried ``response``."""
    return int(response.extensions["network_stream"].get_extra_info("client_addr")[1])


def is_error_shape(response: httpx.Response) -> bool:
    if not response.headers.get("content-type", "").startswith("application/json"):
        return False
    error = response.json().get("error")
    return isinstance(error, dict) and {"status", "code", "message"} <= error.keys()


def test_a_prompt_answered_201_is_read_at_once(served: Served) -> None:
    missing = []
    with connection(served, served.secret) as conn:
        for i in range(ROUNDS):
            created = conn.send("POST", "/v1/prompts", json={"text": f"read back {i}"})
            assert created.status_code == 201, created.text
            prompt_id = created.json()["prompt"]["id"]
            read = conn.send("GET", f"/v1/prompts/{prompt_id}")
            if read.status_code != 200:
                missing.append((prompt_id, read.status_code))
    assert missing == [], f"{len(missing)} of {ROUNDS} prompts answered 201 read as {missing[:5]}"
    assert conn.problems == []
    assert len(conn.ports) == 1, f"{len(conn.ports)} connections: the server closed some"
    assert_no_statements_logged(conn)


def test_the_same_post_twice_on_one_connection_is_stored_once(served: Served) -> None:
    answers = []
    with connection(served, served.secret) as conn:
        for i in range(ROUNDS):
            body = {"text": f"sent twice {i}"}
            first = conn.send("POST", "/v1/prompts", json=body)
            again = conn.send("POST", "/v1/prompts", json=body)
            same = (
                again.is_success
                and first.is_success
                and (again.json()["prompt"]["id"] == first.json()["prompt"]["id"])
            )
            answers.append((first.status_code, again.status_code, same))
        # The same messages under another prompt's external id: 409, in the error shape.
        taken = conn.send("POST", "/v1/prompts", json={"text": "named", "external_id": "taken"})
        assert taken.status_code == 201, taken.text
        conflict = conn.send(
            "POST", "/v1/prompts", json={"text": "sent twice 0", "external_id": "taken"}
        )
    wrong = [answer for answer in answers if answer != (201, 200, True)]
    assert wrong == [], f"{len(wrong)} of {ROUNDS} pairs answered {wrong[:5]}"
    assert conflict.status_code == 409 and is_error_shape(conflict), conflict.text
    assert conn.problems == []
    assert len(conn.ports) == 1, f"{len(conn.ports)} connections: the server closed some"
    assert_no_statements_logged(conn)


def test_a_reward_served_in_front_of_fastapi_is_stored_when_answered(served: Served) -> None:
    """``api.direct`` serves the reward routes itself: their completions are committed before
    the answer too."""
    missing = []
    with connection(served, served.secret) as conn:
        for i in range(REWARDS):
            item = {"prompt_id": SEA, "completion": f"The blue sea, round {i}."}
            reward = conn.send("POST", "/v1/rewards", json={"items": [item]})
            assert reward.status_code == 200, reward.text
            assert reward.json()["rewards"] == [pytest.approx(1.0)]
            completion_id = reward.json()["results"][0]["completion_id"]
            read = conn.send("GET", f"/v1/completions/{completion_id}")
            if read.status_code != 200:
                missing.append((completion_id, read.status_code))
    assert missing == []
    assert conn.problems == []
    assert len(conn.ports) == 1
    assert_no_statements_logged(conn)


def _csrf(html: str) -> str:
    start = html.index('name="csrf_token" value="') + len('name="csrf_token" value="')
    return html[start : html.index('"', start)]


def _sign_in(conn: Connection, served: Served) -> None:
    """Sign in to the review pages on ``conn`` with the module's key."""
    login = conn.send("GET", "/ui/login")
    form = {"api_key": served.secret, "csrf_token": _csrf(login.text), "next": "/ui/queue"}
    assert conn.send("POST", "/ui/login", data=form).status_code == 303


def test_a_review_form_is_committed_before_its_redirect(served: Served) -> None:
    """The browser asks for the page a form redirects to at once: what the form did is
    stored by the time the redirect is answered."""
    engine = make_engine(served.database_url)
    unsaved = []
    try:
        with connection(served) as conn:
            _sign_in(conn, served)
            token = _csrf(conn.send("GET", f"/ui/versions/{served.drafts[0]}").text)
            for version_id in served.drafts[:DRAFTS]:
                path = f"/ui/versions/{version_id}/retire"
                retired = conn.send("POST", path, data={"csrf_token": token})
                assert retired.status_code == 303, retired.text
                with session_scope(engine) as session:
                    status = session.scalar(
                        select(RubricVersion.status).where(RubricVersion.id == version_id)
                    )
                if status != VersionStatus.RETIRED:
                    unsaved.append((version_id, status))
    finally:
        engine.dispose()
    assert unsaved == [], f"{len(unsaved)} of {DRAFTS} retired versions read as {unsaved[:5]}"
    assert conn.problems == []
    assert_no_statements_logged(conn)


@contextmanager
def _write_lock(database_url: str, table: str, row_id: int) -> Iterator[None]:
    """Another connection holding a lock that an update of the row needs: on SQLite the
    database's write lock (a write transaction), on PostgreSQL the row's (``FOR UPDATE``)."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        assert url.database
        lite = sqlite3.connect(url.database, isolation_level=None)
        try:
            lite.execute("BEGIN IMMEDIATE")
            yield
            lite.execute("ROLLBACK")
        finally:
            lite.close()
        return
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            conn.execute(text(f"SELECT id FROM {table} WHERE id = :id FOR UPDATE"), {"id": row_id})
            yield
            conn.rollback()
    finally:
        engine.dispose()


def _external_id(database_url: str, prompt_id: int) -> str | None:
    engine = make_engine(database_url)
    try:
        with session_scope(engine) as session:
            return session.scalar(select(Prompt.external_id).where(Prompt.id == prompt_id))
    finally:
        engine.dispose()


def test_a_commit_that_fails_is_not_answered_as_a_success(served: Served) -> None:
    """A real failure of the commit itself: the same prompt again with an external id changes
    only the stored row's attribute, which the session writes when it commits; another
    connection holds the lock that write needs for longer than the server waits for one."""
    messages = {"text": f"locked {uuid.uuid4()}"}
    named = {**messages, "external_id": f"locked-{uuid.uuid4().hex[:8]}"}
    with connection(served, served.secret) as conn:
        created = conn.send("POST", "/v1/prompts", json=messages)
        assert created.status_code == 201, created.text
        prompt_id = created.json()["prompt"]["id"]
        with _write_lock(served.database_url, "prompts", prompt_id):
            sent = time.monotonic()
            locked = conn.send("POST", "/v1/prompts", json=named)
            # Held past the server's wait, however early it answered.
            time.sleep(max(0.0, sent + 2 * LOCK_WAIT_S - time.monotonic()))
        stored = _external_id(served.database_url, prompt_id)
        assert not (locked.is_success and stored is None), (
            f"answered {locked.status_code} {locked.text[:120]!r}, but nothing was stored"
        )
        assert locked.status_code == 503 and is_error_shape(locked), locked.text
        assert locked.json()["error"]["code"] == "unavailable"
        assert locked.headers["retry-after"] == "1"
        assert stored is None

        # The lock gone, the same request is stored, on the same connection.
        again = conn.send("POST", "/v1/prompts", json=named)
        assert again.status_code == 200, again.text
        assert again.json()["prompt"]["external_id"] == named["external_id"]
    assert _external_id(served.database_url, prompt_id) == named["external_id"]
    assert len(conn.ports) == 1
    assert "POST /v1/prompts: 503, database error OperationalError" in conn.logged()
    assert_no_statements_logged(conn)


def test_a_review_form_that_cannot_be_saved_is_an_error_page(served: Served) -> None:
    """The review pages' transaction fails as the API's does: a form whose write cannot get
    its lock in time is a 503 page saying so, and nothing of it is stored."""
    version_id = served.drafts[DRAFTS]
    engine = make_engine(served.database_url)

    def status() -> VersionStatus | None:
        with session_scope(engine) as session:
            return session.scalar(
                select(RubricVersion.status).where(RubricVersion.id == version_id)
            )

    try:
        with connection(served) as conn:
            _sign_in(conn, served)
            token = _csrf(conn.send("GET", f"/ui/versions/{version_id}").text)
            path = f"/ui/versions/{version_id}/retire"
            with _write_lock(served.database_url, "rubric_versions", version_id):
                refused = conn.client.post(path, data={"csrf_token": token})
            assert refused.status_code == 503, refused.text
            assert "The database was busy or unreachable" in refused.text
            assert status() == VersionStatus.DRAFT
            retired = conn.send("POST", path, data={"csrf_token": token})
            assert retired.status_code == 303 and status() == VersionStatus.RETIRED
    finally:
        engine.dispose()
    assert len(conn.ports) == 1
    assert "/retire: 503, database error OperationalError" in conn.logged()
    assert_no_statements_logged(conn)


def test_every_route_takes_a_session_committed_before_its_answer(sqlite_url: str) -> None:
    """The one place routes' writes are committed: every route and page that takes a session
    takes it scoped to its function (``DB_SESSION``, ``PAGE_SESSION``), never ``Depends(db)``,
    whose exit FastAPI runs after the answer has been sent."""
    app = create_app(settings_for(sqlite_url))
    sessions = (api_deps.db, ui_deps.page_db)
    scoped: list[str] = []
    late: list[str] = []
    for route in app.routes:
        pending = list(getattr(getattr(route, "dependant", None), "dependencies", None) or [])
        while pending:
            dependant = pending.pop()
            if dependant.call in sessions:
                name = f"{','.join(sorted(getattr(route, 'methods', ())))} {route.path}"  # type: ignore[attr-defined]
                (scoped if dependant.scope == "function" else late).append(name)
            pending.extend(dependant.dependencies)
    assert late == []
    assert "POST /v1/prompts" in scoped and "POST /ui/versions/{version_id}/retire" in scoped
