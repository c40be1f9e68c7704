"""The over-optimization lab's jury reward, on the embedded model: the mean of its members'
rewards (the bundled criterion-prob prompt and the lab's checklist-worded variant), with the
members' spread logged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rubricsvc.judging.config import JudgeSpec, JurySpec
from tests.helpers import approve_rubrics
from tests.requirements import prepared_model_dir
from trainer.config import ScorerSettings
from trainer.rewards import RubricReward

pytestmark = pytest.mark.model

CHECKLIST = Path(__file__).parents[2] / "examples" / "overopt" / "criterion_prob_checklist.txt"
BUNDLED = JudgeSpec(name="bundled", backend="transformers", mode="criterion-prob")
VARIANT = JudgeSpec(
    name="checklist", backend="transformers", mode="criterion-prob", template=str(CHECKLIST)
)
JURY = JudgeSpec(name="jury", jury=JurySpec(members=[BUNDLED, VARIANT]))
SLEEP: dict[str, Any] = {
    "name": "jr/sleep",
    "prompt": {"external_id": "jr-sleep", "text": "How can I sleep better?"},
    "criteria": [
        {"text": "Recommends a regular sleep schedule", "weight": 3},
        {"text": "Recommends sleeping pills", "weight": -2},
    ],
}
ANSWERS = [
    "Go to bed and get up at the same time every day.",
    "Take a sleeping pill every night.",
    "Sleep is nice.",
]


def test_a_jury_reward_is_the_mean_of_its_members_with_their_spread(sqlite_url: str) -> None:
    prepared_model_dir()
    approve_rubrics(sqlite_url, SLEEP, judges=[BUNDLED, VARIANT, JURY])

    def rewards(judge: str) -> tuple[list[float | None], dict[str, float]]:
        logged: dict[str, float] = {}
        reward = RubricReward(ScorerSettings(database_url=sqlite_url, judge=judge))
        values = reward(
            ["How can I sleep better?"] * 3,
            ANSWERS,
            prompt_id=["jr-sleep"] * 3,
            log_metric=logged.__setitem__,
        )
        return values, logged

    bundled, _ = rewards("bundled")
    variant, _ = rewards("checklist")
    jury, logged = rewards("jury")
    assert None not in bundled and None not in variant
    assert bundled != variant  # two prompts, two opinions: the mean is not one of them
    means = [(a + b) / 2 for a, b in zip(bundled, variant, strict=True)]  # type: ignore[operator]
    assert jury == pytest.approx(means, abs=1e-9)
    spreads = [abs(a - b) for a, b in zip(bundled, variant, strict=True)]  # type: ignore[operator]
    assert logged["rubric/jury_spread"] == pytest.approx(sum(spreads) / 3, abs=1e-9)
