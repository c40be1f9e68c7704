"""The API checks before it spends: keys before bodies, per-key rate limits, a bound on the work
of a request, judges loaded once into a bounded set, keys kept out of access logs, and numbers
no route can use refused with 422 naming the field.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.requirements import require_module

require_module("fastapi", "api")

import httpx  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

from rubricsvc.api import create_app  # noqa: E402
from rubricsvc.api.logs import REDACTED, RedactSecrets  # noqa: E402
from rubricsvc.api.ratelimit import MemoryRateLimiter  # noqa: E402
from rubricsvc.backends.scripted import ScriptedBackend  # noqa: E402
from rubricsvc.backends.types import ChoiceRequest  # noqa: E402
from rubricsvc.db import make_engine, session_scope  # noqa: E402
from rubricsvc.judging.config import JudgeSpec, VerdictMode  # noqa: E402
from rubricsvc.judging.modes import get_mode  # noqa: E402
from rubricsvc.models import Completion, Judgment, Score, ScoreChunk, ScoreJob  # noqa: E402
from rubricsvc.scoring.judge_configs import ensure_judge_config  # noqa: E402
from tests.api_harness import (  # noqa: E402
    WORD_RUBRIC,
    BodyCounter,
    api_client,
    bearer,
    settings_for,
    wait_for_job,
)
from tests.servers import free_port  # noqa: E402

SEA = "api-sea"
SIXTEEN_MIB = 16 * 1024 * 1024
REDIS_URL = os.environ.get("RUBRICSVC_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")

# Judge criteria: scoring them needs a backend (a scripted one here).
JUDGED_RUBRIC: dict[str, Any] = {
    "name": "api/judged",
    "prompt": {"external_id": "api-judged", "text": "Say something kind."},
    "criteria": [{"text": "Is kind", "weight": 2}, {"text": "Is brief", "weight": 1}],
}
DRAFT = json.dumps(
    {
        "criteria": [
            {"text": "Answers the question", "category": "essential", "theme": "coverage"},
            {"text": "States no falsehood", "category": "important", "theme": "accuracy"},
        ]
    }
)


def _counts(database_url: str) -> dict[str, int]:
    engine = make_engine(database_url)
    with session_scope(engine) as session:
        found = {
            model.__tablename__: session.scalar(select(func.count()).select_from(model)) or 0
            for model in (Completion, Judgment, Score, ScoreJob, ScoreChunk)
        }
    engine.dispose()
    return found


# --- keys are checked before a body is read -------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/rewards", "/v1/openrlhf/reward", "/v1/completions"])
def test_a_refused_key_leaves_a_16_mib_body_unread(sqlite_url: str, path: str) -> None:
    with api_client(sqlite_url, wrap=BodyCounter) as (client, keys):
        counter = client.app
        assert isinstance(counter, BodyCounter)
        body = b"[" + b" " * (SIXTEEN_MIB - 2) + b"]"  # 16 MiB: at the size limit, not over it
        json_type = {"content-type": "application/json"}
        refusals = [
            ({}, {}, 401),
            (bearer("rsk_not-a-key"), {}, 401),
            (bearer(keys["read"]), {}, 403),  # a live key without the route's scope
        ]
        if path == "/v1/openrlhf/reward":  # the route that takes ?api_key=
            refusals += [
                ({}, {"api_key": "rsk_not-a-key"}, 401),
                ({}, {"api_key": keys["read"]}, 403),
            ]
        for headers, params, status in refusals:
            response = client.post(
                path, content=body, params=params, headers={**json_type, **headers}
            )
            assert response.status_code == status, response.text
            assert response.json()["error"]["code"] in {"unauthorized", "forbidden"}
        assert counter.received == 0  # not one byte of five 16 MiB bodies reached the app
        metrics = client.get("/metrics", headers=bearer(keys["read"])).text
        assert f'route="{path}",status="401"' in metrics  # refusals are counted by route

        # With the right key the same body is read (and, being no valid request, refused).
        admitted = client.post(path, content=body, headers={**json_type, **bearer(keys["admin"])})
        assert admitted.status_code == 422, admitted.text
        assert counter.received == SIXTEEN_MIB


def test_the_openrlhf_route_still_takes_its_key_from_the_query(sqlite_url: str) -> None:
    with api_client(sqlite_url) as (client, keys):
        response = client.post(
            "/v1/openrlhf/reward",
            params={"api_key": keys["score"]},
            json={"query": ["Q: The sea is blue."], "prompts": ["Q: "], "labels": [SEA]},
        )
        assert response.status_code == 200, response.text
        assert response.json()["rewards"] == [pytest.approx(1.0)]
        # The query key is only for that route.
        other = client.get("/v1/prompts", params={"api_key": keys["admin"]})
        assert other.status_code == 401


# --- rate limits ----------------------------------------------------------------------------


def _exhaust(clients: list[TestClient], auth: dict[str, str], times: int) -> list[int]:
    return [
        clients[i % len(clients)].get("/v1/prompts", headers=auth).status_code for i in range(times)
    ]


def _assert_429(response: httpx.Response, per_minute: int) -> None:
    assert response.status_code == 429, response.text
    assert response.json()["error"]["code"] == "too_many_requests"
    assert 1 <= int(response.headers["retry-after"]) <= 60 / per_minute


def test_each_key_is_rate_limited_on_every_route(sqlite_url: str) -> None:
    with api_client(sqlite_url, rate_limit_per_minute=3, wrap=BodyCounter) as (client, keys):
        read = bearer(keys["read"])
        assert _exhaust([client], read, 3) == [200, 200, 200]
        _assert_429(client.get("/v1/prompts", headers=read), 3)
        _assert_429(client.get("/metrics", headers=read), 3)

        score = bearer(keys["score"])  # another key: a bucket of its own
        items = {"items": [{"prompt_id": SEA, "completion": "Blue sea."}]}
        for _ in range(3):
            assert client.post("/v1/rewards", json=items, headers=score).status_code == 200
        counter = client.app
        assert isinstance(counter, BodyCounter)
        received = counter.received
        _assert_429(client.post("/v1/rewards", json=items, headers=score), 3)
        assert counter.received == received  # refused before its body was read
        openrlhf = client.post(
            "/v1/openrlhf/reward",
            params={"api_key": keys["score"]},
            json={"query": ["Q: x"], "prompts": ["Q: "], "labels": [SEA]},
        )
        _assert_429(openrlhf, 3)
        assert client.get("/healthz").status_code == 200  # no key, no limit
        assert client.get("/v1/prompts", headers=bearer(keys["admin"])).status_code == 200


def test_the_bucket_refills_at_the_rate_per_minute() -> None:
    now = [0.0]
    limiter = MemoryRateLimiter(per_minute=6, clock=lambda: now[0])  # one every 10 s
    assert [limiter.take(1) for _ in range(6)] == [0.0] * 6
    assert limiter.take(1) == pytest.approx(10.0)
    assert limiter.take(2) == 0.0  # keys do not share a bucket
    now[0] = 5.0
    assert limiter.take(1) == pytest.approx(5.0)
    now[0] = 10.0
    assert limiter.take(1) == 0.0
    assert limiter.take(1) == pytest.approx(10.0)


def _clear_buckets(client: Any) -> None:
    for name in client.scan_iter("rubricsvc:ratelimit:key:*"):
        client.delete(name)


def test_rate_limits_are_shared_through_redis(sqlite_url: str, redis_client: Any) -> None:
    _clear_buckets(redis_client)
    limits = {"rate_limit_per_minute": 4, "rate_limit_url": REDIS_URL}
    # The second client is another server process on the same database and Redis.
    with (
        api_client(sqlite_url, **limits) as (first, keys),
        TestClient(create_app(settings_for(sqlite_url, **limits))) as second,
    ):
        read = bearer(keys["read"])
        assert _exhaust([first, second], read, 4) == [200, 200, 200, 200]
        _assert_429(second.get("/v1/prompts", headers=read), 4)
        _assert_429(first.get("/v1/prompts", headers=read), 4)
        assert second.get("/v1/prompts", headers=bearer(keys["admin"])).status_code == 200
    buckets = [name.decode() for name in redis_client.scan_iter("rubricsvc:ratelimit:key:*")]
    assert buckets and all(redis_client.ttl(name) > 0 for name in buckets)  # they expire
    _clear_buckets(redis_client)


def test_without_redis_each_process_still_limits(sqlite_url: str, caplog: Any) -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"
    with api_client(sqlite_url, rate_limit_per_minute=2, rate_limit_url=closed) as (client, keys):
        read = bearer(keys["read"])
        with caplog.at_level(logging.WARNING, logger="rubricsvc.api.ratelimit"):
            assert _exhaust([client], read, 2) == [200, 200]
        _assert_429(client.get("/v1/prompts", headers=read), 2)
        assert "counted in this process only" in caplog.text


# --- a bound on the work of a request -------------------------------------------------------


def test_a_reward_request_past_the_work_bound_is_413_and_stores_nothing(database_url: str) -> None:
    # WORD_RUBRIC has 2 criteria: 2 completions are 4 judgments.
    with api_client(database_url, max_reward_judgments=3) as (client, keys):
        score = bearer(keys["score"])
        before = _counts(database_url)
        items = [{"prompt_id": SEA, "completion": f"Blue wave {i}."} for i in range(2)]
        response = client.post("/v1/rewards", json={"items": items}, headers=score)
        assert response.status_code == 413, response.text
        error = response.json()["error"]
        assert error["code"] == "too_large" and error["field"] == "body.items"
        assert error["message"].startswith("4 judgments") and "at most 3" in error["message"]
        openrlhf = client.post(
            "/v1/openrlhf/reward",
            json={
                "query": [f"Q: {item['completion']}" for item in items],
                "prompts": ["Q: "] * 2,
                "labels": [SEA] * 2,
            },
            headers=score,
        )
        assert openrlhf.status_code == 413, openrlhf.text
        # The same rubric named by reference counts the same.
        named = [{**item, "rubric": "api/blue-sea@1"} for item in items]
        assert client.post("/v1/rewards", json={"items": named}, headers=score).status_code == 413
        assert _counts(database_url) == before

        within = client.post("/v1/rewards", json={"items": items[:1]}, headers=score)
        assert within.status_code == 200, within.text
        after = _counts(database_url)
        assert after["completions"] == before["completions"] + 1
        assert after["scores"] == before["scores"] + 1


def test_a_score_job_past_the_work_bound_is_413_and_stores_nothing(database_url: str) -> None:
    with api_client(database_url, max_job_judgments=3) as (client, keys):
        records = [{"prompt_external_id": SEA, "text": f"Blue {i}."} for i in range(2)]
        added = client.post("/v1/completions", json=records, headers=bearer(keys["author"]))
        assert added.status_code == 200, added.text
        before = _counts(database_url)
        response = client.post(
            "/v1/score-jobs", json={"prompt_ids": [SEA]}, headers=bearer(keys["score"])
        )
        assert response.status_code == 413, response.text
        assert response.json()["error"]["message"].startswith("4 judgments")
        assert _counts(database_url) == before
        assert before["score_jobs"] == 0


def _decisive(request: ChoiceRequest) -> dict[str, float]:
    """A scripted judge's first-token probabilities: most on the first choice (the first
    response shown wins a comparison; a citation is supported)."""
    return {request.choices[0]: 0.7, request.choices[1]: 0.3}


def _scripted(spec: Any) -> ScriptedBackend:
    return ScriptedBackend(probs=_decisive, model=spec.model or "embedded")


def _raise_bound(client: TestClient, judgments: int) -> None:
    """The same server, its reward work bound now ``judgments``."""
    client.app.state.rubricsvc.settings.api.max_reward_judgments = judgments  # type: ignore[attr-defined]


def _judgments(database_url: str) -> int:
    return _counts(database_url)["judgments"]


@pytest.mark.parametrize(("chunk", "calls"), [(None, [300]), (128, [128, 128, 44])])
def test_a_reward_batch_goes_to_the_judge_in_calls_of_at_most_the_chunk_setting(
    sqlite_url: str, chunk: int | None, calls: list[int]
) -> None:
    """A reward batch has no checkpoint: its judgments go to the judge in one call up to
    ``reward_chunk_judgments`` (default 4,096), past it in calls of at most that many (whole
    completions: 2 judgments each here)."""
    items = [
        {"prompt_id": "api-judged", "completion": f"Kind words, take {i}."} for i in range(150)
    ]
    judges: list[ScriptedBackend] = []

    def counted(spec: Any) -> ScriptedBackend:
        judges.append(_scripted(spec))
        return judges[-1]

    settings = {} if chunk is None else {"reward_chunk_judgments": chunk}
    with api_client(sqlite_url, rubrics=[JUDGED_RUBRIC], build_backend=counted, **settings) as (
        client,
        keys,
    ):
        response = client.post("/v1/rewards", json={"items": items}, headers=bearer(keys["score"]))
        assert response.status_code == 200, response.text
        assert response.json()["computed"] == 300
    assert [size for judge in judges for size in judge.batch_sizes] == calls


def test_pairwise_work_is_counted_as_the_comparisons_it_plans(database_url: str) -> None:
    """32 completions of one prompt, judged pairwise: groups of 8 (the default group_size),
    each ordered pair once, 4 x 8 x 7 = 224 judgments, not one per completion."""
    items = [{"prompt_id": "api-judged", "completion": f"Kind words, take {i}."} for i in range(32)]
    body = {"items": items, "mode": "pairwise"}
    group = JudgeSpec.model_fields["group_size"].default
    planned = (32 // group) * group * (group - 1)
    assert planned == 224
    judges: list[ScriptedBackend] = []

    def counted(spec: Any) -> ScriptedBackend:
        judges.append(_scripted(spec))
        return judges[-1]

    def asked() -> int:
        return sum(len(judge.requests) for judge in judges)

    with api_client(
        database_url,
        rubrics=[JUDGED_RUBRIC],
        build_backend=counted,
        max_reward_judgments=planned - 1,
    ) as (client, keys):
        before = _counts(database_url)
        response = client.post("/v1/rewards", json=body, headers=bearer(keys["score"]))
        assert response.status_code == 413, response.text
        message = response.json()["error"]["message"]
        assert message.startswith(
            f"{planned} judgments (completions: 32; planned by the judge's mode: {planned}; "
            "check criteria: 0)"
        )
        assert f"at most {planned - 1} per reward request" in message
        assert _counts(database_url) == before
        assert asked() == 0  # refused before the judge was asked anything

        _raise_bound(client, planned)
        response = client.post("/v1/rewards", json=body, headers=bearer(keys["score"]))
        assert response.status_code == 200, response.text
        assert response.json()["judgments"] == planned == asked()
        # The count is what scoring judged: one stored judgment per planned one.
        assert _judgments(database_url) - before["judgments"] == planned
        assert all(r["reward"] is not None for r in response.json()["results"])


def test_a_pairwise_score_job_is_bounded_and_totalled_by_its_comparisons(
    database_url: str,
) -> None:
    """A job of 10 completions judged pairwise: groups of 8 and 2, 8 x 7 + 2 x 1 = 58
    comparisons; its bound, its total and what its chunks judge are that count."""
    with api_client(
        database_url, rubrics=[JUDGED_RUBRIC], build_backend=_scripted, max_job_judgments=57
    ) as (client, keys):
        records = [{"prompt_external_id": "api-judged", "text": f"Kind, {i}."} for i in range(10)]
        added = client.post("/v1/completions", json=records, headers=bearer(keys["author"]))
        assert added.status_code == 200, added.text
        body = {"prompt_ids": ["api-judged"], "mode": "pairwise"}
        before = _counts(database_url)
        refused = client.post("/v1/score-jobs", json=body, headers=bearer(keys["score"]))
        assert refused.status_code == 413, refused.text
        assert refused.json()["error"]["message"].startswith(
            "58 judgments (completions: 10; planned by the judge's mode: 58; check criteria: 0)"
        )
        assert _counts(database_url) == before

        client.app.state.rubricsvc.settings.api.max_job_judgments = 58  # type: ignore[attr-defined]
        submitted = client.post("/v1/score-jobs", json=body, headers=bearer(keys["score"]))
        assert submitted.status_code == 202, submitted.text
        job_id = submitted.json()["id"]
        assert submitted.json()["total"] == 58
        state = wait_for_job(client, job_id, bearer(keys["read"]))
        assert state["status"] == "done", state
        assert (state["total"], state["done"], state["failed"]) == (58, 58, 0)
        assert _judgments(database_url) - before["judgments"] == 58


DRB = Path(__file__).resolve().parents[1] / "data" / "deep_research_bench_citations"


def test_a_citations_criterion_is_counted_as_the_claims_it_checks(database_url: str) -> None:
    """DeepResearch Bench's report 61 with a document for each of its 13 labels: its 29 cited
    (sentence, label) pairs (counted by hand, hand_counts.json) are 29 checks, besides one
    judged criterion and one check criterion: 31 judgments, not 3."""
    report = next(
        record
        for line in (DRB / "reports.jsonl").read_text(encoding="utf-8").splitlines()
        if (record := json.loads(line))["id"] == 61
    )
    hand = json.loads((DRB / "hand_counts.json").read_text(encoding="utf-8"))["61"]
    assert (hand["citation_pairs"], hand["distinct_labels"]) == (29, 13)
    rubric = {
        "name": "drb/61",
        "prompt": {"external_id": "drb-61", "text": report["prompt"]},
        "criteria": [
            {
                "text": "The cited claims are supported by their sources",
                "kind": "citations",
                "weight": 3,
            },
            {"text": "Names the countries that fish chub mackerel", "weight": 1},
            {
                "text": "Long enough",
                "kind": "check",
                "check": {"type": "word_count", "min": 100},
                "weight": 1,
            },
        ],
    }
    documents = [
        {"label": str(n), "text": f"Source {n}: a page on chub mackerel fisheries."}
        for n in range(1, hand["distinct_labels"] + 1)
    ]
    item = {"prompt_id": "drb-61", "completion": report["article"], "documents": documents}
    planned = hand["citation_pairs"] + 1
    with api_client(
        database_url, rubrics=[rubric], build_backend=_scripted, max_reward_judgments=planned
    ) as (client, keys):
        before = _counts(database_url)
        response = client.post("/v1/rewards", json={"items": [item]}, headers=bearer(keys["score"]))
        assert response.status_code == 413, response.text
        message = response.json()["error"]["message"]
        assert message.startswith(
            f"{planned + 1} judgments (completions: 1; planned by the judge's mode: {planned}; "
            "check criteria: 1)"
        )
        assert _counts(database_url) == before

        _raise_bound(client, planned + 1)
        response = client.post("/v1/rewards", json={"items": [item]}, headers=bearer(keys["score"]))
        assert response.status_code == 200, response.text
        result = response.json()["results"][0]
        cited = next(c for c in result["criteria"] if "citations" in c)
        assert cited["citations"]["count"] == hand["citation_pairs"]
        assert _judgments(database_url) - before["judgments"] == planned


# --- judges loaded once, in a bounded set ---------------------------------------------------


class CountingBuilds:
    """A backend factory that counts what it builds: scripted backends, no model."""

    def __init__(self) -> None:
        self.built: list[Any] = []

    def __call__(self, spec: Any) -> ScriptedBackend:
        self.built.append(spec)
        return ScriptedBackend(text=_script, model=spec.model or "embedded")


def _script(request: Any) -> str:
    """A draft where one is asked for (a JSON schema), else a judge's verdict."""
    return DRAFT if request.json_schema is not None else "It does.\nVERDICT: YES"


