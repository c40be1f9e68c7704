"""The agent reward's weights follow the components that exist: without a citations rubric
there is no citations component, and the default weights still give a reward (the weighted
mean of the other components), while a masked score of a component that exists still masks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from pydantic import ValidationError

from rubricsvc.environments import register_environment
from rubricsvc.scoring.rewards import RewardRequest, RewardResult
from trainer.agent_reward import AgentReward
from trainer.config import AgentSettings, RewardWeights, ScorerSettings
from trainer.environments.deepresearch import RolloutRecord
from trainer.environments.rollouts import Rollout, rollout

STAND_IN = "stand-in-weights"


def _read(messages: Sequence[dict[str, Any]], instance: Any) -> Rollout:
    return rollout(messages, RolloutRecord())


register_environment(STAND_IN, lambda options: object, _read)


class StubScorer:
    """Scores by the rubric a request names: ``scores[None]`` for the reward's own rubric."""

    def __init__(self, scores: dict[str | None, float | None]) -> None:
        self.settings = ScorerSettings()
        self.scores = scores
        self.rubrics: list[str | None] = []

    def score(self, requests: Sequence[RewardRequest]) -> list[RewardResult]:
        results = []
        for request in requests:
            self.rubrics.append(request.rubric)
            value = self.scores[request.rubric]
            results.append(RewardResult(value, "ok" if value is not None else "masked"))
        return results


ANSWER = [{"role": "assistant", "content": "break ends the loop."}]  # no search: 0 turns


def _rewards(agent: AgentSettings, scorer: StubScorer) -> list[float | None]:
    reward = AgentReward(ScorerSettings(), agent, STAND_IN, scorer=scorer)
    return reward(
        prompts=[[{"role": "user", "content": "q"}]],
        completions=[ANSWER],
        environments=[object()],
        prompt_id=["task"],
    )


def test_without_a_citations_rubric_the_default_weights_give_a_reward_over_the_others() -> None:
    scorer = StubScorer({None: 0.8})
    (value,) = _rewards(AgentSettings(citations_rubric=None), scorer)
    # rubric 0.5 x 0.8, format 0.2 x 1, search turns 0.1 x 0, over 0.8 (citations left out).
    assert value == pytest.approx((0.5 * 0.8 + 0.2 * 1.0 + 0.1 * 0.0) / 0.8)
    assert scorer.rubrics == [None]  # no citations rubric was asked for


def test_a_masked_score_of_a_component_that_exists_still_masks_the_reward() -> None:
    scorer = StubScorer({None: 0.8, "task/citations": None})
    assert _rewards(AgentSettings(), scorer) == [None]
    scorer = StubScorer({None: 0.8, "task/citations": 0.5})
    (value,) = _rewards(AgentSettings(), scorer)
    assert value == pytest.approx(0.5 * 0.8 + 0.2 * 0.5 + 0.2 * 1.0 + 0.1 * 0.0)


def test_the_component_weights_leave_out_only_a_component_that_does_not_exist() -> None:
    assert AgentSettings().component_weights() == RewardWeights()
    weights = AgentSettings(citations_rubric=None).component_weights()
    assert weights.citations == 0.0 and weights.rubric == 0.5 and weights.format == 0.2
    with pytest.raises(ValidationError, match="no citations rubric"):
        AgentSettings(
            citations_rubric=None,
            weights=RewardWeights(rubric=0, citations=1, format=0, search_turns=0),
        )
