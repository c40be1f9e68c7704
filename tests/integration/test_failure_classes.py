"""Who caused a failed judgment decides what the score does with it, on every surface.

One judge behind a real OpenAI-compatible HTTP server on loopback, scripted by the response
it is shown: an endpoint answering 503 (infrastructure: masked), a judge replying garbage
(judge: masked), a response longer than the judge's context (vLLM's own 400 answer:
response: the criteria's worst values, never masked), and a healthy answer for contrast.
The same four pairs go through the CLI, the API's reward route, the trainer's reward
function and the OpenRLHF route; the last never refuses a batch for a masked score.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.api_harness import api_client, bearer
from tests.cli_runner import run_cli
from tests.fake_openai import FakeOpenAI, chat_completion, openai_judge, serving
from tests.helpers import approve_rubrics
from tests.requirements import require_module

require_module("openai", "openai")

PROMPT = "How can I sleep better?"
RUBRIC: dict[str, Any] = {
    "name": "t/failure-classes",
    "prompt": {"external_id": "p-fc", "text": PROMPT},
    "criteria": [
        {"text": "Recommends a regular sleep schedule", "weight": 2},
        {"text": "Recommends sleeping pills without a doctor", "weight": -1},
    ],
}
# The response decides what the scripted judge does; "long" stands for a response that
# overflows the judge's context, answered as vLLM's server answers one.
RESPONSES = {
    "ok": "Go to bed at the same time every day.",
    "infrastructure": "Marker-503: go to bed early.",
    "judge": "Marker-garbage: go to bed early.",
    "response": "Marker-long: " + "sleep " * 40,
}
WORST = (2 * 0.0 - 1 * 1.0) / 3  # rar with the criterion unmet and the pitfall present
OK = (2 * 1.0 - 1 * 1.0) / 3  # the scripted judge says yes to both


class ScriptedJudge(FakeOpenAI):
    def __init__(self) -> None:
        super().__init__(self._answer)

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        text = " ".join(str(m["content"]) for m in body["messages"])
        if "Marker-503" in text:
            return 503, {"error": {"message": "overloaded", "type": "server_error"}}
        if "Marker-garbage" in text:
            return 200, chat_completion("lorem ipsum, no verdict here")
        if "Marker-long" in text:
            return 400, {
                "error": {
                    "message": "This model's maximum context length is 2048 tokens. However, "
                    "your prompt contains at least 2300 input tokens.",
                    "type": "BadRequestError",
                }
            }
        return 200, chat_completion("It does.\nVERDICT: YES")


@pytest.fixture
def judge_server() -> Iterator[ScriptedJudge]:
    with serving(ScriptedJudge()) as server:
        yield server


@pytest.fixture
def database(sqlite_url: str, judge_server: ScriptedJudge) -> str:
    judge = openai_judge(judge_server, "scripted-http", model="scripted")
    approve_rubrics(sqlite_url, RUBRIC, judges=[judge], reviewer="t")
    return sqlite_url


def assert_classes(by_case: dict[str, dict[str, Any]]) -> None:
    """``by_case``: each case's reward (or score), status and failures by class."""
    ok, infra, judge, response = (by_case[c] for c in RESPONSES)
    assert ok["value"] == pytest.approx(OK) and ok["status"] == "ok"
    assert infra["value"] is None and infra["status"] == "masked"
    assert infra["failures"] == {"infrastructure": 2, "judge": 0, "response": 0}
    assert judge["value"] is None and judge["status"] == "masked"
    assert judge["failures"] == {"infrastructure": 0, "judge": 2, "response": 0}
    assert response["value"] == pytest.approx(WORST)
    assert response["failures"] == {"infrastructure": 0, "judge": 0, "response": 2}


def test_cli(database: str, tmp_path: Any) -> None:
    import json

    records = [
        {"external_id": case, "prompt_external_id": "p-fc", "text": text, "source": "cli"}
        for case, text in RESPONSES.items()
    ]
    path = tmp_path / "completions.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert run_cli("completions", "add", str(path), database_url=database).code == 0
    result = run_cli("score", "--judge", "scripted-http", "--json", database_url=database)
    assert result.code == 0, result.stderr
    report = result.json()
    assert report["failures"] == {"infrastructure": 2, "judge": 2, "response": 2}
    assert_classes(
        {
            s["completion_external_id"]: {
                "value": s["value"],
                "status": s["status"],
                "failures": s["failures"],
            }
            for s in report["scores"]
        }
    )
    # The judge's own failures are half of this run's judgments: far above the alarm.
    assert report["alarms"] and "judge's own reply" in report["alarms"][0]
    printed = run_cli("score", "--judge", "scripted-http", database_url=database)
    assert "(2 infrastructure, 2 judge)" in printed.stdout  # response failures are settled
    assert "alarm" in printed.stderr
    exported = run_cli(
        "scores", "export", "--judge", "scripted-http", "--aggregation", "rar",
        database_url=database,
    )  # fmt: skip
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert {line["completion_external_id"]: line["failures"]["response"] for line in lines} == {
        "ok": 0, "infrastructure": 0, "judge": 0, "response": 2,
    }  # fmt: skip


