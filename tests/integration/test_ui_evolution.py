"""The review pages show an evolved version's history: which criteria appeared at which step,
which went inactive and why, what was refused, and the rollouts that prompted them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from rubricsvc.api import create_app
from rubricsvc.apikeys import create_key
from rubricsvc.db import make_engine, session_scope
from tests.api_harness import settings_for
from tests.integration.test_evolution_step import (
    STEP0_ANSWER,
    STEP0_VALUES,
    Generator,
    TableJudge,
    _settings,
    _step,
)
from tests.integration.test_ui import sign_in, version_id


@pytest.fixture
def client(sqlite_url: str) -> Iterator[TestClient]:
    engine = make_engine(sqlite_url)
    with session_scope(engine) as session:
        secret = create_key(session, "ana", ["read", "author", "review"]).secret
        _step(session, 0, Generator(STEP0_ANSWER), TableJudge(STEP0_VALUES), _settings())
        _step(session, 1, Generator("garbage"), TableJudge({}), _settings())
    app = create_app(settings_for(sqlite_url), engine)
    with TestClient(app, base_url="http://testserver", follow_redirects=False) as client:
        sign_in(client, secret)
        yield client
    engine.dispose()


def test_an_evolved_version_links_to_its_history(client: TestClient, sqlite_url: str) -> None:
    evolved = version_id(sqlite_url, "evolved/run-1/prompt-1@1")
    page = client.get(f"/ui/versions/{evolved}")
    assert page.status_code == 200
    assert f'href="/ui/versions/{evolved}/evolution"' in page.text
    # Its parent is the persistent rubric's version, another rubric's.
    assert ">t/sleep@1</a>" in page.text

    history = client.get(f"/ui/versions/{evolved}/evolution")
    assert history.status_code == 200, history.text
    text = history.text
    assert "Evolution run run-1" in text and "made at step 0" in text
    assert "Step 0: evolved (t/sleep@1 → evolved/run-1/prompt-1@1)" in text
    assert '<span class="diff-added">Recommends sleeping pills</span>' in text
    assert "Does not mention caffeine (mirror of “Mentions caffeine”)" in text
    assert "step 0 (past max_active)" in text and "step 0 (no spread)" in text
    assert "0: 0.43" in text  # the bedroom criterion's spread, sqrt(3/16)
    assert "Step 1: generator_failed" in text and "unusable answer" in text
    assert "A: schedule, wind-down" in text  # a rollout that prompted the criteria
    assert "failed 1 of 2 times" in text


def test_a_version_no_run_grew_has_no_history(client: TestClient, sqlite_url: str) -> None:
    persistent = version_id(sqlite_url, "t/sleep@1")
    assert 'id="evolution-link"' not in client.get(f"/ui/versions/{persistent}").text
    assert client.get(f"/ui/versions/{persistent}/evolution").status_code == 404
