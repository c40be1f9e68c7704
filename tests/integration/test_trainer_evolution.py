"""``reward.evolution`` in the trainer's reward, step by step with TRL's reward signature: the
rubric is check criteria (computed, no model), the evolved criteria are judged by a scripted
judge whose "Yes" is likely (0.9) when the response holds "blue" and unlikely (0.1) when not,
and a scripted generator proposes the criteria. Every number below follows from that."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select

from rubricsvc.db import make_engine, session_scope
from rubricsvc.judging.config import JudgeSpec, VerdictMode
from rubricsvc.models import (
    EvolutionStep,
    EvolvedCriterion,
    EvolvedState,
    Origin,
    RubricVersion,
    StepOutcome,
)
from tests.helpers import approve_rubrics, blue_sea_rubric
from tests.integration.test_trainer_rewards import FAILING_JUDGE
from trainer.config import ScorerSettings
from trainer.evolution import direction_agreement
from trainer.rewards import RubricReward

BLUE: dict[str, Any] = blue_sea_rubric("ev/blue", "ev-sea", max_words=8)
BLUE_JUDGE = JudgeSpec(
    name="blue-judge",
    backend="scripted",
    mode=VerdictMode.CRITERION_PROB,
    backend_options={"yes_if_contains": "blue"},
)
PROPOSAL = json.dumps(
    {
        "criteria": [
            {"text": "Names a colour of the water", "category": "important", "theme": "coverage"},
            {"text": "Describes the waves", "category": "optional", "theme": "coverage"},
            {"text": "Is one sentence long", "category": "optional", "theme": "structure"},
        ]
    }
)
COMPLETIONS = [
    "The sea is blue.",  # blue, 4 words: persistent (3 + 1) / 4 = 1.0
    "The blue sea is calm and deep today, truly.",  # blue, 9 words: 3 / 4 = 0.75
    "The sea is grey.",  # 1 / 4 = 0.25
    "The sea is grey and cold and rough and wide today.",  # 0
]
PROMPTS = ["Write one sentence about the sea."] * 4


def _settings(url: str, reply: str = PROPOSAL, **evolution: Any) -> ScorerSettings:
    return ScorerSettings.model_validate(
        {
            "judge": "blue-judge",
            "database_url": url,
            "evolution": {
                "every": 2,
                "max_active": 2,
                "max_new": 3,
                "generator": {"backend": "scripted", "backend_options": {"reply": reply}},
                **evolution,
            },
        }
    )


def _step(reward: RubricReward, step: int) -> tuple[list[float | None], dict[str, float]]:
    metrics: dict[str, float] = {}
    rewards = reward(
        prompts=PROMPTS,
        completions=COMPLETIONS,
        prompt_id=["ev-sea"] * 4,
        trainer_state=SimpleNamespace(global_step=step),
        log_metric=metrics.__setitem__,
    )
    return rewards, metrics


def test_the_reward_evolves_each_prompts_rubric_and_logs_both_parts(
    sqlite_url: str, tmp_path: Path
) -> None:
    approve_rubrics(sqlite_url, BLUE, judges=[BLUE_JUDGE])
    reward = RubricReward(_settings(sqlite_url), evolution_run="ev-run")

    # Step 0: scored under the persistent version, then evolved. The three proposals vary
    # alike (0.9, 0.9, 0.1, 0.1: spread 0.4); max_active 2 keeps the two older ones.
    rewards, metrics = _step(reward, 0)
    assert rewards == pytest.approx([1.0, 0.75, 0.25, 0.0])
    assert {r.rubric for r in reward.last_results} == {"ev/blue@1"}
    assert metrics["evolution/persistent_reward"] == pytest.approx(0.5)
    assert "evolution/evolved_reward" not in metrics  # no evolved criterion scored yet
    assert (metrics["evolution/new"], metrics["evolution/active"]) == (2, 2)
    assert (metrics["evolution/pruned"], metrics["evolution/generator_failures"]) == (0, 0)
    assert metrics["evolution/prompts"] == 1  # one prompt, one generator call
    evolved = "evolved/ev-run/prompt-1@1"

    # Step 1: every reward names the evolved version; not a step to evolve (every 2).
    rewards, metrics = _step(reward, 1)
    assert {r.rubric for r in reward.last_results} == {evolved}
    # rar over persistent (3 + 1) and evolved (3 + 1) weights: (4 x persistent + 4 x 0.9) / 8
    assert rewards == pytest.approx([0.95, 0.825, 0.175, 0.05])
    assert metrics["evolution/persistent_reward"] == pytest.approx(0.5)
    assert metrics["evolution/evolved_reward"] == pytest.approx(0.5)  # (0.9 + 0.9 + 0.1 + 0.1) / 4
    # Of the 6 pairs, the two the evolved part ties are left out; the other 4 agree.
    assert metrics["evolution/direction_agreement"] == 1.0
    assert "evolution/new" not in metrics
    # samples.jsonl records each completion's two parts (the first: blue, 4 words, 0.9).
    assert reward.sample_extras(0) == pytest.approx(
        {"persistent_reward": 1.0, "evolved_reward": 0.9}
    )
    assert reward.sample_extras(4) == {}  # no such completion

    # Step 2: the same proposals again are all refused (two active, one pruned at step 0).
    _, metrics = _step(reward, 2)
    assert (metrics["evolution/refused"], metrics["evolution/new"]) == (3, 0)
    assert metrics["evolution/active"] == 2
    # What `rubricsvc train` leaves in the run directory: the whole history in one file.
    assert reward.evolution is not None
    assert reward.evolution.write_history(tmp_path / "evolution.json")
    history = json.loads((tmp_path / "evolution.json").read_text())
    assert history["run"] == "ev-run" and history["settings"]["max_active"] == 2
    assert [p["current"] for p in history["prompts"]] == [evolved]
    # TRL's steps 0 and 2 evolved (every 2): the track's steps 0 and 1, numbered on the track.
    assert [s["step"] for s in history["histories"]["ev-sea"]["steps_taken"]] == [0, 1]
    reward.evolution.close()
    never_evolved = RubricReward(_settings(sqlite_url), evolution_run="never")
    assert never_evolved.evolution is not None
    assert not never_evolved.evolution.write_history(tmp_path / "none.json")
    never_evolved.evolution.close()

    engine = make_engine(sqlite_url)
    try:
        with session_scope(engine) as session:
            version = session.scalars(
                select(RubricVersion).where(RubricVersion.origin == Origin.EVOLVED)
            ).one()
            assert version.ref == evolved and version.parent is not None
            assert version.parent.ref == "ev/blue@1"
            states = {c.text: c.state for c in session.scalars(select(EvolvedCriterion))}
            assert states == {
                "Names a colour of the water": EvolvedState.ACTIVE,
                "Describes the waves": EvolvedState.ACTIVE,
                "Is one sentence long": EvolvedState.INACTIVE,
            }
            steps = session.scalars(select(EvolutionStep).order_by(EvolutionStep.step)).all()
            assert [s.step for s in steps] == [0, 1]
            assert [r["text"] for r in steps[0].rollouts] == COMPLETIONS
    finally:
        engine.dispose()


def test_a_failing_generator_is_counted_and_training_goes_on(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    approve_rubrics(sqlite_url, BLUE, judges=[BLUE_JUDGE])
    reward = RubricReward(_settings(sqlite_url, reply="no JSON here", every=1), evolution_run="r")
    with caplog.at_level(logging.WARNING, logger="rubricsvc.evolution.loop"):
        for step in (0, 1):
            rewards, metrics = _step(reward, step)
            assert rewards == pytest.approx([1.0, 0.75, 0.25, 0.0])  # the persistent rubric
            assert metrics["evolution/generator_failures"] == 1
            assert metrics["evolution/prompts"] == 1  # the share alarmed on: 1 of 1
            assert metrics["evolution/active"] == 0
    reward.evolution.close()  # type: ignore[union-attr]
    assert "the generator failed for 1 of 1 prompts" in caplog.text


FLAT_JUDGE = JudgeSpec(
    name="flat-judge", backend="scripted", mode=VerdictMode.CRITERION_PROB
)  # "Yes" likely for every response: no criterion it judges separates a group


def test_after_a_judge_refresh_the_evolution_judges_with_the_swapped_judge(
    sqlite_url: str,
) -> None:
    """A refresh swaps the reward's judge (``JudgeRefresh._swap``: the scorer's settings name
    the student) before step 0. The new criteria are then judged by the swapped judge, which
    finds no spread in any: all three are born inactive. Judged by the judge the run started
    with, two would have been added (the first test)."""
    approve_rubrics(sqlite_url, BLUE, judges=[BLUE_JUDGE, FLAT_JUDGE])
    reward = RubricReward(_settings(sqlite_url, every=1), evolution_run="refreshed")
    # What JudgeRefresh._swap does to each scorer of the reward's judge.
    reward.scorer.settings = reward.scorer.settings.model_copy(
        update={"judge": "flat-judge", "mode": None}
    )
    rewards, metrics = _step(reward, 0)
    assert rewards == pytest.approx([1.0, 0.75, 0.25, 0.0])  # check criteria: no judge
    assert (metrics["evolution/new"], metrics["evolution/active"]) == (0, 0)
    assert reward.evolution is not None
    (report,) = reward.evolution.last_reports
    assert report.born_inactive == [
        "Names a colour of the water",
        "Describes the waves",
        "Is one sentence long",
    ]
    assert set(report.spreads.values()) == {0.0}
    reward.evolution.close()


def test_a_judge_outage_in_training_prunes_nothing_and_is_counted(sqlite_url: str) -> None:
    """Step 0 leaves two evolved criteria active. At step 1 the reward's judge is down (every
    call fails: infrastructure), so the evolved criteria's verdicts in the group are failures
    that say nothing of the rollouts: the step prunes and adds nothing."""
    approve_rubrics(sqlite_url, BLUE, judges=[BLUE_JUDGE, FAILING_JUDGE])
    reward = RubricReward(_settings(sqlite_url, every=1), evolution_run="outage")
    _, metrics = _step(reward, 0)
    assert metrics["evolution/active"] == 2
    reward.scorer.settings = reward.scorer.settings.model_copy(
        update={"judge": "always-fails", "mode": None}
    )
    _, metrics = _step(reward, 1)
    assert metrics["evolution/judge_failures"] == 1
    assert (metrics["evolution/pruned"], metrics["evolution/new"]) == (0, 0)
    assert metrics["evolution/active"] == 2
    assert reward.evolution is not None
    (report,) = reward.evolution.last_reports
    assert report.judge_failed and report.error is not None
    assert report.error.startswith("8 of the group's verdicts failed")  # 2 criteria x 4
    reward.evolution.close()
    engine = make_engine(sqlite_url)
    try:
        with session_scope(engine) as session:
            states = [c.state for c in session.scalars(select(EvolvedCriterion))]
            assert states.count(EvolvedState.ACTIVE) == 2
            outcomes = [s.outcome for s in session.scalars(select(EvolutionStep))]
            assert outcomes == [StepOutcome.EVOLVED, StepOutcome.JUDGE_FAILED]
    finally:
        engine.dispose()


def test_direction_agreement_by_hand() -> None:
    """(persistent, evolved) per rollout: the persistent part orders a > b > c, the evolved
    part c > a > b, so of the pairs only a-b agree; a pair the evolved part ties is out."""
    a, b, c, tie = (1.0, 0.9), (0.5, 0.1), (0.2, 0.95), (0.7, 0.9)
    assert direction_agreement([[a, b, c]]) == pytest.approx(1 / 3)
    assert direction_agreement([[a, tie]]) is None
    assert direction_agreement([[(None, 0.5), b]]) is None


def test_evolution_settings_over_http_are_refused_with_what_to_set_instead() -> None:
    with pytest.raises(ValueError, match="evolution_run") as refused:
        ScorerSettings(
            via="http",
            base_url="http://127.0.0.1:1",
            judge="blue-judge",
            evolution={"generator": {"backend": "scripted"}},
        )
    assert "group_size" in str(refused.value)
    # What the message points to is accepted.
    settings = ScorerSettings(
        via="http", base_url="http://127.0.0.1:1", judge="j", evolution_run="r", group_size=8
    )
    assert (settings.evolution_run, settings.group_size) == ("r", 8)
