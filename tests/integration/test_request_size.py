"""The judged text one judge request sends is bounded by its judge's ``max_request_chars``:
a per-criterion mode sends the response whole with every criterion, so a long response under
many criteria is refused when its work is planned, before anything is stored or a judge is
called, naming the figure: 413 from the API (a reward request, a score job), a one-line error
from ``rubricsvc score``, ``RequestTooLong`` in Python. The judge is scripted: what is tested
is the admission, not a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rubricsvc import db
from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import Completion, Judgment, Score, ScoreJob
from rubricsvc.scoring.request_size import RequestTooLong
from rubricsvc.scoring.rewards import RewardRequest, compute_rewards
from rubricsvc.scoring.scorer import ScoreOptions
from tests.api_harness import api_client, bearer
from tests.cli_runner import cli_error, cli_ok
from tests.helpers import approve_rubrics, table_counts

PROMPT = "size-report"
RUBRIC: dict[str, Any] = {
    "name": "size/report",
    "prompt": {"external_id": PROMPT, "text": "Summarize the report."},
    "criteria": [
        {"text": "Names the main finding", "weight": 3},
        {"text": "Gives the sample size", "weight": 2},
        {"text": "States the limitations", "weight": 1},
        {"text": "Invents a statistic", "weight": -2},
    ],
}
SHORT = JudgeSpec(name="short", backend="scripted", model="scripted", max_request_chars=4_000)
LONG = "The finding holds. " * 500  # 9,500 characters, sent with each of 4 criteria
SENT = len("Summarize the report.") + len(LONG)  # the conversation and the response
ROWS = (Completion, Judgment, Score, ScoreJob)


def _figure(criterion: str) -> int:
    return SENT + len(criterion)


def _refusal_says_the_figure(message: str) -> None:
    longest = max(_figure(str(c["text"])) for c in RUBRIC["criteria"])
    assert message.startswith(
        f"{longest:,} characters of judged text in one request to judge 'short'"
    ), message
    assert "4 such request(s) for this completion" in message
    assert "at most 4,000 a request (the judge's max_request_chars)" in message


def test_a_reward_request_and_a_score_job_past_it_are_413_and_store_nothing(
    database_url: str,
) -> None:
    approve_rubrics(database_url, judges=[SHORT])
    with api_client(database_url, [RUBRIC]) as (client, keys):
        before = table_counts(database_url, ROWS)
        body = {"judge": "short", "items": [{"prompt_id": PROMPT, "completion": LONG}]}
        response = client.post("/v1/rewards", json=body, headers=bearer(keys["score"]))
        assert response.status_code == 413, response.text
        error = response.json()["error"]
        assert error["code"] == "too_large"
        _refusal_says_the_figure(error["message"])
        assert table_counts(database_url, ROWS) == before

        # A response that fits is judged.
        fits = {"judge": "short", "items": [{"prompt_id": PROMPT, "completion": "It holds."}]}
        answered = client.post("/v1/rewards", json=fits, headers=bearer(keys["score"]))
        assert answered.status_code == 200, answered.text
        assert answered.json()["rewards"][0] is not None

        record = {"prompt_external_id": PROMPT, "text": LONG}
        added = client.post("/v1/completions", json=[record], headers=bearer(keys["author"]))
        assert added.status_code == 200, added.text
        before = table_counts(database_url, ROWS)
        job = {"judge": "short", "prompt_ids": [PROMPT]}
        refused = client.post("/v1/score-jobs", json=job, headers=bearer(keys["score"]))
        assert refused.status_code == 413, refused.text
        _refusal_says_the_figure(refused.json()["error"]["message"])
        assert table_counts(database_url, ROWS) == before


def test_the_cli_and_python_refuse_it_before_a_judge_is_called(
    sqlite_url: str, tmp_path: Path
) -> None:
    approve_rubrics(sqlite_url, RUBRIC, judges=[SHORT])
    backend = ScriptedBackend()
    engine = db.make_engine(sqlite_url)
    try:
        with pytest.raises(RequestTooLong) as refused, db.session_scope(engine) as session:
            compute_rewards(
                session,
                SHORT,
                [RewardRequest(LONG, prompt_id=PROMPT)],
                ScoreOptions(),
                lambda _: lambda: backend,
            )
        _refusal_says_the_figure(str(refused.value))
        longest = max(_figure(str(c["text"])) for c in RUBRIC["criteria"])
        assert (refused.value.chars, refused.value.bound) == (longest, 4_000)
        assert backend.requests == []
        # Rolled back with the refusal: the completion it stored first is gone.
        assert table_counts(sqlite_url, ROWS)["completions"] == 0
    finally:
        engine.dispose()

    records = tmp_path / "completions.jsonl"
    records.write_text(json.dumps({"prompt_external_id": PROMPT, "text": LONG}) + "\n")
    cli_ok("completions", "add", str(records), database_url=sqlite_url)
    error = cli_error("score", "--judge", "short", "--via", "inprocess", database_url=sqlite_url)
    assert len(error.splitlines()) == 1, error
    _refusal_says_the_figure(error.removeprefix("error: "))
    assert table_counts(sqlite_url, ROWS)["judgments"] == 0