def _store_judges(database_url: str, *specs: JudgeSpec) -> None:
    engine = make_engine(database_url)
    with session_scope(engine) as session:
        for spec in specs:
            ensure_judge_config(session, spec)
    engine.dispose()


def test_five_modes_load_one_judge_and_the_kept_set_is_bounded(sqlite_url: str) -> None:
    builds = CountingBuilds()
    with api_client(sqlite_url, rubrics=[JUDGED_RUBRIC], build_backend=builds, max_judges=2) as (
        client,
        keys,
    ):
        _store_judges(
            sqlite_url,
            *(JudgeSpec(name=f"fake-{m}", backend="scripted", model=m) for m in ("a", "b", "c")),
        )
        score = bearer(keys["score"])

        def reward(judge: str, mode: str | None, text: str) -> httpx.Response:
            item = {"prompt_id": "api-judged", "completion": text}
            return client.post(
                "/v1/rewards", json={"items": [item], "judge": judge, "mode": mode}, headers=score
            )

        # The modes that judge one completion alone (pairwise and group need a prompt's group).
        single = [m for m in VerdictMode if not get_mode(m.value).compares]
        assert len(single) == 5
        for index, mode in enumerate(single):
            response = reward("fake-a", mode.value, f"Kind words, {index}.")
            assert response.status_code == 200, response.text
            answered = response.json()
            assert answered["cached"] == 0 and answered["judgments"] > 0  # judged, not cached
        assert len(builds.built) == 1  # five modes of one model: one backend

        assert reward("fake-b", None, "Kind words.").status_code == 200
        assert len(builds.built) == 2
        before = _counts(sqlite_url)
        refused = reward("fake-c", None, "Other kind words.")
        assert refused.status_code == 422, refused.text
        message = refused.json()["error"]["message"]
        assert "at most 2" in message and "RUBRICSVC_API_MAX_JUDGES" in message
        assert len(builds.built) == 2 and _counts(sqlite_url) == before
        # The kept judges still serve.
        assert reward("fake-a", "criterion-text", "More kind words.").status_code == 200
        assert len(builds.built) == 2
        # A score job this server would run is refused up front too.
        job = client.post(
            "/v1/score-jobs", json={"judge": "fake-c", "prompt_ids": ["api-judged"]}, headers=score
        )
        assert job.status_code == 422, job.text


