"""Who caused a failed judgment decides what the score does with it, on every surface.

One judge behind a real OpenAI-compatible HTTP server on loopback, scripted by what it is
shown: an endpoint answering 503 (infrastructure: masked), a reply with no verdict whenever the
response carries a marker (the response provoked it: the canary call without the response
parses, so the criteria's worst values), a response longer than the judge's context (vLLM's own
400 answer: response, worst values), a healthy answer for contrast; and a prompt on which the
judge answers garbage whatever the response (the canary fails too: the judge's own failure,
masked and alarmed on). The same cases go through the CLI, the API's reward route, the trainer's
reward function and the OpenRLHF route, and through every verdict mode that decodes or reads
probabilities: criterion-text, multi-criterion, holistic, pairwise and group.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api_harness import api_client, bearer
from tests.cli_runner import run_cli
from tests.fake_openai import (
    FakeOpenAI,
    chat_completion,
    logprobs_completion,
    openai_judge,
    serving,
)
from tests.helpers import approve_rubrics
from tests.requirements import require_module

require_module("openai", "openai")

PROMPT = "How can I sleep better?"
CRITERIA = [
    {"text": "Recommends a regular sleep schedule", "weight": 2},
    {"text": "Recommends sleeping pills without a doctor", "weight": -1},
]
RUBRIC: dict[str, Any] = {
    "name": "t/failure-classes",
    "prompt": {"external_id": "p-fc", "text": PROMPT},
    "criteria": CRITERIA,
}
# A prompt the judge cannot answer about, whatever the response: its own failure.
BROKEN_PROMPT = "Marker-broken: how can I sleep better?"
BROKEN_RUBRIC: dict[str, Any] = {
    "name": "t/failure-classes-broken",
    "prompt": {"external_id": "p-broken", "text": BROKEN_PROMPT},
    "criteria": CRITERIA,
}
# The response decides what the scripted judge does; "long" stands for a response that
# overflows the judge's context, answered as vLLM's server answers one.
RESPONSES = {
    "ok": "Go to bed at the same time every day.",
    "infrastructure": "Marker-503: go to bed early.",
    "provoked": "Marker-garbage: go to bed early.",
    "response": "Marker-long: " + "sleep " * 400,
}
# What the judge's server says to a prompt over its context: vLLM's two messages, or nothing
# at all (a server that would take it: only counting before sending catches it).
OVERFLOW_ANSWERS: dict[str, tuple[int, dict[str, Any]]] = {
    "tokens": (
        400,
        {
            "error": {
                "message": "This model's maximum context length is 2048 tokens. However, your "
                "prompt contains at least 2049 input tokens, which exceeds this limit even "
                "without any output tokens. Please reduce the length of the input prompt.",
                "type": "BadRequestError",
            }
        },
    ),
    "characters": (
        400,
        {
            "error": {
                "message": "This model's maximum context length is 2048 tokens. However, your "
                "prompt contains 9000 characters (more than 8192 characters, which is the upper "
                "bound for 2047 input tokens). Please reduce the length of the input prompt.",
                "type": "BadRequestError",
            }
        },
    ),
    "silent": (200, chat_completion("It does.\nVERDICT: YES")),
}
# A character bound that the long response passes and every other prompt here stays under.
MAX_PROMPT_CHARS = 2000
WORST = (2 * 0.0 - 1 * 1.0) / 3  # rar with the criterion unmet and the pitfall present
OK = (2 * 1.0 - 1 * 1.0) / 3  # the scripted judge says yes to both
GARBAGE = "lorem ipsum, no verdict here"
# Choice probabilities with nothing on any verdict token: below the verdict-mass floor.
NO_VERDICT_PROBS = {"lorem": 0.9, "ipsum": 0.1}
HOLISTIC_SCORE = 7


class ScriptedJudge(FakeOpenAI):
    """Answers each request in the form its mode asks for, unless a marker says otherwise."""

    def __init__(self, overflow: str = "tokens") -> None:
        super().__init__(self._answer)
        self.overflow = overflow  # how it answers a prompt over its context (OVERFLOW_ANSWERS)

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        text = " ".join(str(m["content"]) for m in body["messages"])
        if "Marker-503" in text:
            return 503, {"error": {"message": "overloaded", "type": "server_error"}}
        if "Marker-long" in text:
            return OVERFLOW_ANSWERS[self.overflow]
        broken = "Marker-garbage" in text or "Marker-broken" in text
        if body.get("logprobs"):  # a choice: criterion-prob, pairwise
            if broken:
                return 200, logprobs_completion(NO_VERDICT_PROBS)
            return 200, logprobs_completion({"Yes": 0.4, "1": 0.2, "2": 0.2, "0": 0.2})
        if broken:
            return 200, chat_completion(GARBAGE)
        schema = body.get("response_format", {}).get("json_schema", {}).get("schema")
        if schema is not None:  # group: a score per response shown
            return 200, chat_completion(json.dumps({n: "5" for n in schema["properties"]}))
        if "SCORE:" in text:  # holistic
            return 200, chat_completion(f"Reasonable.\nSCORE: {HOLISTIC_SCORE}")
        example = re.search(r"e\.g\. \{([^}]*)\}", text)
        if example is not None:  # multi-criterion: one answer per numbered criterion
            numbers = re.findall(r'"(\d+)":', example.group(1))
            return 200, chat_completion(json.dumps({n: "yes" for n in numbers}))
        return 200, chat_completion("It does.\nVERDICT: YES")


@pytest.fixture
def judge_server() -> Iterator[ScriptedJudge]:
    with serving(ScriptedJudge()) as server:
        yield server


@pytest.fixture
def database(sqlite_url: str, judge_server: ScriptedJudge) -> str:
    judge = openai_judge(judge_server, "scripted-http", model="scripted")
    approve_rubrics(sqlite_url, RUBRIC, BROKEN_RUBRIC, judges=[judge], reviewer="t")
    return sqlite_url


def assert_classes(by_case: dict[str, dict[str, Any]]) -> None:
    """``by_case``: each case's reward (or score), status and failures by class."""
    ok, infra, provoked, response = (by_case[c] for c in RESPONSES)
    assert ok["value"] == pytest.approx(OK) and ok["status"] == "ok"
    assert infra["value"] is None and infra["status"] == "masked"
    assert infra["failures"] == {"infrastructure": 2, "judge": 0, "response": 0}
    # The judge answers the canary without this response: the response pays for its failure.
    assert provoked["value"] == pytest.approx(WORST) and provoked["status"] != "masked"
    assert provoked["failures"] == {"infrastructure": 0, "judge": 0, "response": 2}
    assert response["value"] == pytest.approx(WORST)
    assert response["failures"] == {"infrastructure": 0, "judge": 0, "response": 2}


