"""Every route of the HTTP API: success, wrong scope (403), malformed input (422 naming the
field), on SQLite and PostgreSQL (no key, 401: test_api_closed_by_default walks app.routes).
The rubric used is made of check criteria, so routes that score answer without loading a
model; the model routes have their own tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.requirements import require_module

require_module("fastapi", "api")

from fastapi.testclient import TestClient  # noqa: E402

from rubricsvc.api import direct  # noqa: E402
from rubricsvc.db import make_engine, session_scope  # noqa: E402
from rubricsvc.judging.config import BUILTIN_JUDGES  # noqa: E402
from rubricsvc.rubrics.schemas import RubricSpec  # noqa: E402
from rubricsvc.rubrics.versions import save_rubric  # noqa: E402
from rubricsvc.scoring import jobs  # noqa: E402
from rubricsvc.scoring.scorer import ScoreOptions  # noqa: E402
from rubricsvc.scoring.selection import Selection  # noqa: E402
from tests.api_harness import WORD_RUBRIC, api_client, bearer, wait_for_job  # noqa: E402

SEA = "api-sea"
GOOD = "The sea is blue and calm today."


@dataclass
class Route:
    """One route: how to call it well, with which scope, and how to call it badly."""

    method: str
    path: str
    scope: str
    ok: dict[str, Any] = field(default_factory=dict)  # httpx request arguments
    ok_status: int = 200
    bad: dict[str, Any] | None = None  # a malformed request ...
    bad_field: str | None = None  # ... and the field its 422 must name
    bad_path: str | None = None  # a malformed path instead of a malformed body or query

    @property
    def id(self) -> str:
        return f"{self.method} {self.path}"


DRAFT = {**WORD_RUBRIC, "name": "api/draft", "prompt": {"text": "Another prompt."}}
RUBRIC = "/v1/rubrics/api/blue-sea"

ROUTES = [
    Route("GET", "/v1/prompts", "read", bad={"params": {"limit": "x"}}, bad_field="query.limit"),
    Route(
        "POST",
        "/v1/prompts",
        "author",
        ok={"json": {"text": "A new prompt.", "external_id": "p-new"}},
        ok_status=201,
        bad={"json": {"text": 5}},
        bad_field="body.text",
    ),
    Route("GET", "/v1/prompts/1", "read", bad_path="/v1/prompts/abc", bad_field="path.prompt_id"),
    Route(
        "GET", "/v1/rubrics", "read", bad={"params": {"status": "bogus"}}, bad_field="query.status"
    ),
    Route(
        "POST",
        "/v1/rubrics",
        "author",
        ok={"json": {**WORD_RUBRIC, "name": "api/copy"}},
        ok_status=201,
        bad={"json": {**WORD_RUBRIC, "criteria": [{"text": "x", "weight": "heavy"}]}},
        bad_field="body.criteria.0.weight",
    ),
    Route(
        "POST",
        "/v1/rubrics/generate",
        "author",
        # success: test_api_models.py (drafting needs the model)
        ok={},
        bad={"json": {"prompt_ids": []}},
        bad_field="body.prompt_ids",
    ),
    Route(
        "GET", f"{RUBRIC}/versions", "read", bad={"params": {"limit": 0}}, bad_field="query.limit"
    ),
    Route(
        "GET",
        f"{RUBRIC}/versions/1",
        "read",
        bad_path=f"{RUBRIC}/versions/one",
        bad_field="path.number",
    ),
    Route(
        "POST",
        "/v1/rubrics/api/draft/versions/1/approve",
        "review",
        ok={"json": {"note": "reads well"}},
        bad={"json": {"note": 5}},
        bad_field="body.note",
    ),
    Route(
        "POST",
        f"{RUBRIC}/versions/1/retire",
        "review",
        ok={"json": {"note": "superseded"}},
        bad={"json": {"note": ["superseded"]}},
        bad_field="body.note",
    ),
    Route(
        "GET",
        f"{RUBRIC}/diff",
        "read",
        ok={"params": {"from": 1, "to": 1}},
        bad={"params": {"from": 1, "to": "x"}},
        bad_field="query.to",
    ),
    Route("GET", RUBRIC, "read", bad_path="/v1/rubrics/" + "n" * 201, bad_field="path.name"),
    Route(
        "POST",
        "/v1/completions",
        "author",
        ok={"json": [{"prompt_external_id": SEA, "text": GOOD, "external_id": "c-1"}]},
        bad={"json": [{"prompt_external_id": SEA}]},
        bad_field="body.0.text",
    ),
    Route(
        "POST",
        "/v1/completions/jsonl",
        "author",
        ok={
            "content": f'{{"prompt_external_id": "{SEA}", "text": "Waves."}}\n',
            "headers": {"content-type": "application/x-ndjson"},
        },
        bad={
            "content": f'{{"prompt_external_id": "{SEA}"}}\n',
            "headers": {"content-type": "application/x-ndjson"},
        },
        bad_field="line.1.text",
    ),
    Route("GET", "/v1/completions", "read", bad={"params": {"limit": -1}}, bad_field="query.limit"),
    Route(
        "GET",
        "/v1/completions/1",
        "read",
        bad_path="/v1/completions/x",
        bad_field="path.completion_id",
    ),
    Route(
        "POST",
        "/v1/score-jobs",
        "score",
        ok={"json": {"prompt_ids": [SEA]}},
        ok_status=202,
        bad={"json": {"prompt_ids": [SEA], "min_coverage": 2}},
        bad_field="body.min_coverage",
    ),
    Route(
        "GET", "/v1/score-jobs", "read", bad={"params": {"offset": "x"}}, bad_field="query.offset"
    ),
    Route("GET", "/v1/score-jobs/1", "read", bad_path="/v1/score-jobs/0", bad_field="path.job_id"),
    Route(
        "GET",
        "/v1/score-jobs/1/results",
        "read",
        bad={"params": {"limit": 10_000}},
        bad_field="query.limit",
    ),
    Route(
        "POST",
        "/v1/score-jobs/1/cancel",
        "score",
        bad_path="/v1/score-jobs/x/cancel",
        bad_field="path.job_id",
    ),
    Route(
        "POST",
        "/v1/rewards",
        "score",
        ok={"json": {"items": [{"prompt_id": SEA, "completion": GOOD}]}},
        bad={"json": {"items": [{"prompt_id": SEA}]}},
        bad_field="body.items.0.completion",
    ),
    Route(
        "POST",
        "/v1/openrlhf/reward",
        "score",
        ok={"json": {"query": ["Q: " + GOOD], "prompts": ["Q: "], "labels": [SEA]}},
        bad={"json": {"query": ["Q: x"], "prompts": 5}},
        bad_field="body.prompts",
    ),
    Route("GET", "/v1/judges", "read"),  # takes no input: nothing to malform
    Route("GET", "/metrics", "read"),  # takes no input: nothing to malform
]
WRONG_SCOPE = {"read": "author", "author": "read", "score": "read", "review": "author"}


def _call(client: TestClient, route: Route, auth: dict[str, str], **overrides: Any) -> Any:
    request = {**route.ok, **overrides}
    extra = request.pop("headers", {})
    path = request.pop("path", route.path)
    return client.request(route.method, path, headers={**extra, **auth}, **request)


@pytest.fixture
def api(database_url: str) -> Any:
    yield from _seeded_api(database_url)


@pytest.fixture
def sqlite_api(sqlite_url: str) -> Any:
    """For the key checks, which read no data: SQLite only, to keep the suite short."""
    yield from _seeded_api(sqlite_url)


def _seeded_api(database_url: str) -> Any:
    with api_client(database_url, rubrics=[WORD_RUBRIC]) as (client, keys):
        engine = make_engine(database_url)
        with session_scope(engine) as session:
            # A draft to approve, and a pending job (never sent) to read and cancel.
            save_rubric(session, RubricSpec.model_validate(DRAFT))
        response = client.post(
            "/v1/completions",
            json=[{"prompt_external_id": SEA, "text": "Grey waves.", "external_id": "seed"}],
            headers=bearer(keys["author"]),
        )
        assert response.status_code == 200, response.text
        with session_scope(engine) as session:
            jobs.submit(
                session,
                BUILTIN_JUDGES["embedded"],
                Selection(prompt_external_ids=(SEA,)),
                ScoreOptions(aggregation="healthbench"),  # not the work the route submits
                chunk_judgments=256,
            )
        engine.dispose()
        yield client, keys


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.id)
def test_route_with_the_wrong_scope_is_403(sqlite_api: Any, route: Route) -> None:
    client, keys = sqlite_api
    response = _call(client, route, bearer(keys[WRONG_SCOPE[route.scope]]))
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "forbidden" and route.scope in error["message"]


@pytest.mark.parametrize("route", [r for r in ROUTES if r.bad_field], ids=lambda r: r.id)
def test_malformed_input_is_422_naming_the_field(api: Any, route: Route) -> None:
    client, keys = api
    overrides: dict[str, Any] = dict(route.bad or {})
    if route.bad_path:
        overrides["path"] = route.bad_path
    response = _call(client, route, bearer(keys[route.scope]), **overrides)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == route.bad_field, error
    assert error["message"].startswith(route.bad_field)


@pytest.mark.parametrize(
    "route", [r for r in ROUTES if r.path != "/v1/rubrics/generate"], ids=lambda r: r.id
)
def test_route_succeeds_with_its_scope_and_with_admin(api: Any, route: Route) -> None:
    client, keys = api
    response = _call(client, route, bearer(keys[route.scope]))
    assert response.status_code == route.ok_status, response.text
    if route.path == "/metrics":
        assert "rubricsvc_http_requests_total" in response.text
    else:
        assert response.json() is not None
    if route.method == "GET":  # admin holds every scope (writes are not repeatable)
        again = _call(client, route, bearer(keys["admin"]))
        assert again.status_code == route.ok_status, again.text


def test_health_needs_no_key_and_reports_the_database(api: Any) -> None:
    client, _ = api
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


def test_rewards_are_the_rubric_scores_and_null_without_a_rubric(api: Any) -> None:
    client, keys = api
    client.post("/v1/prompts", json={"text": "No rubric here."}, headers=bearer(keys["author"]))
    response = client.post(
        "/v1/rewards",
        json={
            "items": [
                {"prompt_id": SEA, "completion": GOOD},  # blue, short: 4/4
                {"prompt": "Write one sentence about the sea.", "completion": "Grey waves."},
                {"prompt": "No rubric here.", "completion": "Anything."},
            ]
        },
        headers=bearer(keys["score"]),
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["rewards"] == [pytest.approx(1.0), pytest.approx(0.25), None]
    assert [r["status"] for r in body["results"]] == ["ok", "ok", "no_rubric"]
    assert body["results"][0]["rubric"] == "api/blue-sea@1"


def test_a_well_formed_reward_request_is_served_in_front_of_fastapi_as_the_route_would(
    api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``api.direct`` answers well-formed /v1/rewards requests itself; the route answers the
    rest (here: a query parameter named twice, a body it refuses). Both answers are the same
    (the route's, of a request the fast path is made to leave to it)."""
    served: list[Any] = []
    serve = direct.serve_rewards

    async def counted(state: Any, body: Any, key: Any) -> Any:
        served.append(body)
        return await serve(state, body, key)

    monkeypatch.setattr(direct, "serve_rewards", counted)
    client, keys = api
    auth = bearer(keys["score"])
    body = {
        "items": [{"prompt_id": SEA, "completion": GOOD}, {"prompt_id": SEA, "completion": "x"}]
    }
    directly = client.post("/v1/rewards", json=body, headers=auth)
    assert directly.status_code == 200, directly.text
    assert len(served) == 1
    with monkeypatch.context() as leave:  # the fast path leaves every request to the route
        leave.setattr(direct.DirectRoute, "read", lambda *_: None)
        routed = client.post("/v1/rewards", json=body, headers=auth)
    assert routed.status_code == 200, routed.text
    assert len(served) == 1  # the route took it
    # A query parameter named twice goes on to the route, which refuses it.
    twice = client.post("/v1/rewards?via=route&via=route", json=body, headers=auth)
    assert twice.status_code == 422 and twice.json()["error"]["field"] == "query.via"
    assert len(served) == 1
    # Check criteria only: nothing judged or cached, so the answers are equal as they are.
    assert directly.json()["rewards"] == [pytest.approx(1.0), pytest.approx(0.25)]
    assert directly.json() == routed.json()
    assert directly.headers["content-type"] == routed.headers["content-type"]

    # A body the route refuses goes on to it: its own 422, naming the field.
    refused = client.post("/v1/rewards", json={"items": []}, headers=auth)
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "body.items"
    # An error raised while serving it directly is answered by the app's handler.
    unknown = client.post("/v1/rewards", json={"items": [{"prompt_id": "nope", "completion": "x"}]},
                          headers=auth)  # fmt: skip
    assert unknown.status_code == 404
    assert unknown.json()["error"]["message"].startswith("item 0:")
    assert len(served) == 2
    # Counted by its route's template, as the route's own answers are.
    metrics = client.get("/metrics", headers=bearer(keys["read"])).text
    assert 'rubricsvc_http_requests_total{method="POST",route="/v1/rewards",status="200"} 2.0' in (
        metrics
    )
    assert 'route="/v1/rewards",status="404"} 1.0' in metrics