def test_generate_uses_the_kept_model_it_shares_with_the_judge(sqlite_url: str) -> None:
    builds = CountingBuilds()
    with api_client(sqlite_url, rubrics=[JUDGED_RUBRIC], build_backend=builds) as (client, keys):
        author = bearer(keys["author"])
        for external_id in ("p-1", "p-2"):
            stored = client.post(
                "/v1/prompts",
                json={"text": f"Explain tides ({external_id}).", "external_id": external_id},
                headers=author,
            )
            assert stored.status_code == 201, stored.text
            response = client.post(
                "/v1/rubrics/generate",
                json={"prompt_ids": [external_id], "min_criteria": 2, "max_criteria": 3},
                headers=author,
            )
            assert response.status_code == 200, response.text
            assert response.json()["drafts"][0]["status"] == "created"
        # The embedded judge names the same model as the generator: no second copy.
        rewarded = client.post(
            "/v1/rewards",
            json={"items": [{"prompt_id": "api-judged", "completion": "Kind."}]},
            headers=bearer(keys["score"]),
        )
        assert rewarded.status_code == 200 and rewarded.json()["computed"] == 2
        assert len(builds.built) == 1


# --- keys redacted from access logs ---------------------------------------------------------


def test_the_filter_redacts_a_uvicorn_access_record() -> None:
    from uvicorn.logging import AccessFormatter

    secret = "rsk_" + "s3cr3t-Key_" * 4
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "POST", f"/v1/openrlhf/reward?api_key={secret}&masked=0", "1.1", 200),
        None,
    )
    assert RedactSecrets().filter(record)
    line = AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s').format(record)
    assert secret not in line
    assert f"/v1/openrlhf/reward?api_key={REDACTED}&masked=0" in line