def test_cli(database: str, tmp_path: Any) -> None:
    records = [
        {"external_id": case, "prompt_external_id": "p-fc", "text": text, "source": "cli"}
        for case, text in RESPONSES.items()
    ]
    records.append(
        {"external_id": "broken", "prompt_external_id": "p-broken", "text": RESPONSES["ok"]}
    )
    path = tmp_path / "completions.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert run_cli("completions", "add", str(path), database_url=database).code == 0
    result = run_cli("score", "--judge", "scripted-http", "--json", database_url=database)
    assert result.code == 0, result.stderr
    report = result.json()
    assert report["failures"] == {"infrastructure": 2, "judge": 2, "response": 4}
    scores = {s["completion_external_id"]: s for s in report["scores"]}
    assert_classes(
        {
            case: {"value": s["value"], "status": s["status"], "failures": s["failures"]}
            for case, s in scores.items()
        }
    )
    # The judge fails on the broken prompt with the canary too: its own failure, masked.
    broken = scores["broken"]
    assert broken["value"] is None and broken["status"] == "masked"
    assert broken["failures"] == {"infrastructure": 0, "judge": 2, "response": 0}
    assert "fails without the judged text too" in broken["criteria"][0]["error"]
    provoked = scores["provoked"]["criteria"][0]
    assert provoked["status"] == "unjudgeable" and "without it (canary)" in provoked["error"]
    # The judge's own failures are a quarter of this run's judgments: above the alarm.
    assert report["alarms"] and "judge's own reply" in report["alarms"][0]
    printed = run_cli("score", "--judge", "scripted-http", database_url=database)
    # Response failures are settled; the masked ones are tried again, canary and all.
    assert "(2 infrastructure, 2 judge)" in printed.stdout
    assert "alarm" in printed.stderr
    exported = run_cli(
        "scores", "export", "--judge", "scripted-http", "--aggregation", "rar",
        database_url=database,
    )  # fmt: skip
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert {line["completion_external_id"]: line["failures"]["response"] for line in lines} == {
        "ok": 0, "infrastructure": 0, "provoked": 2, "response": 2, "broken": 0,
    }  # fmt: skip


