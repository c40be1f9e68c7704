"""Reward groups gathered by the API (``scoring.groups``): rows a claimer that died left
unanswered are judged by the next caller, a group that never fills is judged under the
current set after its time-out and evolves nothing, and ``/v1/rewards`` gathers by its
items' ``group``.

The rubric is check criteria (no model), the judge scripted: the route is what is tested."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import delete, select

from rubricsvc.api.errors import install_error_handlers
from rubricsvc.backends.base import BackendError
from rubricsvc.db import make_engine, session_scope
from rubricsvc.models import EvolutionStep, Origin, RewardGroupMember, RubricVersion
from rubricsvc.models.base import utcnow
from rubricsvc.scoring.groups import GroupFailed, GroupGatherer, GroupGivenUp, GroupPolicy
from rubricsvc.scoring.rewards import RewardBatch, RewardRequest
from tests.api_harness import api_client, bearer
from tests.helpers import approve_rubrics
from tests.integration.test_trainer_evolution import BLUE, BLUE_JUDGE, PROPOSAL
from tests.integration.test_trainer_rewards import FAILING_JUDGE

EVOLUTION: dict[str, Any] = {
    "every": 1,
    "max_active": 2,
    "max_new": 3,
    "generator": {"backend": "scripted", "backend_options": {"reply": PROPOSAL}},
}
PROMPT = "Write one sentence about the sea."
# A server that evolves, where the trainer's score key may create runs (the operator named it).
SERVED: dict[str, Any] = {"evolution": EVOLUTION, "evolution_creators": ["test-score"]}


def _items(texts: list[str], group: str | None) -> list[dict[str, Any]]:
    return [{"prompt_id": "ev-sea", "completion": t, "group": group} for t in texts]


def _body(texts: list[str], group: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"judge": "blue-judge", "items": _items(texts, group), **extra}


@pytest.fixture
def url(database_url: str) -> str:
    approve_rubrics(database_url, judges=[BLUE_JUDGE])
    return database_url


def test_rows_a_dead_process_left_claimed_and_unanswered_are_judged_by_the_next_caller(
    url: str,
) -> None:
    """A claim is the judging transaction's locks: a process that dies while judging leaves
    its rows unanswered, and the next caller of the group judges them. Rows an older server
    left marked claimed (a batch token, no answer) are taken the same way."""
    engine = make_engine(url)
    with api_client(url, [BLUE], reward_group_stale_claim_s=30) as (client, keys):
        auth = bearer(keys["score"])
        first = client.post(
            "/v1/rewards", json=_body(["Blue sea.", "Grey sea."], "g", group_size=2), headers=auth
        )
        assert first.status_code == 200, first.text
        with session_scope(engine) as session:
            template = session.scalars(select(RewardGroupMember)).first()
            assert template is not None
            key, request = template.group_key, dict(template.request)
            # A process claimed a group of "g" a second ago and died before answering it.
            moment = utcnow() - timedelta(seconds=1)
            dead = [
                RewardGroupMember(
                    group_key=key,
                    group_size=2,
                    request={**request, "completion": text},
                    created_at=moment,
                    batch="dead-claimer",
                    claimed_at=moment,
                )
                for text in ("A blue wave.", "A grey wave.")
            ]
            session.add_all(dead)
            session.flush()
            dead_ids = [row.id for row in dead]
        # A caller of the same group judges the dead claimer's group, then its own.
        second = client.post(
            "/v1/rewards",
            json=_body(["Blue water.", "Grey water."], "g", group_size=2),
            headers=auth,
        )
        assert second.status_code == 200, second.text
        assert [r["group_status"] for r in second.json()["results"]] == ["complete"] * 2
    try:
        with session_scope(engine) as session:
            rows = session.scalars(
                select(RewardGroupMember).where(RewardGroupMember.id.in_(dead_ids))
            ).all()
            batches = {row.batch for row in rows}
            assert len(batches) == 1 and batches != {"dead-claimer"}  # judged again, together
            answers = {row.request["completion"]: row.answer for row in rows}
            assert all(
                a is not None and a["result"]["group_status"] == "complete"
                for a in answers.values()
            )
            # Judged as any rollout is: the blue one scores above the grey one, nothing masked.
            blue, grey = (answers[t]["result"]["reward"] for t in ("A blue wave.", "A grey wave."))  # type: ignore[index]
            assert blue is not None and grey is not None and blue > grey
            # Three groups judged, each in one batch.
            assert len(set(session.scalars(select(RewardGroupMember.batch)).all())) == 3
    finally:
        engine.dispose()


RUN = "groups-run"


@pytest.fixture
def sqlite_groups_url(sqlite_url: str) -> str:
    approve_rubrics(sqlite_url, judges=[BLUE_JUDGE])
    return sqlite_url


def test_a_group_that_never_fills_is_judged_after_its_time_out_and_evolves_nothing(
    sqlite_groups_url: str,
) -> None:
    url = sqlite_groups_url
    texts = ["The sea is blue.", "The sea is grey."]
    with api_client(url, [BLUE], reward_group_timeout_s=0.3, **SERVED) as (
        client,
        keys,
    ):
        auth = bearer(keys["score"])
        alone = client.post("/v1/rewards", json=_body(texts), headers=auth)
        assert alone.status_code == 200, alone.text
        # Two rollouts of a group of three: the third never comes.
        gathered = client.post(
            "/v1/rewards", json=_body(texts, group_size=3, evolution=RUN), headers=auth
        )
        assert gathered.status_code == 200, gathered.text
        results = gathered.json()["results"]
        assert [r["group_status"] for r in results] == ["timed_out"] * 2
        # Judged as they are, under the current (persistent) set.
        assert gathered.json()["rewards"] == pytest.approx(alone.json()["rewards"])
        assert {r["rubric"] for r in results} == {"ev/blue@1"}
        openrlhf = client.post(
            f"/v1/openrlhf/reward?api_key={keys['score']}&judge=blue-judge&group_size=3"
            f"&evolution={RUN}",
            json={
                "query": [PROMPT + t for t in texts],
                "prompts": [PROMPT] * 2,
                "labels": ["ev-sea"] * 2,
            },
        )
        assert openrlhf.status_code == 200, openrlhf.text
        assert openrlhf.json()["extra_logs"]["rubric_group_timed_out"] == [1.0, 1.0]
        assert openrlhf.json()["rewards"] == pytest.approx(alone.json()["rewards"])
    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            assert session.scalars(select(EvolutionStep)).all() == []
            evolved = select(RubricVersion).where(RubricVersion.origin == Origin.EVOLVED)
            assert session.scalars(evolved).all() == []
    finally:
        engine.dispose()


def test_rewards_gathers_a_whole_group_and_evolves_it_and_refuses_a_sizeless_run(
    sqlite_groups_url: str,
) -> None:
    url = sqlite_groups_url
    texts = ["The sea is blue.", "The blue sea is calm.", "The sea is grey.", "Grey water."]
    with api_client(url, [BLUE], **SERVED) as (client, keys):
        auth = bearer(keys["score"])
        # Evolution with no group size, and none on the server: nothing to evolve from.
        sizeless = client.post("/v1/rewards", json=_body(texts, evolution=RUN), headers=auth)
        assert sizeless.status_code == 422, sizeless.text
        assert "group_size" in sizeless.text
        # A whole group in one request: complete at once, judged, and its prompt evolved.
        grouped = client.post(
            "/v1/rewards", json=_body(texts, "g1", group_size=4, evolution=RUN), headers=auth
        )
        assert grouped.status_code == 200, grouped.text
        results = grouped.json()["results"]
        assert [r["group_status"] for r in results] == ["complete"] * 4
        assert {r["rubric"] for r in results} == {"ev/blue@1"}  # judged before it evolved
    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            steps = session.scalars(select(EvolutionStep)).all()
            assert [s.step for s in steps] == [0]
            assert sorted(r["text"] for r in steps[0].rollouts) == sorted(texts)
            # The four rollouts were claimed together: one batch.
            batches = session.scalars(select(RewardGroupMember.batch)).all()
            assert len(batches) == 4 and len(set(batches)) == 1
    finally:
        engine.dispose()


def test_a_server_without_evolution_settings_refuses_a_run(sqlite_groups_url: str) -> None:
    texts = ["The sea is blue.", "The sea is grey."]
    with api_client(sqlite_groups_url, [BLUE], reward_group_size=2) as (client, keys):
        runless = client.post(
            "/v1/rewards", json=_body(texts, evolution=RUN), headers=bearer(keys["score"])
        )
    assert runless.status_code == 422, runless.text
    assert "RUBRICSVC_API_EVOLUTION" in runless.text
    engine = make_engine(sqlite_groups_url)
    try:
        with session_scope(engine) as session:  # refused before any rollout joined a group
            assert session.scalars(select(RewardGroupMember)).all() == []
    finally:
        engine.dispose()


def test_rollouts_a_stopped_client_left_are_judged_apart_and_spent_rows_are_deleted(
    url: str,
) -> None:
    """A trainer that stopped mid-step left one rollout of a group of two; after it came back
    (here 5 s later, past the 0.5 s time-out) two new rollouts of the prompt are a group of
    their own, never padded with the old one, which is judged alone as timed out. Rows answered
    or never claimed for longer than the stale-claim bound (30 s) are deleted by the next
    rollout that joins."""
    engine = make_engine(url)
    group = {"group_size": 2}
    try:
        with api_client(url, [BLUE], reward_group_timeout_s=0.5, reward_group_stale_claim_s=30) as (
            client,
            keys,
        ):
            auth = bearer(keys["score"])
            first = client.post(
                "/v1/rewards", json=_body(["Blue sea.", "Grey sea."], "g", **group), headers=auth
            )
            assert first.status_code == 200, first.text
            with session_scope(engine) as session:
                template = session.scalars(select(RewardGroupMember)).first()
                assert template is not None
                key, request = template.group_key, dict(template.request)

                def member(text: str, age: timedelta, **state: Any) -> RewardGroupMember:
                    return RewardGroupMember(
                        group_key=key,
                        group_size=2,
                        request={**request, "completion": text},
                        created_at=utcnow() - age,
                        **state,
                    )

                hour = timedelta(hours=1)
                left = member("A blue wave.", timedelta(seconds=5))
                spent = [
                    member("Long answered.", hour, batch="b", claimed_at=utcnow() - hour,
                           answer={"result": {}}),
                    member("Long unclaimed.", hour),
                ]  # fmt: skip
                session.add_all([left, *spent])
                session.flush()
            time.sleep(0.6)  # past one time-out: this process sweeps again
            back = client.post(
                "/v1/rewards",
                json=_body(["Blue water.", "Grey water."], "g", **group),
                headers=auth,
            )
            assert back.status_code == 200, back.text
            results = back.json()["results"]
            assert [r["group_status"] for r in results] == ["complete"] * 2
        with session_scope(engine) as session:
            # By text: SQLite may give a deleted row's id to a new one.
            rows = {r.request["completion"]: r for r in session.scalars(select(RewardGroupMember))}
            assert not {"Long answered.", "Long unclaimed."} & set(rows)  # deleted
            assert {"Blue sea.", "Grey sea."} <= set(rows)  # answered a moment ago: kept
            old = rows["A blue wave."]
            assert old.answer is not None and old.answer["result"]["group_status"] == "timed_out"
            new = [rows["Blue water."], rows["Grey water."]]
            assert len({r.batch for r in new}) == 1 and old.batch != new[0].batch
            assert all(r.answer is not None for r in new)
    finally:
        engine.dispose()


def test_a_caller_whose_rows_were_deleted_is_told_rather_than_left_waiting(
    sqlite_url: str,
) -> None:
    engine = make_engine(sqlite_url)
    gatherer = GroupGatherer(engine, poll=0.01)
    policy = GroupPolicy(size=2, timeout=60)

    def never_judged(*_: Any) -> RewardBatch:
        raise AssertionError("a group of one, within its time-out, is not judged")

    async def wait_then_lose_the_row() -> None:
        waiting = asyncio.ensure_future(
            gatherer.submit(
                "call",
                policy,
                [RewardRequest(completion="Alone.", prompt="A prompt.")],
                never_judged,
                lambda _requests: None,
            )
        )
        deadline = time.monotonic() + 30  # a caller left waiting fails the test, not hangs it
        while not waiting.done():
            assert time.monotonic() < deadline, "the caller whose row was deleted still waits"
            with session_scope(engine) as session:  # what a sweep does to a spent row
                session.execute(delete(RewardGroupMember))
            await asyncio.sleep(0.05)
        with pytest.raises(GroupGivenUp, match="given up"):
            waiting.result()

    try:
        asyncio.run(wait_then_lose_the_row())
    finally:
        engine.dispose()


def test_a_group_too_large_to_judge_as_one_is_refused_before_anything_waits(
    sqlite_groups_url: str,
) -> None:
    """Each rollout of the blue rubric plans 2 judgments (its two check criteria): a group of
    8 would plan 16, past a bound of 10, and is refused at once (413, naming group_size),
    nothing stored; a group of 4 (8) is judged."""
    url = sqlite_groups_url
    texts = ["The sea is blue.", "The sea is grey."]
    with api_client(url, [BLUE], max_reward_judgments=10, reward_group_timeout_s=0.3) as (
        client,
        keys,
    ):
        auth = bearer(keys["score"])
        too_large = client.post("/v1/rewards", json=_body(texts, "g", group_size=8), headers=auth)
        assert too_large.status_code == 413, too_large.text
        error = too_large.json()["error"]
        assert error["field"] == "body.group_size"
        assert error["message"].startswith(
            "16 judgments planned for a group of 8 rollouts like the 2 sent (4 judgments): "
            "at most 10 per reward request"
        )
        engine = make_engine(url)
        try:
            with session_scope(engine) as session:
                assert session.scalars(select(RewardGroupMember)).all() == []
        finally:
            engine.dispose()
        # OpenRLHF's one rollout per request, the size in its URL: the same projection.
        openrlhf = client.post(
            f"/v1/openrlhf/reward?api_key={keys['score']}&judge=blue-judge&group_size=8",
            json={"query": [PROMPT + texts[0]], "prompts": [PROMPT], "labels": ["ev-sea"]},
        )
        assert openrlhf.status_code == 413, openrlhf.text
        assert openrlhf.json()["error"]["field"] == "query.group_size"
        assert openrlhf.json()["error"]["message"].startswith("16 judgments planned")
        fits = client.post("/v1/rewards", json=_body(texts, "g", group_size=4), headers=auth)
        assert fits.status_code == 200, fits.text
        assert [r["group_status"] for r in fits.json()["results"]] == ["timed_out"] * 2


def test_an_evolving_groups_bound_counts_the_criteria_its_step_judges(
    sqlite_groups_url: str,
) -> None:
    """A group of 2 blue rollouts plans 4 judgments; evolving it, the set it is judged under
    may hold up to max_active (2) evolved criteria and its step judges up to max_new (3) new
    ones, each over its 2 rollouts, 10 more: 14, past a bound of 9, is refused at once; the
    same group judged without evolving (4) is not."""
    texts = ["The sea is blue.", "The sea is grey."]
    with api_client(sqlite_groups_url, [BLUE], max_reward_judgments=9, **SERVED) as (
        client,
        keys,
    ):
        auth = bearer(keys["score"])
        evolving = client.post(
            "/v1/rewards", json=_body(texts, "g", group_size=2, evolution=RUN), headers=auth
        )
        assert evolving.status_code == 413, evolving.text
        assert evolving.json()["error"]["message"].startswith(
            "14 judgments planned for a group of 2 rollouts like the 2 sent (4 judgments, and "
            "up to 5 evolved criteria over the group): at most 9 per reward request"
        )
        plain = client.post("/v1/rewards", json=_body(texts, "g", group_size=2), headers=auth)
        assert plain.status_code == 200, plain.text


@pytest.mark.parametrize(
    ("failure", "raised"),
    [
        (BackendError("judge down", retryable=True, status=503, retry_after=7), BackendError),
        (RuntimeError("a bug"), GroupFailed),
    ],
)
def test_every_member_of_a_failed_group_gets_its_error_as_an_ungrouped_caller_would(
    sqlite_url: str, failure: Exception, raised: type[Exception]
) -> None:
    engine = make_engine(sqlite_url)
    gatherer = GroupGatherer(engine, poll=0.01)
    policy = GroupPolicy(size=2, timeout=60)

    def failing(*_: Any) -> RewardBatch:
        raise failure

    async def both() -> list[BaseException | RewardBatch]:
        calls = [
            gatherer.submit(
                "call",
                policy,
                [RewardRequest(completion=text, prompt="A prompt.")],
                failing,
                lambda _requests: None,
            )
            for text in ("One.", "Two.")
        ]
        return await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 30)

    try:
        errors = asyncio.run(both())
    finally:
        engine.dispose()
    assert [type(e) for e in errors] == [raised, raised], errors
    for error in errors:
        assert str(failure) in str(error)
        if isinstance(error, BackendError):  # what a caller needs to retry, or not
            assert (error.retryable, error.status, error.retry_after) == (True, 503, 7)


def test_the_api_answers_a_given_up_group_503_and_a_failed_one_500() -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    app = FastAPI()
    install_error_handlers(app)

    @app.get("/given-up")
    def given_up() -> None:
        raise GroupGivenUp("this rollout's group was given up")

    @app.get("/failed")
    def failed() -> None:
        raise GroupFailed("the group this rollout was gathered in failed: RuntimeError: a bug")

    with TestClient(app) as client:
        answer = client.get("/given-up")
        assert answer.status_code == 503 and answer.headers["Retry-After"] == "1"
        assert answer.json()["error"]["code"] == "group_given_up"
        answer = client.get("/failed")
        assert answer.status_code == 500 and answer.json()["error"]["code"] == "group_failed"


STORM = {
    "name": "gr/storm",
    "prompt": {"external_id": "gr-storm", "text": "Describe a storm."},
    "criteria": [{"text": "Mentions the wind", "weight": 1}],
}


def test_a_gathered_group_whose_judge_is_down_is_answered_503_with_retry_after(
    sqlite_url: str,
) -> None:
    approve_rubrics(sqlite_url, judges=[FAILING_JUDGE])
    items = [
        {"prompt_id": "gr-storm", "completion": text, "group": "g"}
        for text in ("Wind howled.", "Rain fell.")
    ]
    with api_client(sqlite_url, [STORM]) as (client, keys):
        answer = client.post(
            "/v1/rewards",
            json={"judge": "always-fails", "items": items, "group_size": 2},
            headers=bearer(keys["score"]),
        )
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["code"] == "judge_unavailable"
    assert int(answer.headers["Retry-After"]) >= 1
