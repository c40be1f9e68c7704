"""The RL rung's reward (rubricsvc/distill/grpo.py): the sampled verdict token against the label,
1 when they agree, 0 when they do not, and a token that is no verdict charged. No model: the
verdict tokens are given as ids."""

from __future__ import annotations

from typing import Any

import pytest

from rubricsvc.distill.grpo import ReinforceSettings, VerdictReward, VerdictTokens

YES, YES_LOWER, NO, NO_LOWER, GARBAGE = 10, 11, 20, 21, 99
TOKENS = VerdictTokens(frozenset({YES, YES_LOWER}), frozenset({NO, NO_LOWER}))


def test_the_right_verdict_earns_one_the_wrong_zero_and_garbage_is_charged() -> None:
    reward = VerdictReward(TOKENS)
    assert reward.reward([YES], 1.0) == 1.0
    assert reward.reward([NO_LOWER], 0.0) == 1.0
    assert reward.reward([NO], 1.0) == 0.0
    assert reward.reward([YES_LOWER], 0.0) == 0.0
    # Only the first token is the verdict, as criterion-prob reads it.
    assert reward.reward([NO, YES], 0.0) == 1.0
    # A label of 0.5 or more is "met", as the gate counts agreement.
    assert reward.reward([YES], 0.5) == 1.0 and reward.reward([NO], 0.49) == 1.0
    # No verdict: never better than a wrong one, and as bad as asked.
    assert reward.reward([GARBAGE], 1.0) == 0.0 == reward.reward([], 0.0)
    charged = VerdictReward(TOKENS, unparseable=-1.0)
    assert charged.reward([GARBAGE], 1.0) == -1.0 and charged.reward([], 0.0) == -1.0
    assert charged.reward([NO], 1.0) == 0.0
    with pytest.raises(ValueError, match="at most"):
        VerdictReward(TOKENS, unparseable=0.5)
    with pytest.raises(ValueError, match="unparseable_reward"):
        ReinforceSettings.model_validate({"unparseable_reward": 1.0})


def test_the_reward_takes_trls_arguments_and_logs_the_verdicts_shares() -> None:
    logged: dict[str, float] = {}

    def log_metric(name: str, value: float) -> None:
        logged[name] = value

    reward = VerdictReward(TOKENS)
    kwargs: dict[str, Any] = {"trainer_state": None, "log_extra": None}
    rewards = reward(
        prompts=[[{"role": "user", "content": "q"}]] * 4,
        completions=[[{"role": "assistant", "content": c}] for c in ("Yes", "No", "x", "yes")],
        completion_ids=[[YES], [NO], [GARBAGE], [YES_LOWER]],
        label=[1.0, 1.0, 0.0, 0.0],
        log_metric=log_metric,
        **kwargs,
    )
    assert rewards == [1.0, 0.0, 0.0, 0.0]
    assert logged == {"verdicts/yes": 0.5, "verdicts/unparseable": 0.25}
    assert reward.__name__ == "verdict_correct"
