"""A judge or generator behind the API that fails: 503 with Retry-After when trying again may
help, 502 when it cannot, never 400 (the client's request was fine) and never a reward of 0.

The backend is the real OpenAI client talking to a real HTTP server on loopback that answers
every request with an error status.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rubricsvc.backends import create_backend
from rubricsvc.db import make_engine, session_scope
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.versions import approve, save_rubric
from rubricsvc.scoring.judge_configs import ensure_judge_config
from tests.api_harness import api_client, bearer
from tests.fake_openai import FakeOpenAI, serving
from tests.requirements import require_module

require_module("openai", "openai")

RUBRIC: dict[str, Any] = {
    "name": "t/judge-down",
    "prompt": {"external_id": "p-down", "text": "How can I sleep better?"},
    "criteria": [
        {"text": "Recommends a regular sleep schedule", "weight": 2},
        {"text": "Recommends sleeping pills without a doctor", "weight": -1},
    ],
}


class FailingServer(FakeOpenAI):
    """Answers every request with ``status`` (and the headers a test sets)."""

    def __init__(self, status: int) -> None:
        super().__init__(lambda _body: (status, {"error": {"message": f"status {status}"}}))


@pytest.fixture
def overloaded() -> Iterator[FailingServer]:
    with serving(FailingServer(503)) as server:
        server.headers = {"Retry-After": "7"}
        yield server


def http_judge(server: FailingServer) -> JudgeSpec:
    return JudgeSpec(
        name="http-judge",
        backend="openai",
        model="fake",
        mode="criterion-text",
        retries=1,
        retry_backoff=0.0,
        backend_options={"base_url": server.base_url, "timeout": 5, "api_key_env": None},
    )


def with_judge(url: str, spec: JudgeSpec) -> str:
    engine = make_engine(url)
    with session_scope(engine) as session:
        approve(session, save_rubric(session, RubricSpec.model_validate(RUBRIC)).version, "t")
        ensure_judge_config(session, spec)
    engine.dispose()
    return url


def generator_at(server: FailingServer) -> Any:
    """The server's generator (and any judge) built as an OpenAI client of ``server``."""
    return lambda _spec: create_backend(
        "openai", model="fake", base_url=server.base_url, timeout=5, api_key_env=None
    )


def test_rewards_answer_503_with_retry_after_when_the_judge_is_down(
    sqlite_url: str, overloaded: FailingServer
) -> None:
    url = with_judge(sqlite_url, http_judge(overloaded))
    with api_client(url, rubrics=[]) as (client, keys):
        items = [{"prompt_id": "p-down", "completion": "Keep a schedule."}]
        answer = client.post(
            "/v1/rewards",
            headers=bearer(keys["score"]),
            json={"judge": "http-judge", "items": items},
        )
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"] == "7"  # what the judge's server asked for
        error = answer.json()["error"]
        assert error["code"] == "judge_unavailable"
        assert "503" in error["message"]  # the judge's own status, passed on
        assert len(overloaded.bodies) == 4  # two criteria, each tried twice: it was asked

        # The OpenRLHF route never refuses a batch: the masked rewards get the configured value.
        openrlhf = client.post(
            f"/v1/openrlhf/reward?judge=http-judge&masked=-1&api_key={keys['score']}",
            json={"query": ["Keep a schedule."], "prompts": [""], "labels": ["p-down"]},
        )
        assert openrlhf.status_code == 200, openrlhf.text
        assert openrlhf.json()["rewards"] == [-1.0]


@pytest.mark.parametrize(
    ("status", "answered", "code", "retry_after", "requests"),
    [
        # Overloaded: tried, then retried once after a backoff; its Retry-After is passed on.
        (503, 503, "judge_unavailable", "7", 2),
        # No such model: retrying cannot help, and a 404 is not retried.
        (404, 502, "judge_failed", None, 1),
    ],
)
def test_generate_answers_503_or_502_when_the_generator_fails(
    sqlite_url: str, status: int, answered: int, code: str, retry_after: str | None, requests: int
) -> None:
    with serving(FailingServer(status)) as server:
        server.headers = {"Retry-After": "7"}
        with api_client(sqlite_url, build_backend=generator_at(server)) as (client, keys):
            answer = client.post(
                "/v1/rubrics/generate",
                headers=bearer(keys["author"]),
                json={"prompt_ids": ["api-sea"], "retries": 1},
            )
            assert answer.status_code == answered, answer.text
            assert answer.headers.get("Retry-After") == retry_after
            assert answer.json()["error"]["code"] == code
            assert len(server.bodies) == requests
            listed = client.get("/v1/rubrics", headers=bearer(keys["read"])).json()
            assert [v["rubric"] for v in listed["items"]] == ["api/blue-sea"]  # no draft stored


def test_a_lone_masked_openrlhf_rollout_gets_its_prompts_mean_so_far(sqlite_url: str) -> None:
    """OpenRLHF sends one rollout per request, so "the mean of the batch's other rewards"
    has nothing to take the mean of: a masked rollout gets the mean of its prompt's rewards so
    far under the same judge (zero advantage in expectation), or for a prompt with none yet the
    judge's mean over every prompt; 0.0 only for a judge with no score at all."""
    from rubricsvc.backends.base import BackendError
    from rubricsvc.backends.scripted import ScriptedBackend
    from rubricsvc.backends.types import ChoiceRequest

    judge = {"down": False}

    def probs(request: ChoiceRequest) -> dict[str, float] | BackendError:
        if judge["down"]:
            return BackendError("the judge's host is unreachable", retryable=False)
        yes = 0.9 if "schedule" in str(request.chat) else 0.3
        return {"Yes": yes, "No": 1 - yes}

    backend = ScriptedBackend(probs=probs)
    other = {**RUBRIC, "name": "t/other", "prompt": {"external_id": "p-other", "text": "Hi?"}}
    with api_client(sqlite_url, rubrics=[RUBRIC, other], build_backend=lambda _: backend) as (
        client,
        keys,
    ):

        def one_rollout(label: str, response: str) -> dict[str, Any]:
            answer = client.post(
                f"/v1/openrlhf/reward?api_key={keys['score']}",
                json={"query": [response], "prompts": [""], "labels": [label]},
            )
            assert answer.status_code == 200, answer.text
            body: dict[str, Any] = answer.json()
            return body

        first = one_rollout("p-down", "Keep a regular schedule.")["rewards"][0]
        second = one_rollout("p-down", "Read a book.")["rewards"][0]
        assert first != second
        judge["down"] = True
        masked = one_rollout("p-down", "Avoid screens at night.")
        assert masked["extra_logs"]["rubric_masked"] == [1.0]
        assert masked["rewards"] == [pytest.approx((first + second) / 2)]
        # A prompt nothing has been scored for yet: the judge's mean over every prompt (here
        # p-down's two scores) stands in for its group's, counted as masked.
        fresh = one_rollout("p-other", "Hello.")
        assert fresh["rewards"] == [pytest.approx((first + second) / 2)]
        assert fresh["extra_logs"]["rubric_masked"] == [1.0]
        # A judge with no score at all under the aggregation asked for: the last resort, 0.0.
        answer = client.post(
            f"/v1/openrlhf/reward?api_key={keys['score']}&aggregation=healthbench",
            json={"query": ["Hello again."], "prompts": [""], "labels": ["p-other"]},
        )
        assert answer.status_code == 200, answer.text
        assert (answer.json()["rewards"], answer.json()["extra_logs"]["rubric_masked"]) == (
            [0.0],
            [1.0],
        )