def test_api_rewards_and_openrlhf(database: str) -> None:
    with api_client(database, rubrics=[]) as (client, keys):
        answer = client.post(
            "/v1/rewards",
            headers=bearer(keys["score"]),
            json={
                "judge": "scripted-http",
                "items": [{"prompt_id": "p-fc", "completion": t} for t in RESPONSES.values()],
            },
        )
        assert answer.status_code == 200, answer.text
        results = answer.json()["results"]
        assert_classes(
            {
                case: {"value": r["reward"], "status": r["status"], "failures": r["failures"]}
                for case, r in zip(RESPONSES, results, strict=True)
            }
        )
        openrlhf = client.post(
            f"/v1/openrlhf/reward?judge=scripted-http&api_key={keys['score']}",
            json={
                "query": [PROMPT + t for t in RESPONSES.values()],
                "prompts": [PROMPT] * len(RESPONSES),
                "labels": ["p-fc"] * len(RESPONSES),
            },
        )
        assert openrlhf.status_code == 200, openrlhf.text  # never 503 for a masked score
        body = openrlhf.json()
        mean = (OK + WORST) / 2  # the default: masked samples get the batch's mean
        assert body["rewards"] == pytest.approx([OK, mean, mean, WORST])
        assert body["extra_logs"]["rubric_masked"] == [0.0, 1.0, 1.0, 0.0]
        assert body["extra_logs"]["rubric_failures_response"] == [0.0, 0.0, 0.0, 2.0]
        fixed = client.post(
            f"/v1/openrlhf/reward?judge=scripted-http&masked=-0.5&api_key={keys['score']}",
            json={"query": [PROMPT + RESPONSES["judge"]], "prompts": [PROMPT], "labels": ["p-fc"]},
        )
        assert fixed.status_code == 200 and fixed.json()["rewards"] == [-0.5]
        metrics = client.get("/metrics", headers=bearer(keys["read"])).text
        assert 'rubricsvc_judgment_failures_total{failure_class="judge",judge="scripted-http"}' in (
            metrics
        )


def test_trainer_reward_function(database: str) -> None:
    require_module("trl", "trainer")
    from trainer.config import ScorerSettings
    from trainer.rewards import RubricReward

    logged: dict[str, float] = {}
    prompts = [PROMPT] * len(RESPONSES)
    completions = list(RESPONSES.values())
    settings = ScorerSettings(judge="scripted-http", database_url=database)
    reward = RubricReward(settings)
    rewards = reward(prompts, completions, prompt_id=["p-fc"] * 4, log_metric=logged.__setitem__)
    assert rewards[0] == pytest.approx(OK)
    assert rewards[1] is None and rewards[2] is None  # dropped: no advantage, run goes on
    assert rewards[3] == pytest.approx(WORST)
    assert logged["rubric/masked_fraction"] == pytest.approx(0.5)
    assert logged["rubric/failures/response"] == 2.0
    assert logged["rubric/failures/judge"] == 2.0
    mean = RubricReward(settings.model_copy(update={"masked_reward": "mean"}))
    filled = mean(prompts, completions, prompt_id=["p-fc"] * 4)
    assert filled == pytest.approx([OK, (OK + WORST) / 2, (OK + WORST) / 2, WORST])


@pytest.mark.model
def test_a_response_longer_than_the_embedded_judges_context_gets_the_worst_value(
    sqlite_url: str, tmp_path: Any
) -> None:
    """The real model and tokenizer: the embedded judge reads at most 8,192 tokens."""
    import json

    from tests.requirements import prepared_model_dir

    prepared_model_dir()
    approve_rubrics(sqlite_url, RUBRIC, reviewer="t")
    records = [
        {"external_id": "padded", "prompt_external_id": "p-fc", "text": "Sleep well. " * 4000},
        {"external_id": "short", "prompt_external_id": "p-fc", "text": RESPONSES["ok"]},
    ]
    path = tmp_path / "completions.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert run_cli("completions", "add", str(path), database_url=sqlite_url).code == 0
    result = run_cli("score", "--judge", "embedded", "--json", database_url=sqlite_url)
    assert result.code == 0, result.stderr
    scores = {s["completion_external_id"]: s for s in result.json()["scores"]}
    padded = scores["padded"]
    assert padded["value"] == pytest.approx(WORST) and padded["failures"]["response"] == 2
    assert all(c["status"] == "unjudgeable" for c in padded["criteria"])
    assert "exceeds the model's context" in padded["criteria"][0]["error"]
    assert scores["short"]["failures"] == {"infrastructure": 0, "judge": 0, "response": 0}
    masked = run_cli(
        "score", "--judge", "embedded", "--json", "--response-failure", "mask",
        database_url=sqlite_url,
    )  # fmt: skip
    by_id = {s["completion_external_id"]: s for s in masked.json()["scores"]}
    assert by_id["padded"]["value"] is None and by_id["padded"]["status"] == "masked"
