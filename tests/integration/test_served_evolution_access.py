"""Served evolution under real clients, on the app and a real database (``api_client``): who
may be rewarded under what no person approved, what a judge outage, a growing set and a run
name shared with a trainer do, and the generator's alarm on the server.

The rubric is check criteria (no model), the judge scripted ("Yes" likely when the response
holds "blue"), the generator scripted: the route is what is tested."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select

from rubricsvc.apikeys import create_key
from rubricsvc.backends import backend_from_spec
from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.backends.types import GenerationRequest
from rubricsvc.db import make_engine, session_scope
from rubricsvc.errors import ConflictError
from rubricsvc.evolution.store import name_keys
from rubricsvc.models import (
    EvolutionRun,
    EvolutionStep,
    EvolutionTrack,
    EvolvedCriterion,
    RewardGroupMember,
    RunDoor,
    StepOutcome,
)
from rubricsvc.rubrics.generator import GeneratorSpec
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.versions import save_rubric
from tests.api_harness import api_client, bearer
from tests.helpers import approve_rubrics, check_criterion
from tests.integration.test_reward_groups import EVOLUTION, STORM
from tests.integration.test_trainer_evolution import BLUE, BLUE_JUDGE
from tests.integration.test_trainer_rewards import FAILING_JUDGE
from trainer.config import ScorerSettings
from trainer.rewards import RubricReward

RUN = "access-run"
TEXTS = ["The sea is blue.", "The sea is grey."]


def _body(texts: list[str], prompt: str = "ev-sea", **extra: Any) -> dict[str, Any]:
    items = [{"prompt_id": prompt, "completion": t} for t in texts]
    return {"judge": "blue-judge", "items": items, **extra}


@pytest.fixture
def url(database_url: str) -> str:
    """SQLite and PostgreSQL (its row locks are what a track's step numbering rests on)."""
    approve_rubrics(database_url, judges=[BLUE_JUDGE, FAILING_JUDGE])
    return database_url


def _reviewer(url: str) -> dict[str, str]:
    """The headers of a key with the score and review scopes (a trainer's that may create
    runs and use drafts), named ``reviewer``."""
    return bearer(_read(url, lambda s: create_key(s, "reviewer", ["score", "review"]).secret))


def _read(url: str, read: Any) -> Any:
    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            return read(session)
    finally:
        engine.dispose()


def test_a_draft_named_by_its_version_needs_what_include_drafts_needs(url: str) -> None:
    draft = {
        "name": "ev/draft",
        "prompt": {"external_id": "ev-sea", "text": "Write one sentence about the sea."},
        "criteria": [check_criterion("Names the sea", {"type": "contains", "text": "sea"})],
    }
    _read(url, lambda s: save_rubric(s, RubricSpec.model_validate(draft)))  # never approved
    item = {"prompt_id": "ev-sea", "completion": "The sea is blue.", "rubric": "ev/draft@1"}
    body = {"judge": "blue-judge", "items": [item]}
    with api_client(url, [BLUE]) as (client, keys):
        score, review = bearer(keys["score"]), _reviewer(url)
        named = client.post("/v1/rewards", json=body, headers=score)
        assert named.status_code == 403, named.text
        assert named.json()["error"]["message"].startswith(
            "ev/draft@1 is a draft no person has approved"
        )
        asked = client.post("/v1/rewards", json={**body, "include_drafts": True}, headers=score)
        assert asked.status_code == 403, asked.text  # as before: the review scope
        # Naming a draft is asking for it: the review key asks too, then gets it.
        unasked = client.post("/v1/rewards", json=body, headers=review)
        assert unasked.status_code == 403, unasked.text
        reviewed = client.post("/v1/rewards", json={**body, "include_drafts": True}, headers=review)
        assert reviewed.status_code == 200, reviewed.text
        assert reviewed.json()["results"][0]["rubric"] == "ev/draft@1"
        assert reviewed.json()["rewards"] == [1.0]
        job = client.post(
            "/v1/score-jobs",
            json={"judge": "blue-judge", "prompt_ids": ["ev-sea"], "rubric": "ev/draft@1"},
            headers=score,
        )
        assert job.status_code == 403, job.text  # a score job naming it: the same rule
        approved = {**item, "rubric": "ev/blue@1"}
        plain = client.post(
            "/v1/rewards", json={"judge": "blue-judge", "items": [approved]}, headers=score
        )
        assert plain.status_code == 200, plain.text


def test_an_evolution_run_is_created_by_a_key_allowed_to_and_used_by_the_keys_it_names(
    url: str,
) -> None:
    body = _body(TEXTS, group_size=2, evolution=RUN)
    with api_client(url, [BLUE], evolution=EVOLUTION) as (client, keys):
        score = bearer(keys["score"])
        refused = client.post("/v1/rewards", json=body, headers=score)
        assert refused.status_code == 403, refused.text
        assert "may not create one" in refused.json()["error"]["message"]
        assert _read(url, lambda s: s.scalars(select(EvolutionRun)).all()) == []
        assert _read(url, lambda s: s.scalars(select(RewardGroupMember)).all()) == []

        created = client.post("/v1/rewards", json=body, headers=_reviewer(url))
        assert created.status_code == 200, created.text
        run = _read(url, lambda s: s.scalars(select(EvolutionRun)).one())
        assert (run.created_by, run.key_names, run.door) == (
            "reviewer",
            ["reviewer"],
            RunDoor.SERVER,
        )
        # Evolved at step 0: the next group is judged under a draft no person approved.
        not_named = client.post("/v1/rewards", json=body, headers=score)
        assert not_named.status_code == 403, not_named.text
        assert "is not open to key 'test-score'" in not_named.json()["error"]["message"]

        _read(url, lambda s: name_keys(s, RUN, add=["test-score"]))
        opened = client.post("/v1/rewards", json=body, headers=score)
        assert opened.status_code == 200, opened.text
        evolved = f"evolved/{RUN}/prompt-1@1"
        assert {r["rubric"] for r in opened.json()["results"]} == {evolved}
        # The same version named outside the run is a draft by name.
        by_name = [{"prompt_id": "ev-sea", "completion": TEXTS[0], "rubric": evolved}]
        named = client.post(
            "/v1/rewards", json={"judge": "blue-judge", "items": by_name}, headers=score
        )
        assert named.status_code == 403, named.text
        admin = client.post("/v1/rewards", json=body, headers=bearer(keys["admin"]))
        assert admin.status_code == 200, admin.text
    steps = _read(url, lambda s: [st.step for st in s.scalars(select(EvolutionStep))])
    assert sorted(steps) == [0, 1, 2]


def test_a_group_whose_judge_is_down_is_answered_503_and_changes_no_rubric(url: str) -> None:
    """Step 0 grows the storm prompt's set with the blue judge. The next group's judge fails on
    every verdict (an outage, nothing the responses did): 503, and the evolved criteria stay
    active, no step is taken, the track stays where it was."""
    approve_rubrics(url, STORM)
    texts = ["A blue wind howled.", "Rain fell."]
    body = {
        "judge": "blue-judge",
        "items": [{"prompt_id": "gr-storm", "completion": t} for t in texts],
        "group_size": 2,
        "evolution": RUN,
    }

    def state(session: Any) -> Any:
        track = session.scalars(select(EvolutionTrack)).one()
        criteria = {c.text: c.state for c in session.scalars(select(EvolvedCriterion))}
        return track.current_version_id, len(track.steps), criteria

    with api_client(url, [], evolution=EVOLUTION) as (client, _keys):
        review = _reviewer(url)
        first = client.post("/v1/rewards", json=body, headers=review)
        assert first.status_code == 200, first.text
        before = _read(url, state)
        assert before[1] == 1 and list(before[2].values()).count("active") == 2
        down = client.post("/v1/rewards", json={**body, "judge": "always-fails"}, headers=review)
        assert down.status_code == 503, down.text
        assert down.json()["error"]["code"] == "judge_unavailable"
    assert _read(url, state) == before


def _one_criterion_at_a_time() -> Any:
    """A generator that proposes one new criterion per call."""
    texts = iter(
        ["Names a colour of the water", "Describes the waves", "Is one sentence long"]
        + [f"Mentions thing number {n}" for n in range(10)]
    )

    def propose(_request: GenerationRequest) -> str:
        text = next(texts)
        return f'{{"criteria": [{{"text": "{text}", "category": "optional", "theme": "style"}}]}}'

    generator = ScriptedBackend(text=propose)

    def build(choice: Any) -> Any:
        return generator if isinstance(choice, GeneratorSpec) else backend_from_spec(choice)

    return build


SKY = {
    "name": "ev/sky",
    "prompt": {"external_id": "ev-sky", "text": "Write one sentence about the sky."},
    "criteria": [
        check_criterion(f"Uses the word {w}", {"type": "contains", "text": w})
        for w in ("blue", "sky", "cloud")
    ],
}


def test_a_groups_admission_counts_the_evolved_set_it_may_be_judged_under(url: str) -> None:
    """max_active 3, max_new 1: a group of 2 is judged under up to 3 evolved criteria besides
    the persistent ones, and its step judges 1 more. The sky rubric (3 checks) would plan
    2 x (3 + 3 + 1) = 14 judgments, past the bound of 12: refused at once, nothing waits. The
    sea rubric (2 checks) plans 12: admitted, and its set grows to 3 evolved criteria over
    five groups, each answered."""
    evolution = {**EVOLUTION, "max_active": 3, "max_new": 1}
    with api_client(
        url,
        [BLUE, SKY],
        evolution=evolution,
        max_reward_judgments=12,
        build_backend=_one_criterion_at_a_time(),
    ) as (client, _keys):
        review = _reviewer(url)
        sky = client.post(
            "/v1/rewards",
            json=_body(["A blue sky.", "Grey clouds."], "ev-sky", group_size=2, evolution=RUN),
            headers=review,
        )
        assert sky.status_code == 413, sky.text
        assert sky.json()["error"]["field"] == "body.group_size"
        assert sky.json()["error"]["message"].startswith(
            "14 judgments planned for a group of 2 rollouts like the 2 sent (6 judgments, and "
            "up to 4 evolved criteria over the group): at most 12 per reward request"
        )
        assert _read(url, lambda s: s.scalars(select(RewardGroupMember)).all()) == []
        rubrics = []
        for _ in range(5):
            sea = client.post(
                "/v1/rewards", json=_body(TEXTS, group_size=2, evolution=RUN), headers=review
            )
            assert sea.status_code == 200, sea.text
            rubrics.append(sea.json()["results"][0]["rubric"])
    assert rubrics[0] == "ev/blue@1"
    assert rubrics[1:] == [f"evolved/{RUN}/prompt-1@{n}" for n in (1, 2, 3, 3)]
    steps = _read(url, lambda s: [(st.step, st.outcome) for st in s.scalars(select(EvolutionStep))])
    assert [step for step, _ in steps] == [0, 1, 2, 3, 4]
    assert [outcome for _, outcome in steps][:3] == [StepOutcome.EVOLVED] * 3


def test_a_run_name_is_stepped_by_one_door_a_server_or_a_trainer(url: str) -> None:
    settings = ScorerSettings.model_validate(
        {"judge": "blue-judge", "database_url": url, "evolution": EVOLUTION}
    )
    group: dict[str, Any] = {
        "prompts": ["Write one sentence about the sea."] * 2,
        "completions": TEXTS,
        "prompt_id": ["ev-sea"] * 2,
        "trainer_state": SimpleNamespace(global_step=0),
    }
    with api_client(url, [BLUE], evolution=EVOLUTION) as (client, _keys):
        review = _reviewer(url)
        served = client.post(
            "/v1/rewards", json=_body(TEXTS, group_size=2, evolution="shared"), headers=review
        )
        assert served.status_code == 200, served.text
        trainer = RubricReward(settings, evolution_run="shared")
        with pytest.raises(ConflictError, match="stepped by the server"):
            trainer(**group)
        assert trainer.evolution is not None
        trainer.evolution.close()

        own = RubricReward(settings, evolution_run="trained")
        assert all(r is not None for r in own(**group))
        assert own.evolution is not None
        assert [r.step for r in own.evolution.last_reports] == [0]
        own.evolution.close()
        refused = client.post(
            "/v1/rewards", json=_body(TEXTS, group_size=2, evolution="trained"), headers=review
        )
        assert refused.status_code == 409, refused.text
        assert "stepped by the trainer" in refused.json()["error"]["message"]
    # The served run's one step, never replayed by the trainer.
    steps = _read(
        url,
        lambda s: sorted(
            (t.run.name, st.step) for t in s.scalars(select(EvolutionTrack)) for st in t.steps
        ),
    )
    assert steps == [("shared", 0), ("trained", 0)]


def test_a_servers_failing_generator_raises_the_same_alarm_as_a_trainers(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    failing = {
        **EVOLUTION,
        "generator": {"backend": "scripted", "backend_options": {"reply": "no JSON here"}},
    }
    with (
        caplog.at_level(logging.WARNING, logger="rubricsvc.evolution.loop"),
        api_client(url, [BLUE], evolution=failing) as (client, _keys),
    ):
        answer = client.post(
            "/v1/rewards",
            json=_body(TEXTS, group_size=2, evolution=RUN),
            headers=_reviewer(url),
        )
        assert answer.status_code == 200, answer.text
    assert "the generator failed for 1 of 1 prompts" in caplog.text
    outcomes = _read(url, lambda s: [st.outcome for st in s.scalars(select(EvolutionStep))])
    assert outcomes == [StepOutcome.GENERATOR_FAILED]