def test_the_canary_is_asked_once_per_question(
    database: str, judge_server: ScriptedJudge, tmp_path: Any
) -> None:
    """One extra call per failed judgment; a second response that breaks the same question is
    attributed from the kept canary, with no call for it."""
    records = [
        {"external_id": f"provoked-{n}", "prompt_external_id": "p-fc", "text": text}
        for n, text in enumerate([RESPONSES["provoked"], RESPONSES["provoked"] + " Now."])
    ]
    path = tmp_path / "completions.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert run_cli("completions", "add", str(path), database_url=database).code == 0
    result = run_cli("score", "--judge", "scripted-http", "--json", database_url=database)
    report = result.json()
    assert report["failures"] == {"infrastructure": 0, "judge": 0, "response": 4}
    canaries = [b for b in judge_server.bodies if "Marker-garbage" not in json.dumps(b)]
    # Two criteria per response, each asked once (a greedy reply is not asked again), and one
    # canary per criterion, shared by both responses.
    assert len(judge_server.bodies) == 2 * 2 + 2
    assert len(canaries) == 2


def _items(*texts: str, prompt_id: str = "p-fc") -> list[dict[str, Any]]:
    return [{"prompt_id": prompt_id, "completion": text} for text in texts]


def test_api_rewards_and_openrlhf(database: str) -> None:
    with api_client(database, rubrics=[]) as (client, keys):
        answer = client.post(
            "/v1/rewards",
            headers=bearer(keys["score"]),
            json={"judge": "scripted-http", "items": _items(*RESPONSES.values())},
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
        # The default: masked samples get the batch's mean; the provoked one is no longer masked.
        mean = (OK + WORST + WORST) / 3
        assert body["rewards"] == pytest.approx([OK, mean, WORST, WORST])
        assert body["extra_logs"]["rubric_masked"] == [0.0, 1.0, 0.0, 0.0]
        assert body["extra_logs"]["rubric_failures_response"] == [0.0, 0.0, 2.0, 2.0]
        broken = client.post(
            f"/v1/openrlhf/reward?judge=scripted-http&masked=-0.5&api_key={keys['score']}",
            json={
                "query": [BROKEN_PROMPT + RESPONSES["ok"]],
                "prompts": [BROKEN_PROMPT],
                "labels": ["p-broken"],
            },
        )
        assert broken.status_code == 200 and broken.json()["rewards"] == [-0.5]
        assert broken.json()["extra_logs"]["rubric_failures_judge"] == [2.0]
        metrics = client.get("/metrics", headers=bearer(keys["read"])).text
        assert 'rubricsvc_judgment_failures_total{failure_class="judge",judge="scripted-http"}' in (
            metrics
        )


# mode -> (the provoked response's reward, a healthy response's reward) when they are scored
# together with another healthy response.
PER_RESPONSE_MODES = {
    "criterion-text": (WORST, OK),
    "multi-criterion": (WORST, OK),
    # One judgment of the whole rubric: its worst value is the bottom of the scale.
    "holistic": (0.0, (HOLISTIC_SCORE - 1) / 9),
}
# Comparisons: the provoked response loses every comparison it broke (0) and the healthy
# ones win those and tie each other: (1 + 0.5) / 2. The group judges every member 5/10; the
# provoked member gets 0 and the others their scores from the call without it.
COMPARING_MODES = {"pairwise": (0.0, 0.75), "group": (0.0, 0.5)}


HEALTHY = (RESPONSES["ok"], "Keep a dark, cool bedroom.")


def _charged_beside_two_healthy(client: Any, key: str, judge: str, mode: str, odd: str) -> None:
    """``odd`` rewarded in ``mode`` beside two healthy responses: it is charged (its value in
    PER_RESPONSE_MODES or COMPARING_MODES, a response failure, never masked), and the two
    healthy ones score as they would alone, with no failure."""
    charged_value, healthy_value = (PER_RESPONSE_MODES | COMPARING_MODES)[mode]
    answer = client.post(
        "/v1/rewards",
        headers=bearer(key),
        json={"judge": judge, "mode": mode, "items": _items(*HEALTHY, odd)},
    )
    assert answer.status_code == 200, answer.text
    first, second, charged = answer.json()["results"]
    assert charged["reward"] == pytest.approx(charged_value), charged
    assert charged["status"] != "masked"
    assert charged["failures"]["response"] > 0
    assert charged["failures"]["infrastructure"] == charged["failures"]["judge"] == 0
    for healthy in (first, second):
        assert healthy["reward"] == pytest.approx(healthy_value), healthy
        assert healthy["failures"] == {"infrastructure": 0, "judge": 0, "response": 0}


@pytest.mark.parametrize("mode", [*PER_RESPONSE_MODES, *COMPARING_MODES])
def test_every_mode_charges_a_provoked_failure_to_its_response(database: str, mode: str) -> None:
    with api_client(database, rubrics=[]) as (client, keys):
        _charged_beside_two_healthy(
            client, keys["score"], "scripted-http", mode, RESPONSES["provoked"]
        )
        # On a prompt the judge cannot answer about at all, nothing is charged: masked.
        broken = client.post(
            "/v1/rewards",
            headers=bearer(keys["score"]),
            json={
                "judge": "scripted-http",
                "mode": mode,
                "items": _items(*HEALTHY, prompt_id="p-broken"),
            },
        )
        assert broken.status_code == 200, broken.text
        for result in broken.json()["results"]:
            assert result["reward"] is None and result["status"] == "masked"
            assert result["failures"]["judge"] > 0 and result["failures"]["response"] == 0


@pytest.mark.parametrize("mode", [*PER_RESPONSE_MODES, *COMPARING_MODES])
def test_every_mode_charges_a_request_past_max_request_chars_to_its_response(
    sqlite_url: str, mode: str
) -> None:
    """The judge's own bound on a request's judged text: the long response's judgments are never
    sent and it is charged as if it had overflowed the judge's context; the healthy ones in the
    same batch are judged (a group again without the long one) and score as they would."""
    with serving(ScriptedJudge()) as server:
        judge = openai_judge(server, "plain", model="scripted")
        bounded = judge.model_copy(update={"name": "bounded", "max_request_chars": 2000})
        approve_rubrics(sqlite_url, RUBRIC, judges=[bounded])
        with api_client(sqlite_url, rubrics=[]) as (client, keys):
            _charged_beside_two_healthy(
                client, keys["score"], "bounded", mode, RESPONSES["response"]
            )
        assert not [b for b in server.bodies if "Marker-long" in json.dumps(b)]
        assert server.bodies  # the others were sent


def test_a_group_too_long_only_together_charges_every_member(sqlite_url: str) -> None:
    """Three answers each of which fits beside two canaries, and together pass the bound: as
    attribution reads a group that fails only whole, each is a culprit (the worst score, 0),
    not the longest alone; nothing is sent."""
    answers = [f"Marker-long {n}: " + "rest well " * 100 for n in range(3)]  # ~1,015 each
    with serving(ScriptedJudge()) as server:
        judge = openai_judge(server, "plain", model="scripted")
        bounded = judge.model_copy(update={"name": "bounded", "max_request_chars": 2000})
        approve_rubrics(sqlite_url, RUBRIC, judges=[bounded])
        with api_client(sqlite_url, rubrics=[]) as (client, keys):
            answer = client.post(
                "/v1/rewards",
                headers=bearer(keys["score"]),
                json={"judge": "bounded", "mode": "group", "items": _items(*answers)},
            )
        assert answer.status_code == 200, answer.text
        for result in answer.json()["results"]:
            assert result["reward"] == 0.0 and result["status"] != "masked", result
            assert result["failures"]["response"] > 0
        assert server.bodies == []


@pytest.mark.parametrize("overflow", OVERFLOW_ANSWERS)
def test_an_overflowing_response_gets_the_worst_value_whatever_the_server_says(
    sqlite_url: str, overflow: str
) -> None:
    """vLLM's token-bound and character-bound answers are recognised; a judge given a character
    bound counts before sending, so a server that would say nothing never sees the response."""
    with serving(ScriptedJudge(overflow)) as server:
        plain = openai_judge(server, "plain", model="scripted")
        options = {**plain.backend_options, "max_prompt_chars": MAX_PROMPT_CHARS}
        bounded = plain.model_copy(update={"name": "bounded", "backend_options": options})
        approve_rubrics(sqlite_url, RUBRIC, judges=[plain, bounded])
        texts = (RESPONSES["ok"], RESPONSES["response"])
        with api_client(sqlite_url, rubrics=[]) as (client, keys):
            for name in ("plain", "bounded"):
                if overflow == "silent" and name == "plain":
                    continue  # nothing to recognise: only the bound catches it
                answer = client.post(
                    "/v1/rewards",
                    headers=bearer(keys["score"]),
                    json={"judge": name, "items": _items(*texts)},
                )
                assert answer.status_code == 200, answer.text
                ok, long = answer.json()["results"]
                assert ok["reward"] == pytest.approx(OK)
                assert long["reward"] == pytest.approx(WORST), (name, long)
                assert long["failures"] == {"infrastructure": 0, "judge": 0, "response": 2}
        if overflow == "silent":
            # Counted before sending: the long response never reached the server.
            assert not [b for b in server.bodies if "Marker-long" in json.dumps(b)]
            assert server.bodies  # the short one did


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
    assert rewards[1] is None  # dropped: no advantage, run goes on
    assert rewards[2] == pytest.approx(WORST)  # provoked: charged, never dropped
    assert rewards[3] == pytest.approx(WORST)
    assert logged["rubric/masked_fraction"] == pytest.approx(0.25)
    assert logged["rubric/failures/response"] == 4.0
    assert logged["rubric/failures/infrastructure"] == 2.0
    mean = RubricReward(settings.model_copy(update={"masked_reward": "mean"}))
    filled = mean(prompts, completions, prompt_id=["p-fc"] * 4)
    assert filled == pytest.approx([OK, (OK + 2 * WORST) / 3, WORST, WORST])


@pytest.mark.model
def test_a_response_longer_than_the_embedded_judges_context_gets_the_worst_value(
    sqlite_url: str, tmp_path: Any
) -> None:
    """The real model and tokenizer: the embedded judge reads at most 8,192 tokens."""
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
