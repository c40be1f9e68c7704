"""Fixtures of the browser tests: the real `rubricsvc serve` on a loopback port and a fresh
migrated PostgreSQL database, keys and rubrics seeded through the project's own services, and
Debian's Chromium driven by Playwright (sync API).

Without Chromium or Playwright the browser tests skip and say how to install them; with
``CI=true`` they fail instead, as a missing PostgreSQL does (tests/conftest.py). The plain-HTTP
tests of the same module need only the server. Screenshots go to each test's output folder
(its ``tmp_path``) and, with ``RUBRICSVC_SCREENSHOTS_DIR`` set, there too (docs/images/).
"""

from __future__ import annotations

import os
import re
import secrets
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from rubricsvc import db, demo
from rubricsvc.apikeys import create_key
from rubricsvc.models import Completion, RubricVersion
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.versions import save_rubric
from tests.browser.harness import (
    CHROMIUM_ARGS,
    RubricsvcServer,
    browser_missing_reason,
    chromium_path,
)
from tests.cli_runner import cli_ok
from tests.helpers import detached_versions
from tests.requirements import prepared_model_dir, unavailable

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

REVIEWER = "reviewer-ana"  # read, author, review
AUTHOR = "author-ben"  # read, author: no review scope
# What `rubricsvc rubrics generate` records on a draft it wrote.
GENERATOR = {
    "generator_model": "SmolLM2-135M-Instruct",
    "generator_backend": "transformers",
    "template": "draft_rubric.txt",
    "template_sha256": "3f2a9c41d7e8b6055a1c2e9d8f7b6a5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a",
}
DRAFT_CRITERIA: list[dict[str, Any]] = [
    {"text": "Recommends a regular sleep and wake time", "weight": 5},
    {"text": "Mentions limiting caffeine late in the day", "weight": 3},
    {"text": "Suggests a dark, quiet bedroom", "weight": 2},
    {"text": "Recommends sleeping pills without a doctor", "weight": -4},
]
DEMO_COMPLETION = "demo-sleep/a"  # the strong answer to the demo's sleep prompt


# -- The server and its database ---------------------------------------------------------------


@dataclass(frozen=True)
class UiServer:
    """The running server, the database it serves and where its log is."""

    base_url: str
    database_url: str
    engine: Engine  # the tests' own engine on that database (seeding and assertions)
    log_path: Path
    server: RubricsvcServer

    def url(self, path: str) -> str:
        return self.base_url + path


