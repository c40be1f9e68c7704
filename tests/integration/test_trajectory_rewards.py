"""Trajectories end to end: carried by the reward route, the completions file and the trainer's
reward requests, stored with the completion, and read by the loop check and by a trajectory
criterion that the bundled model judges; a malformed trajectory is refused naming its record,
with nothing of the batch stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from rubricsvc.models import Completion, Judgment
from tests.api_harness import api_client, bearer
from tests.cli_runner import cli_error, cli_ok
from tests.helpers import read_database
from tests.workers_harness import require_embedded_model

PROMPT = "What is the population of Lyon? Look it up."
ANSWER = "Lyon has about 520,000 inhabitants."
SEARCH_CALL = {
    "role": "assistant",
    "content": "I will search for it.",
    "tool_calls": [
        {"type": "function", "function": {"name": "web_search", "arguments": {"q": "Lyon"}}}
    ],
}
SEARCHED = [
    SEARCH_CALL,
    {"role": "tool", "name": "web_search", "content": "Lyon: population 522,250 (2021 census)."},
    {"role": "assistant", "content": ANSWER},
]
# The same call three times, each answered with an error, then the same final answer.
LOOPED = [
    *(m for _ in range(3) for m in (SEARCH_CALL, {"role": "tool", "content": "Error: 429"})),
    {"role": "assistant", "content": ANSWER},
]
RUBRIC: dict[str, Any] = {
    "name": "agent/lyon",
    "prompt": {"external_id": "lyon", "text": PROMPT},
    "criteria": [
        {
            "text": "The assistant called the web_search tool before answering",
            "weight": 2,
            "target": "trajectory",
        },
        {
            "text": "No tool call repeated",
            "weight": 1,
            "kind": "check",
            "check": {"type": "tool_loop", "min_repeats": 3},
        },
        {
            "text": "No tool error ignored",
            "weight": 1,
            "kind": "check",
            "check": {"type": "tool_errors_ignored"},
        },
    ],
}


def _by_text(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["text"]: c for c in result["criteria"]}


@pytest.mark.model
def test_the_reward_route_reads_each_rollouts_trajectory(database_url: str) -> None:
    require_embedded_model()
    items = [
        {"prompt_id": "lyon", "completion": ANSWER, "trajectory": SEARCHED},
        {"prompt_id": "lyon", "completion": ANSWER, "trajectory": LOOPED},
        {"prompt_id": "lyon", "completion": ANSWER},  # no trajectory
    ]
    with api_client(database_url, rubrics=[RUBRIC]) as (client, keys):
        response = client.post(
            "/v1/rewards",
            json={"items": items, "judge": "embedded", "mode": "criterion-prob"},
            headers=bearer(keys["score"]),
        )
        assert response.status_code == 200, response.text
        searched, looped, plain = response.json()["results"]

        # Same final answer, three rollouts: three completions, each with its own trajectory.
        ids = {searched["completion_id"], looped["completion_id"], plain["completion_id"]}
        assert len(ids) == 3
        # The loop and the ignored errors are found in the looping trajectory only.
        assert _by_text(searched)["No tool call repeated"]["verdict"] == "pass"
        assert _by_text(looped)["No tool call repeated"]["verdict"] == "fail"
        assert _by_text(searched)["No tool error ignored"]["verdict"] == "pass"
        assert _by_text(looped)["No tool error ignored"]["verdict"] == "fail"
        assert searched["reward"] is not None and looped["reward"] is not None
        assert looped["reward"] < searched["reward"]
        # The judged criterion: the model's P(yes) on each rendered trajectory; they differ
        # because what it was shown differs.
        on_trajectory = "The assistant called the web_search tool before answering"
        values = [_by_text(r)[on_trajectory]["value"] for r in (searched, looped)]
        assert all(v is not None and 0.0 < v < 1.0 for v in values)
        assert values[0] != pytest.approx(values[1], abs=1e-6)
        # Without a trajectory, the trajectory criterion and checks are masked, never 0.
        masked = _by_text(plain)
        assert all(masked[c["text"]]["value"] is None for c in RUBRIC["criteria"])
        assert plain["reward"] is None

        # A rollout seen again is the stored completion, judged from the cache.
        again = client.post(
            "/v1/rewards",
            json={"items": items[:2], "judge": "embedded", "mode": "criterion-prob"},
            headers=bearer(keys["score"]),
        ).json()
        assert [r["completion_id"] for r in again["results"]] == [
            searched["completion_id"],
            looped["completion_id"],
        ]
        assert again["computed"] == 0 and again["rewards"] == [
            searched["reward"],
            looped["reward"],
        ]
    stored = read_database(
        database_url,
        lambda s: {c.id: c.messages for c in s.scalars(select(Completion))},
    )
    assert stored[looped["completion_id"]][0]["tool_calls"][0]["function"]["name"] == "web_search"
    assert stored[plain["completion_id"]] is None


@pytest.mark.parametrize(
    ("trajectory", "complaint"),
    [
        ("not a list", "trajectory"),
        ([{"role": "user", "content": "x", "tool_calls": [SEARCH_CALL["tool_calls"][0]]}], "user"),
        ([{"role": "tool"}], "needs content"),
        ([{"role": "robot", "content": "beep"}], "role"),
        ([], "trajectory"),
    ],
)
def test_a_malformed_trajectory_is_refused_naming_the_item(
    sqlite_url: str, trajectory: Any, complaint: str
) -> None:
    with api_client(sqlite_url, rubrics=[RUBRIC]) as (client, keys):
        response = client.post(
            "/v1/rewards",
            json={
                "items": [
                    {"prompt_id": "lyon", "completion": ANSWER, "trajectory": SEARCHED},
                    {"prompt_id": "lyon", "completion": "Other.", "trajectory": trajectory},
                ]
            },
            headers=bearer(keys["score"]),
        )
    assert response.status_code == 422, response.text
    text = json.dumps(response.json())
    assert "items" in text and "1" in text and "trajectory" in text and complaint in text
    assert read_database(sqlite_url, lambda s: s.scalar(select(func.count(Completion.id)))) == 0


def test_in_process_rewards_check_every_trajectory_before_storing(sqlite_url: str) -> None:
    from rubricsvc.db import make_engine, session_scope
    from rubricsvc.errors import ValidationFailed
    from rubricsvc.rubrics.schemas import RubricSpec
    from rubricsvc.rubrics.versions import approve, save_rubric
    from rubricsvc.scoring.rewards import RewardRequest, find_prompts, store_completions

    engine = make_engine(sqlite_url)
    with session_scope(engine) as session:
        approve(session, save_rubric(session, RubricSpec.model_validate(RUBRIC)).version)
    requests = [
        RewardRequest(ANSWER, prompt_id="lyon", trajectory=SEARCHED),
        RewardRequest("Other.", prompt_id="lyon", trajectory=[{"role": "tool"}]),
    ]
    refused = pytest.raises(
        ValidationFailed, match=r"^item 1: trajectory: \[0\]: a tool message needs"
    )
    with refused, session_scope(engine) as session:
        store_completions(session, requests, find_prompts(session, requests), "rewards")
    assert read_database(sqlite_url, lambda s: s.scalar(select(func.count(Completion.id)))) == 0
    engine.dispose()


def test_each_rollout_gets_the_id_of_its_own_stored_completion(database_url: str) -> None:
    """The new completions go in as one insert whose rows come back in no promised order:
    each request's id must still be the row holding its own text and trajectory, including
    rollouts sharing a text whose trajectories differ, and a rollout sent twice."""
    from rubricsvc.db import make_engine, session_scope
    from rubricsvc.rubrics.schemas import RubricSpec
    from rubricsvc.rubrics.versions import approve, save_rubric
    from rubricsvc.scoring.rewards import RewardRequest, find_prompts, store_completions

    engine = make_engine(database_url)
    with session_scope(engine) as session:
        approve(session, save_rubric(session, RubricSpec.model_validate(RUBRIC)).version)
    requests = [RewardRequest(f"Rollout {n}: {ANSWER}", prompt_id="lyon") for n in range(40)]
    requests += [
        RewardRequest(ANSWER, prompt_id="lyon", trajectory=SEARCHED),
        RewardRequest(ANSWER, prompt_id="lyon", trajectory=LOOPED),
        RewardRequest(ANSWER, prompt_id="lyon"),
        RewardRequest("Rollout 7: " + ANSWER, prompt_id="lyon"),  # sent twice: one row
    ]
    with session_scope(engine) as session:
        ids = store_completions(session, requests, find_prompts(session, requests), "rewards")
    stored = read_database(
        database_url,
        lambda s: {c.id: (c.text, c.messages) for c in s.scalars(select(Completion))},
    )
    engine.dispose()
    assert len(stored) == 43 and len(set(ids)) == 43 and ids[7] == ids[-1]
    for request, completion_id in zip(requests, ids, strict=True):
        text, messages = stored[completion_id]
        assert text == request.completion
        if request.trajectory is None:
            assert messages is None
        else:
            assert messages[-1]["content"] == ANSWER and len(messages) == len(request.trajectory)


def test_the_completions_file_carries_trajectories(sqlite_url: str, tmp_path: Path) -> None:
    rubric = tmp_path / "rubric.json"
    checks_only = {**RUBRIC, "criteria": RUBRIC["criteria"][1:]}
    rubric.write_text(json.dumps(checks_only))
    cli_ok("rubrics", "add", str(rubric), database_url=sqlite_url)
    cli_ok("rubrics", "approve", "agent/lyon", database_url=sqlite_url)
    records = [
        {"prompt_external_id": "lyon", "external_id": "a", "text": ANSWER, "trajectory": SEARCHED},
        {"prompt_external_id": "lyon", "external_id": "b", "text": ANSWER, "trajectory": LOOPED},
    ]
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in records))
    bad = tmp_path / "bad.jsonl"
    broken = {**records[1], "external_id": "c", "trajectory": [{"role": "assistant"}]}
    bad.write_text(json.dumps(records[0]) + "\n" + json.dumps(broken) + "\n")

    error = cli_error("completions", "add", str(bad), database_url=sqlite_url)
    assert f"{bad}:2" in error and "trajectory" in error and "needs content" in error
    assert len(error.strip().splitlines()) == 1
    assert read_database(sqlite_url, lambda s: s.scalar(select(func.count(Completion.id)))) == 0

    cli_ok("completions", "add", str(good), database_url=sqlite_url)
    # The same id again with another trajectory is refused, not silently kept.
    changed = tmp_path / "changed.jsonl"
    changed.write_text(json.dumps({**records[0], "trajectory": LOOPED}) + "\n")
    refused = cli_error("completions", "add", str(changed), database_url=sqlite_url)
    assert "already stored with a different prompt, text, trajectory or documents" in refused

    report = cli_ok("score", "--json", database_url=sqlite_url).json()
    values = {s["completion_external_id"]: s["value"] for s in report["scores"]}
    assert values == {"a": 1.0, "b": 0.0}  # checks only: no model involved
    exported = cli_ok(
        "scores", "export", "--judge", "embedded", "--aggregation", "rar", database_url=sqlite_url
    ).stdout.splitlines()
    lines = {line["completion_external_id"]: line for line in map(json.loads, exported)}
    assert lines["b"]["trajectory"][0]["tool_calls"][0]["function"]["name"] == "web_search"
    assert len(lines["b"]["trajectory"]) == len(LOOPED) and "documents" not in lines["b"]
    assert read_database(sqlite_url, lambda s: s.scalar(select(func.count(Judgment.id)))) == 0


def test_the_trainer_sends_a_tool_calling_rollouts_trajectory() -> None:
    from trainer.rewards import reward_requests

    rollout = [*SEARCHED]
    (with_tools, plain) = reward_requests([PROMPT, PROMPT], [rollout, ANSWER], ["lyon", "lyon"])
    assert with_tools.completion == ANSWER and with_tools.trajectory == SEARCHED
    assert plain.completion == ANSWER and plain.trajectory is None