def test_a_percent_encoded_key_is_accepted_and_redacted(sqlite_url: str) -> None:
    """The server decodes ?api%5Fkey=rsk%5F...; the access log shows the query as sent."""
    from rubricsvc.api.logs import redact

    with api_client(sqlite_url) as (client, keys):
        encoded = keys["score"].replace("_", "%5F")
        answer = client.post(f"/v1/openrlhf/reward?api%5Fkey={encoded}", json=OPENRLHF)
        assert answer.status_code == 200, answer.text  # the encoded key is a valid key
    line = f"POST /v1/openrlhf/reward?api%5Fkey={encoded}&masked=0 HTTP/1.1"
    assert redact(line) == f"POST /v1/openrlhf/reward?api%5Fkey={REDACTED}&masked=0 HTTP/1.1"
    assert redact(f"key {encoded} was used") == f"key {REDACTED} was used"


@pytest.mark.slow
def test_rubricsvc_serve_logs_no_key(sqlite_url: str, tmp_path: Path) -> None:
    engine = make_engine(sqlite_url)
    with session_scope(engine) as session:
        from rubricsvc.apikeys import create_key
        from rubricsvc.rubrics.schemas import RubricSpec
        from rubricsvc.rubrics.versions import approve, save_rubric

        secret = create_key(session, "openrlhf", ["score"]).secret
        approve(session, save_rubric(session, RubricSpec.model_validate(WORD_RUBRIC)).version)
    engine.dispose()
    port = free_port()
    log_path = tmp_path / "serve.log"
    env = {**os.environ, "RUBRICSVC_DATABASE_URL": sqlite_url}
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "rubricsvc", "serve", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, trust_env=False, timeout=30) as http:
            deadline = time.monotonic() + 60
            while True:
                assert server.poll() is None, log_path.read_text()
                try:
                    if http.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.3)
            body = {"query": ["Q: The sea is blue."], "prompts": ["Q: "], "labels": [SEA]}
            ok = http.post("/v1/openrlhf/reward", params={"api_key": secret}, json=body)
            assert ok.status_code == 200, ok.text
            typo = secret[:-1] + ("A" if secret[-1] != "A" else "B")  # a near miss is secret too
            bad = http.post("/v1/openrlhf/reward", params={"api_key": typo}, json=body)
            assert bad.status_code == 401
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    logged = log_path.read_text()
    lines = [line for line in logged.splitlines() if "/v1/openrlhf/reward" in line]
    assert len(lines) == 2, logged  # both requests have their access log line ...
    assert all(f"api_key={REDACTED}" in line for line in lines), lines
    assert secret not in logged and typo not in logged and secret[4:20] not in logged  # ... no key


