"""Criterion dropout: seeded draws per (step, group), at least one judged criterion kept,
checks and required criteria never dropped, and the reward the aggregate over what is kept."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from rubricsvc.judging.aggregation import Outcome, race, rar
from rubricsvc.scoring.rewards import RewardResult
from trainer.config import ScorerSettings
from trainer.dropout import apply_dropout, kept_criteria, with_dropout
from trainer.rewards import RubricReward

# Six judged criteria (one a pitfall), one check: (id, weight, value).
JUDGED = [(1, 3, 1.0), (2, 2, 0.0), (3, 2, 1.0), (4, 1, 0.7), (5, 1, 0.2), (6, -2, 1.0)]
CHECK = (7, 1, 1.0)


def entry(criterion_id: int, weight: float, value: float, **extra: Any) -> dict[str, Any]:
    return {"criterion_id": criterion_id, "weight": weight, "value": value, "status": "ok", **extra}


def result(*extra_entries: dict[str, Any]) -> RewardResult:
    criteria = [entry(*c) for c in JUDGED]
    criteria.append(entry(*CHECK, status="check"))
    criteria.extend(extra_entries)
    outcomes = [Outcome(c["criterion_id"], c["weight"], c["value"]) for c in criteria]
    return RewardResult(reward=rar(outcomes, None), status="ok", coverage=1.0, criteria=criteria)


def test_the_same_seed_step_and_group_draw_the_same_criteria() -> None:
    ids = [c for c, _, _ in JUDGED]
    first = kept_criteria(ids, 0.5, seed=3, step=7, group="p1")
    assert first == kept_criteria(ids, 0.5, seed=3, step=7, group="p1")
    assert len(first) == 3  # half of six dropped
    draws = {frozenset(kept_criteria(ids, 0.5, seed=3, step=s, group="p1")) for s in range(20)}
    assert len(draws) > 5  # re-drawn each step
    groups = {frozenset(kept_criteria(ids, 0.5, seed=3, step=7, group=f"p{g}")) for g in range(20)}
    assert len(groups) > 5  # and for each group
    # Another seed, other draws.
    other_seed = [kept_criteria(ids, 0.5, seed=4, step=s, group="p1") for s in range(10)]
    assert other_seed != [kept_criteria(ids, 0.5, seed=3, step=s, group="p1") for s in range(10)]


@pytest.mark.parametrize("share", [0.0, 0.3, 0.5, 0.9, 0.99])
def test_at_least_one_judged_criterion_is_kept(share: float) -> None:
    for n in range(1, 8):
        for step in range(10):
            kept = kept_criteria(range(n), share, seed=0, step=step, group="g")
            assert 1 <= len(kept) <= n
            assert len(kept) == n - min(round(share * n), n - 1)


def test_the_reward_is_the_aggregate_over_the_kept_criteria() -> None:
    kept = {1, 4, 6}
    scored = with_dropout(result(), kept, aggregation="rar", min_coverage=0.8)
    # The kept judged criteria and the check, which is never dropped.
    expected = rar([Outcome(c, w, v) for c, w, v in [*JUDGED, CHECK] if c in kept | {7}], None)
    assert scored.reward == pytest.approx(expected)
    assert scored.reward != pytest.approx(result().reward)
    assert "criterion dropout: rewarded on 4 of 7 criteria" in scored.reasons


def test_a_required_criterion_is_never_dropped_and_its_gate_holds() -> None:
    required = entry(8, 2, 0.0, required=True)  # failed: the score is capped at 0
    scored = with_dropout(result(required), {1}, aggregation="rar", min_coverage=0.8)
    assert scored.reward == 0.0
    assert any("capped" in reason for reason in scored.reasons)


def test_groups_share_a_draw_and_masked_scores_stay_masked() -> None:
    masked = RewardResult(reward=None, status="masked", criteria=[])
    results = [result(), result(), result(), masked]
    out = apply_dropout(
        results, ["a", "a", "b", "b"], 0.5, seed=1, step=2, aggregation="rar", min_coverage=0.8
    )
    assert out[0].reward == out[1].reward  # one group, one draw
    assert out[3] is masked


class FixedScorer:
    """A scorer that returns the same full result for every request (no judge)."""

    def __init__(self, settings: ScorerSettings) -> None:
        self.settings = settings

    def score(self, requests: list[Any]) -> list[RewardResult]:
        return [result() for _ in requests]


def test_the_trl_reward_drops_criteria_per_step_and_logs_both_rewards() -> None:
    settings = ScorerSettings(criterion_dropout=0.5, dropout_seed=0)
    reward = RubricReward(settings, scorer=FixedScorer(settings))  # type: ignore[arg-type]
    logged: dict[str, float] = {}
    prompts, completions = ["P1", "P1", "P2", "P2"], ["a", "b", "c", "d"]
    columns = {"prompt_id": ["p1", "p1", "p2", "p2"], "log_metric": logged.__setitem__}
    by_step = [
        reward(prompts, completions, trainer_state=SimpleNamespace(global_step=step), **columns)
        for step in range(6)
    ]
    for rewards in by_step:
        assert rewards[0] == rewards[1] and rewards[2] == rewards[3]
    assert len({tuple(r) for r in by_step}) > 1  # re-drawn across steps
    assert logged["rubric/reward"] == pytest.approx(result().reward)  # the full rubric's
    assert "rubric/dropout_reward" in logged
    off = RubricReward(ScorerSettings(), scorer=FixedScorer(ScorerSettings()))  # type: ignore[arg-type]
    assert off(prompts, completions, **columns) == [result().reward] * 4


def test_a_reference_relative_reward_keeps_its_relative_form() -> None:
    criteria = [
        {**entry(c, w, v), "reference": r}
        for (c, w, v), r in zip(JUDGED, [0.5, 1.0, 0.2, 0.9, 0.4, 0.0], strict=True)
    ]
    outcomes = [
        Outcome(e["criterion_id"], e["weight"], e["value"], None, False, e["reference"])
        for e in criteria
    ]
    full = RewardResult(reward=race(outcomes, None), status="ok", coverage=1.0, criteria=criteria)
    scored = with_dropout(full, {1, 2, 6}, aggregation="race", min_coverage=0.8)
    kept = [o for o in outcomes if o.criterion_id in {1, 2, 6}]
    assert scored.reward == pytest.approx(race(kept, None))
    assert scored.reward != pytest.approx(rar(kept, None))  # relative, not absolute
