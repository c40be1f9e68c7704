"""Unreviewed drafts reward only where a person could approve them: against a real
`rubricsvc serve`, a score key's ``include_drafts: true`` is refused (403, nothing stored) on
/v1/rewards and /v1/score-jobs; a key with the review scope, or a server that scores drafts for
everyone (RUBRICSVC_SCORING_USE_DRAFTS=true), gets the draft's reward."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.requirements import require_module

require_module("uvicorn", "api")

import httpx  # noqa: E402

from rubricsvc.apikeys import create_key  # noqa: E402
from rubricsvc.db import make_engine, session_scope  # noqa: E402
from rubricsvc.models import Completion, Judgment, Score, ScoreJob  # noqa: E402
from rubricsvc.rubrics.schemas import RubricSpec  # noqa: E402
from rubricsvc.rubrics.versions import save_rubric  # noqa: E402
from tests.api_harness import bearer  # noqa: E402
from tests.helpers import blue_sea_rubric, table_counts  # noqa: E402
from tests.servers import RubricsvcServer  # noqa: E402

SEA = "drafts-sea"
DRAFT = blue_sea_rubric("drafts/blue-sea", SEA, max_words=20)  # check criteria: no model
ANSWER = "The blue sea is calm."  # blue (3) and under 20 words (1): 1.0 under the draft
STORED = (Completion, Judgment, Score, ScoreJob)


def _seed(database_url: str) -> dict[str, str]:
    """The draft (never approved) and the keys; their secrets by name."""
    engine = make_engine(database_url)
    with session_scope(engine) as session:
        save_rubric(session, RubricSpec.model_validate(DRAFT))
        secrets = {
            name: create_key(session, f"drafts-{name}", scopes).secret
            for name, scopes in {
                "score": ["score"],
                "score+review": ["score", "review"],
                "admin": ["admin"],
            }.items()
        }
    engine.dispose()
    return secrets


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[tuple[httpx.Client, dict[str, str]]]:
    secrets = _seed(database_url)
    server = RubricsvcServer(database_url, log_path=tmp_path / "serve.log", env={})
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            yield client, secrets
    finally:
        server.stop()


def _reward(client: httpx.Client, secret: str, **body: Any) -> httpx.Response:
    items = [{"prompt_id": SEA, "completion": ANSWER}]
    return client.post("/v1/rewards", json={"items": items, **body}, headers=bearer(secret))


def test_a_score_key_cannot_reward_with_drafts_and_a_reviewer_can(
    served: tuple[httpx.Client, dict[str, str]], database_url: str
) -> None:
    client, secrets = served
    # Without the flag: the server's setting (approved only), so no rubric, a null reward.
    plain = _reward(client, secrets["score"])
    assert plain.status_code == 200, plain.text
    assert plain.json()["rewards"] == [None]
    assert plain.json()["results"][0]["status"] == "no_rubric"
    before = table_counts(database_url, STORED)

    refused = _reward(client, secrets["score"], include_drafts=True)
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["code"] == "forbidden" and error["field"] == "body.include_drafts"
    assert "review scope" in error["message"]
    assert "RUBRICSVC_SCORING_USE_DRAFTS" in error["message"]
    # The same body through FastAPI's own route (not the direct path): refused alike.
    routed = client.post(
        "/v1/rewards",
        json={"items": [{"prompt_id": SEA, "completion": ANSWER}], "include_drafts": True},
        headers={**bearer(secrets["score"]), "content-type": "application/json; charset=utf-8"},
    )
    assert routed.status_code == 403, routed.text
    job = client.post(
        "/v1/score-jobs",
        json={"judge": "embedded", "prompt_ids": [SEA], "include_drafts": True},
        headers=bearer(secrets["score"]),
    )
    assert job.status_code == 403, job.text
    assert job.json()["error"]["field"] == "body.include_drafts"
    assert table_counts(database_url, STORED) == before  # nothing stored by the refusals

    for allowed in ("score+review", "admin"):
        rewarded = _reward(client, secrets[allowed], include_drafts=True)
        assert rewarded.status_code == 200, rewarded.text
        assert rewarded.json()["rewards"] == [pytest.approx(1.0)]
        assert rewarded.json()["results"][0]["rubric"] == "drafts/blue-sea@1"


def test_a_server_that_scores_drafts_lets_every_score_key_ask(
    sqlite_url: str, tmp_path: Path
) -> None:
    secrets = _seed(sqlite_url)
    server = RubricsvcServer(
        sqlite_url, log_path=tmp_path / "serve.log", env={"RUBRICSVC_SCORING_USE_DRAFTS": "true"}
    )
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            for body in ({}, {"include_drafts": True}):
                rewarded = _reward(client, secrets["score"], **body)
                assert rewarded.status_code == 200, rewarded.text
                assert rewarded.json()["rewards"] == [pytest.approx(1.0)]
            # Asking for approved versions only is every key's right.
            approved = _reward(client, secrets["score"], include_drafts=False)
            assert approved.json()["rewards"] == [None]
    finally:
        server.stop()