# --- numbers no route can use ---------------------------------------------------------------

RUBRIC_TEXT = json.dumps({**WORD_RUBRIC, "name": "api/numbers"})
ITEM = {"prompt_id": SEA, "completion": "Blue."}
OPENRLHF = {"query": ["Q: Blue."], "prompts": ["Q: "], "labels": [SEA]}


def _weight(value: str, dimension: str = "") -> str:
    """The rubric with its first weight written as ``value`` (JSON text, so NaN is literal)."""
    text = RUBRIC_TEXT.replace('"weight": 3', f'"weight": {value}', 1)
    return text[:-1] + dimension + "}" if dimension else text


BAD_NUMBERS: list[tuple[str, str, dict[str, Any], str]] = [
    ("POST", "/v1/rubrics", {"content": _weight("NaN")}, "body.criteria.0.weight"),
    ("POST", "/v1/rubrics", {"content": _weight("Infinity")}, "body.criteria.0.weight"),
    ("POST", "/v1/rubrics", {"content": _weight("-Infinity")}, "body.criteria.0.weight"),
    ("POST", "/v1/rubrics", {"content": _weight("1e999")}, "body.criteria.0.weight"),
    ("POST", "/v1/rubrics", {"content": _weight("1e308")}, "body.criteria.0.weight"),
    ("POST", "/v1/rubrics", {"content": _weight(str(2**64))}, "body.criteria.0.weight"),
    ("POST", "/v1/rubrics", {"content": _weight("1e7")}, "body.criteria.0.weight"),
    ("POST", "/v1/prompts", {"content": '{"text": "x", "tags": {"s": NaN}}'}, "body.tags.s"),
    (
        "POST",
        "/v1/completions",
        {
            "content": f'[{{"prompt_external_id": "{SEA}", "text": "t", "metadata": {{"v": [1, Infinity]}}}}]'
        },
        "body.0.metadata.v.1",
    ),
    ("POST", "/v1/completions", {"json": [{"prompt_id": 2**63, "text": "t"}]}, "body.0.prompt_id"),
    ("POST", "/v1/completions", {"json": [{"prompt_id": 2**40, "text": "t"}]}, "body.0.prompt_id"),
    (
        "POST",
        "/v1/completions/jsonl",
        {
            "content": '{"prompt_id": 0, "text": "t"}\n',
            "headers": {"content-type": "application/x-ndjson"},
        },
        "line.1.prompt_id",
    ),
    (
        "POST",
        "/v1/completions/jsonl",
        {
            "content": f'{{"prompt_external_id": "{SEA}", "text": "t", "metadata": {{"x": NaN}}}}\n',
            "headers": {"content-type": "application/x-ndjson"},
        },
        "line.1.metadata.x",
    ),
    ("POST", "/v1/score-jobs", {"json": {"completion_ids": [2**63]}}, "body.completion_ids.0"),
    ("POST", "/v1/score-jobs", {"json": {"completion_ids": [2**40]}}, "body.completion_ids.0"),
    (
        "POST",
        "/v1/score-jobs",
        {"content": f'{{"prompt_ids": ["{SEA}"], "min_coverage": NaN}}'},
        "body.min_coverage",
    ),
    (
        "POST",
        "/v1/score-jobs",
        {"json": {"prompt_ids": [SEA], "rubric": "api/blue-sea@99999999999999999999"}},
        "body.rubric",
    ),
    (
        "POST",
        "/v1/rewards",
        {"content": json.dumps({"items": [ITEM]})[:-1] + ', "min_coverage": Infinity}'},
        "body.min_coverage",
    ),
    (
        "POST",
        "/v1/rewards",
        {"json": {"items": [{**ITEM, "rubric": "api/blue-sea@99999999999999999999"}]}},
        "body.items.0.rubric",
    ),
    (
        "POST",
        "/v1/rewards",
        {"json": {"items": [{**ITEM, "rubric": "9223372036854775808"}]}},
        "body.items.0.rubric",
    ),
    ("POST", "/v1/rewards", {"json": {"items": [{**ITEM, "rubric": "²"}]}}, "body.items.0.rubric"),
    (
        "POST",
        "/v1/rubrics/generate",
        {"content": f'{{"prompt_ids": ["{SEA}"], "temperature": NaN}}'},
        "body.temperature",
    ),
    ("POST", "/v1/rubrics/generate", {"json": {"prompt_ids": [SEA], "seed": 2**63}}, "body.seed"),
    ("POST", "/v1/rubrics/generate", {"json": {"prompt_ids": [SEA], "seed": 2**62}}, "body.seed"),
    (
        "POST",
        "/v1/openrlhf/reward",
        {"json": OPENRLHF, "params": {"masked": "nan"}},
        "query.masked",
    ),
    (
        "POST",
        "/v1/openrlhf/reward",
        {"json": OPENRLHF, "params": {"masked": "-inf"}},
        "query.masked",
    ),
    (
        "POST",
        "/v1/openrlhf/reward",
        {"json": OPENRLHF, "params": {"min_coverage": "inf"}},
        "query.min_coverage",
    ),
    ("GET", f"/v1/completions/{2**63}", {}, "path.completion_id"),
    ("GET", f"/v1/prompts/{10**30}", {}, "path.prompt_id"),
    ("GET", f"/v1/score-jobs/{2**63}/results", {}, "path.job_id"),
    ("GET", f"/v1/rubrics/api/blue-sea/versions/{2**63}", {}, "path.number"),
    ("POST", f"/v1/rubrics/api/blue-sea/versions/{2**64}/approve", {}, "path.number"),
    ("GET", "/v1/rubrics/api/blue-sea/diff", {"params": {"from": 1, "to": 2**63}}, "query.to"),
    ("GET", "/v1/prompts", {"params": {"limit": "nan"}}, "query.limit"),
    ("GET", "/v1/completions", {"params": {"offset": "1e400"}}, "query.offset"),
]


