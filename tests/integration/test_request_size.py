"""The judged text one judge request sends is bounded by its judge's ``max_request_chars``:
a per-criterion mode sends the response whole with every criterion, so a long response under
many criteria would be many long requests. Such a request is never sent: its judgment fails
at once, charged to the response when the response is why (its criteria's worst values, as a
response that overflows a judge's context), and the rest of the batch is judged; a bound that
the conversation and criteria alone pass is the configuration's fault (masked, named). On
every surface: the API's reward route (with what the API answered before: 413 refused the whole
batch), ``rubricsvc score``, Python. Every mode is covered with a real HTTP judge in
tests/integration/test_failure_classes.py; the judge here is scripted: what is tested is the
bound, not a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rubricsvc import db
from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import Judgment
from rubricsvc.scoring.rewards import RewardRequest, compute_rewards
from rubricsvc.scoring.scorer import ScoreOptions
from tests.api_harness import api_client, bearer
from tests.cli_runner import cli_ok
from tests.helpers import approve_rubrics

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
FITS = "It holds."
SENT = len("Summarize the report.") + len(LONG)  # the conversation and the response
# The scripted judge gives every criterion, the pitfall too, a probability of 0.9 of being
# met (criterion-prob; rar: over the sum of the weights' sizes).
ALL_YES = 0.9 * (3 + 2 + 1 - 2) / 8
# None met, the pitfall present: the worst a response can be scored.
WORST = (0 - 2) / 8


def _says_the_figure(error: str, criterion: str) -> None:
    assert error.startswith(
        f"{SENT + len(criterion):,} characters of judged text in one request to judge 'short'"
    ), error
    assert "at most 4,000 a request (the judge's max_request_chars); not sent" in error
    assert error.endswith("the response is too long for this judge"), error


def test_a_reward_batch_charges_the_long_response_and_judges_the_rest(
    database_url: str,
) -> None:
    approve_rubrics(database_url, judges=[SHORT])
    with api_client(database_url, [RUBRIC]) as (client, keys):
        body = {
            "judge": "short",
            "items": [
                {"prompt_id": PROMPT, "completion": LONG},
                {"prompt_id": PROMPT, "completion": FITS},
            ],
        }
        response = client.post("/v1/rewards", json=body, headers=bearer(keys["score"]))
        assert response.status_code == 200, response.text
        long, fits = response.json()["results"]
        assert long["reward"] == pytest.approx(WORST) and long["status"] != "masked"
        assert long["failures"] == {"infrastructure": 0, "judge": 0, "response": 4}
        for criterion in long["criteria"]:
            assert criterion["status"] == "unjudgeable"
            _says_the_figure(criterion["error"], criterion["text"])
        assert fits["reward"] == pytest.approx(ALL_YES)
        assert fits["failures"] == {"infrastructure": 0, "judge": 0, "response": 0}


def test_never_sent_and_judged_once_the_bound_is_raised(sqlite_url: str, tmp_path: Path) -> None:
    """The bound is not in the judge's hash, so what it refused is not kept as settled: the
    same judge with a larger bound judges it (its stored failure replaced by a verdict)."""
    approve_rubrics(sqlite_url, RUBRIC, judges=[SHORT])
    backend = ScriptedBackend()
    wider = SHORT.model_copy(update={"max_request_chars": 20_000})
    assert wider.config_hash() == SHORT.config_hash()
    engine = db.make_engine(sqlite_url)
    try:
        for spec, expected in ((SHORT, WORST), (wider, ALL_YES)):
            with db.session_scope(engine) as session:
                batch = compute_rewards(
                    session,
                    spec,
                    [RewardRequest(LONG, prompt_id=PROMPT), RewardRequest(FITS, prompt_id=PROMPT)],
                    ScoreOptions(),
                    lambda _: lambda: backend,
                )
            assert batch.rewards == pytest.approx([expected, ALL_YES])
            sent = [r for r in backend.requests if LONG in json.dumps(r.chat)]
            assert len(sent) == (0 if spec is SHORT else 4), spec.max_request_chars
        with db.session_scope(engine) as session:
            judgments = session.query(Judgment).all()
            assert len(judgments) == 8 and all(j.status == "ok" for j in judgments)
    finally:
        engine.dispose()

    # The CLI's ``score``: the run goes through, the long one charged, the failure named.
    records = tmp_path / "completions.jsonl"
    records.write_text(
        "".join(
            json.dumps({"external_id": name, "prompt_external_id": PROMPT, "text": text}) + "\n"
            for name, text in (("long-2", LONG + " Again."), ("fits-2", FITS + " Again."))
        )
    )
    cli_ok("completions", "add", str(records), database_url=sqlite_url)
    report = cli_ok(
        "score", "--judge", "short", "--via", "inprocess", "--json", database_url=sqlite_url
    ).json()
    scores = {s["completion_external_id"]: s for s in report["scores"]}
    assert scores["long-2"]["value"] == pytest.approx(WORST)
    assert scores["long-2"]["failures"]["response"] == 4
    assert scores["fits-2"]["value"] == pytest.approx(ALL_YES)


def test_a_bound_the_prompt_and_criteria_pass_alone_is_masked_and_named(sqlite_url: str) -> None:
    """Not the response's doing: nothing charged, nothing sent, the error says what to change."""
    tight = SHORT.model_copy(update={"max_request_chars": 30})
    approve_rubrics(sqlite_url, RUBRIC, judges=[tight])
    backend = ScriptedBackend()
    engine = db.make_engine(sqlite_url)
    try:
        with db.session_scope(engine) as session:
            batch = compute_rewards(
                session,
                tight,
                [RewardRequest(FITS, prompt_id=PROMPT)],
                ScoreOptions(),
                lambda _: lambda: backend,
            )
        (result,) = batch.results
        assert result.reward is None and result.status == "masked"
        assert result.failures == {"infrastructure": 4, "judge": 0, "response": 0}
        error = result.criteria[0]["error"]
        assert "the conversation, reference and criteria alone pass it" in error, error
        assert "raise max_request_chars" in error
        assert backend.requests == []
    finally:
        engine.dispose()