@pytest.fixture(scope="session")
def ui_server(
    make_postgres_database: Callable[[], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UiServer]:
    """`rubricsvc serve` on a free loopback port and a fresh migrated PostgreSQL database of
    its own (no other test truncates it), killed at the end of the run."""
    database_url = make_postgres_database()
    db.upgrade(database_url)
    folder = tmp_path_factory.mktemp("rubricsvc-serve")
    server = RubricsvcServer(
        database_url,
        log_path=folder / "server.log",
        env={
            "RUBRICSVC_API_SESSION_SECRET": secrets.token_urlsafe(32),
            # The default, stated: a key cannot approve a version it saved.
            "RUBRICSVC_API_ALLOW_SELF_REVIEW": "false",
        },
    )
    server.start(timeout=60)
    engine = db.make_engine(database_url)
    try:
        yield UiServer(server.base_url, database_url, engine, server.log_path, server)
    finally:
        server.stop()
        engine.dispose()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test that used the server shows the end of the server's log."""
    report = yield
    server = getattr(item, "funcargs", {}).get("ui_server")
    if report.failed and isinstance(server, UiServer):
        report.sections.append(
            (f"rubricsvc serve log ({server.log_path})", server.server.log_tail(60))
        )
    return report


# -- Data, through the project's own services -------------------------------------------------


@pytest.fixture(scope="session")
def keys(ui_server: UiServer) -> dict[str, str]:
    """Secrets of two keys: a reviewer and an author who lacks the review scope."""
    with db.session_scope(ui_server.engine) as session:
        return {
            REVIEWER: create_key(session, REVIEWER, ["read", "author", "review"]).secret,
            AUTHOR: create_key(session, AUTHOR, ["read", "author"]).secret,
        }


@dataclass(frozen=True)
class Draft:
    version_id: int
    name: str

    @property
    def ref(self) -> str:
        return f"{self.name}@1"


@pytest.fixture
def llm_draft(ui_server: UiServer) -> Draft:
    """A new rubric whose only version is a draft an LLM wrote (a name of its own per test)."""
    name = f"browser/sleep-{uuid.uuid4().hex[:8]}"
    spec = RubricSpec.model_validate(
        {
            "name": name,
            "title": "Practical advice for better sleep",
            "prompt": {
                "text": "I wake up tired after eight hours in bed. How can I sleep better?",
                "tags": {"topic": "health"},
            },
            "criteria": DRAFT_CRITERIA,
            "origin": "llm",
            "origin_detail": GENERATOR,
        }
    )
    with db.session_scope(ui_server.engine) as session:
        version = save_rubric(session, spec).version
        return Draft(version.id, name)


def versions_of(ui_server: UiServer, name: str) -> list[RubricVersion]:
    """Every version of rubric ``name``, oldest first, with their criteria loaded, detached."""
    with Session(ui_server.engine) as session:
        return detached_versions(session, name)


@dataclass(frozen=True)
class ScoredCompletion:
    completion_id: int
    criteria: list[str]  # the texts of its rubric's criteria


@pytest.fixture(scope="session")
def scored_demo_completion(ui_server: UiServer) -> ScoredCompletion:
    """The demo's strong sleep answer, scored by the bundled embedded judge as `make demo`
    does (criterion-prob), through the CLI on the server's database."""
    prepared_model_dir()
    url = ui_server.database_url
    cli_ok("rubrics", "add", str(demo.RUBRICS), database_url=url)
    cli_ok("completions", "add", str(demo.COMPLETIONS), database_url=url)
    # Approved like `make demo`, so that the demo's rubrics stay out of the review queue.
    refs = ("demo/sleep-advice", "demo/explain-recursion", "demo/haiku-autumn")
    cli_ok("rubrics", "approve", *refs, "--reviewer", "demo", database_url=url)
    cli_ok(
        "score",
        "--judge",
        "embedded",
        "--mode",
        "criterion-prob",
        "--prompt",
        "demo-sleep",
        "--source",
        "demo-strong",
        "--no-breakdown",
        database_url=url,
        timeout=600,
    )
    with Session(ui_server.engine) as session:
        completion = session.scalar(
            select(Completion).where(Completion.external_id == DEMO_COMPLETION)
        )
        assert completion is not None
        version = session.scalar(
            select(RubricVersion).where(RubricVersion.rubric.has(name="demo/sleep-advice"))
        )
        assert version is not None
        return ScoredCompletion(completion.id, [c.text for c in version.criteria])


# -- The browser -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless, launched by Playwright (which downloads nothing).

    Module-scoped: Playwright's sync API keeps an asyncio loop marked as running in this
    thread while it is open, so ``asyncio.run`` in any test after it would fail. It ends
    with the browser tests' module."""
    reason = browser_missing_reason()
    if reason is not None:
        unavailable(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def new_page(browser: Browser) -> Iterator[Callable[[], Page]]:
    """Opens a page in a browser context of its own (its own cookies: one person each)."""
    contexts = []

    def factory() -> Page:
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        context.set_default_timeout(10_000)
        contexts.append(context)
        return context.new_page()

    yield factory
    for context in contexts:
        context.close()


@pytest.fixture
def page(new_page: Callable[[], Page]) -> Page:
    return new_page()


Shot = Callable[["Page", str], Path]


@pytest.fixture
def shot(tmp_path: Path) -> Shot:
    """``shot(page, name)``: a full-page PNG in the test's output folder (and in
    ``RUBRICSVC_SCREENSHOTS_DIR`` when set); returns the first path."""
    folder = tmp_path / "screenshots"

    def take(page: Page, name: str) -> Path:
        if not re.fullmatch(r"[\w.-]+", name):
            raise ValueError(f"screenshot name {name!r}: letters, digits, '.', '-', '_' only")
        folder.mkdir(exist_ok=True)
        path = folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        extra = os.environ.get("RUBRICSVC_SCREENSHOTS_DIR")
        if extra:
            Path(extra).mkdir(parents=True, exist_ok=True)
            (Path(extra) / path.name).write_bytes(path.read_bytes())
        return path

    return take