@pytest.mark.parametrize(
    ("method", "path", "request_args", "field"),
    BAD_NUMBERS,
    ids=[f"{m} {p} {f}" for m, p, _, f in BAD_NUMBERS],
)
def test_unusable_numbers_are_422_naming_the_field(
    database_url: str, method: str, path: str, request_args: dict[str, Any], field: str
) -> None:
    with api_client(database_url) as (client, keys):
        args = dict(request_args)
        headers = {"content-type": "application/json", **args.pop("headers", {})}
        before = _counts(database_url)
        response = client.request(
            method, path, headers={**headers, **bearer(keys["admin"])}, **args
        )
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["field"] == field, error
        if field != "query.masked":  # that route words its own message about the value
            assert error["message"].startswith(field), error
        assert _counts(database_url) == before


def test_a_huge_dimension_weight_is_422_naming_it(sqlite_url: str) -> None:
    with api_client(sqlite_url) as (client, keys):
        themed = {
            **WORD_RUBRIC,
            "name": "api/themed",
            "criteria": [{**c, "theme": "coverage"} for c in WORD_RUBRIC["criteria"]],
            "dimension_weights": {"coverage": 1e308},
        }
        response = client.post("/v1/rubrics", json=themed, headers=bearer(keys["author"]))
        assert response.status_code == 422, response.text
        assert "dimension_weights.coverage" in response.json()["error"]["message"]