def test_an_openrlhf_request_is_served_in_front_of_fastapi_as_the_route_would(
    api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenRLHF's route too: its query parameters read as its signature declares them; a name
    given twice, or a value refused, leaves the request to the route."""
    served: list[Any] = []
    serve = direct.serve_openrlhf

    async def counted(state: Any, body: Any, key: Any, **query: Any) -> Any:
        served.append(query)
        return await serve(state, body, key, **query)

    monkeypatch.setattr(direct, "serve_openrlhf", counted)
    client, keys = api
    prompt = "Write one sentence about the sea."
    body = {"query": [prompt + GOOD, prompt + "x"], "prompts": [prompt] * 2, "labels": [SEA, None]}
    path = f"/v1/openrlhf/reward?api_key={keys['score']}&min_coverage=0.5"
    directly = client.post(path, json=body)
    assert directly.status_code == 200, directly.text
    assert served == [
        {
            "judge": "embedded",
            "aggregation": "rar",
            "min_coverage": 0.5,
            "masked": None,
            "group_size": None,  # a reward group's size and evolution run: none asked
            "evolution": None,
        }
    ]
    with monkeypatch.context() as leave:  # the fast path leaves every request to the route
        leave.setattr(direct.DirectRoute, "read", lambda *_: None)
        routed = client.post(path, json=body)
    assert routed.status_code == 200, routed.text
    assert len(served) == 1  # the route took it
    # A name given twice goes on to the route, which refuses it before any work.
    twice = client.post(f"{path}&judge=embedded&judge=embedded", json=body)
    assert twice.status_code == 422 and twice.json()["error"]["field"] == "query.judge"
    assert len(served) == 1
    assert directly.json()["rewards"] == [pytest.approx(1.0), pytest.approx(0.25)]
    assert directly.json() == routed.json()

    # Refused by the route's model, as before.
    refused = client.post(f"{path}&aggregation=nope", json=body)
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "query.aggregation"
    # Refused while serving it directly, by the app's handler.
    masked = client.post(f"{path}&masked=lots", json=body)
    assert masked.status_code == 422
    assert masked.json()["error"]["field"] == "query.masked"
    assert len(served) == 2


def test_an_unknown_prompt_in_a_reward_batch_is_404_naming_the_item(api: Any) -> None:
    client, keys = api
    response = client.post(
        "/v1/rewards",
        json={
            "items": [
                {"prompt_id": SEA, "completion": GOOD},
                {"prompt_id": "nope", "completion": "x"},
            ]
        },
        headers=bearer(keys["score"]),
    )
    assert response.status_code == 404
    assert response.json()["error"]["message"].startswith("item 1:")


def test_a_score_job_runs_in_the_server_and_pages_its_results(api: Any) -> None:
    client, keys = api
    client.post(
        "/v1/completions",
        json=[{"prompt_external_id": SEA, "text": f"Blue wave {i}."} for i in range(5)],
        headers=bearer(keys["author"]),
    )
    submitted = client.post(
        "/v1/score-jobs",
        json={"sources": [], "prompt_ids": [SEA], "aggregation": "healthbench"},
        headers=bearer(keys["score"]),
    )
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["id"]
    state = wait_for_job(client, job_id, bearer(keys["read"]))
    assert state["status"] == "done", state
    first = client.get(
        f"/v1/score-jobs/{job_id}/results", params={"limit": 4}, headers=bearer(keys["read"])
    ).json()
    rest = client.get(
        f"/v1/score-jobs/{job_id}/results",
        params={"offset": first["next_offset"]},
        headers=bearer(keys["read"]),
    ).json()
    scores = first["items"] + rest["items"]
    # The seed completion ("Grey waves.") and the five blue ones, each once.
    assert first["total"] == 6 and rest["next_offset"] is None
    assert len({s["completion_id"] for s in scores}) == 6
    assert all(len(s["criteria"]) == 2 for s in scores)
    assert sorted(s["value"] for s in scores) == [0.25] + [1.0] * 5


def test_oversized_bodies_are_413_before_they_are_read(sqlite_url: str) -> None:
    with api_client(sqlite_url, max_body_bytes=2_000, max_completions=3) as (client, keys):
        auth = bearer(keys["admin"])
        big = [{"prompt_external_id": SEA, "text": "x" * 3_000}]
        response = client.post("/v1/completions", json=big, headers=auth)
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "too_large"

        def chunks() -> Any:  # no Content-Length: counted as it arrives
            for _ in range(10):
                yield b'{"prompt_external_id": "api-sea", "text": "' + b"y" * 300 + b'"}\n'

        streamed = client.post(
            "/v1/completions/jsonl",
            content=chunks(),
            headers={**auth, "content-type": "application/x-ndjson"},
        )
        assert streamed.status_code == 413
        too_many = [{"prompt_external_id": SEA, "text": f"w{i}"} for i in range(4)]
        counted = client.post("/v1/completions", json=too_many, headers=auth)
        assert counted.status_code == 413 and counted.json()["error"]["field"] == "body"
        listed = client.get("/v1/completions", headers=auth).json()
        assert listed["total"] == 0  # nothing of the refused requests was stored


def test_a_bad_record_stores_none_of_the_batch(api: Any) -> None:
    client, keys = api
    auth = bearer(keys["admin"])
    before = client.get("/v1/completions", headers=auth).json()["total"]
    batch = [
        {"prompt_external_id": SEA, "text": "A fine one."},
        {"prompt_external_id": "no-such-prompt", "text": "An orphan."},
    ]
    response = client.post("/v1/completions", json=batch, headers=auth)
    assert response.status_code == 404
    assert response.json()["error"]["message"].startswith("body.1:")
    assert client.get("/v1/completions", headers=auth).json()["total"] == before


@pytest.mark.parametrize(
    "path",
    ["/v1/prompts/999", "/v1/completions/999", "/v1/score-jobs/999", "/v1/rubrics/no/such"],
)
def test_unknown_ids_are_404_in_the_error_shape(api: Any, path: str) -> None:
    client, keys = api
    response = client.get(path, headers=bearer(keys["read"]))
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "not_found"
    assert ("999" in error["message"]) != ("no/such" in error["message"])


def test_revoked_keys_are_refused(sqlite_url: str) -> None:
    from rubricsvc.apikeys import revoke_key

    with api_client(sqlite_url) as (client, keys):
        assert client.get("/v1/prompts", headers=bearer(keys["read"])).status_code == 200
        engine = make_engine(sqlite_url)
        with session_scope(engine) as session:
            revoke_key(session, "test-read")
        engine.dispose()
        assert client.get("/v1/prompts", headers=bearer(keys["read"])).status_code == 401