# --- names the library would refuse only after judging are refused up front ------------------

UNKNOWN_NAMES = [
    ("/v1/rewards", {"json": {"items": [ITEM], "aggregation": "mean"}}, "body.aggregation"),
    ("/v1/rewards", {"json": {"items": [ITEM], "mode": "ranking"}}, "body.mode"),
    ("/v1/score-jobs", {"json": {"prompt_ids": [SEA], "aggregation": "mean"}}, "body.aggregation"),
    (
        "/v1/openrlhf/reward",
        {"json": OPENRLHF, "params": {"aggregation": "mean"}},
        "query.aggregation",
    ),
]


@pytest.mark.parametrize(("path", "request_args", "field"), UNKNOWN_NAMES, ids=lambda x: str(x))
def test_unknown_aggregations_and_modes_are_422_before_any_work(
    sqlite_url: str, path: str, request_args: dict[str, Any], field: str
) -> None:
    with api_client(sqlite_url) as (client, keys):
        answer = client.post(
            path,
            json=request_args["json"],
            params=request_args.get("params", {}),
            headers=bearer(keys["score"]),
        )
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["field"] == field
        assert "choose one of" in error["message"]  # the known names are listed
        engine = make_engine(sqlite_url)
        with session_scope(engine) as session:
            assert session.scalar(select(func.count()).select_from(Judgment)) == 0
            assert session.scalar(select(func.count()).select_from(ScoreJob)) == 0
        engine.dispose()
