"""The reward pipeline's own decisions, apart from the database and the judge: the item bound
and end tokens (normalize), the work bound (admit), both entries running the same stages,
and the answer's refusal and fill. Its whole path, through both reward routes and the
trainer's scorer, is tested in tests/integration (test_api, test_reward_coalescing,
test_served_costs, test_trainer_rewards, ...)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import create_engine

from rubricsvc.backends.provider import BackendProvider
from rubricsvc.scoring.pipeline import (
    BadMaskedValue,
    Bounds,
    JudgeUnavailable,
    RewardBatch,
    RewardCall,
    RewardPipeline,
    RewardRequest,
    RewardResult,
    TooManyItems,
    TooMuchWork,
    masked_policy,
)
from rubricsvc.scoring.scorer import EvidenceCost, ScoreOptions, Workload

END = "<|im_end|>"


class Recorded(RewardPipeline):
    """A pipeline whose store-judge-aggregate stages are replaced by a record of what reached
    them: each item rewarded with its text's length over 100, ``None`` for an empty text."""

    seen: list[tuple[RewardCall, list[str], bool]]

    def judge_batch(
        self, call: RewardCall, requests: list[RewardRequest], gathered: bool
    ) -> RewardBatch:
        self.seen = [(call, [r.completion for r in requests], gathered)]
        results = [
            RewardResult(len(r.completion) / 100 if r.completion else None, "ok", 1.0)
            for r in requests
        ]
        return RewardBatch(judge=call.judge, judge_config_hash="h", aggregation="rar",
                           results=results)  # fmt: skip


def pipeline(**given: Any) -> Recorded:
    return Recorded(create_engine("sqlite://"), BackendProvider(), **given)


def call() -> RewardCall:
    return RewardCall("embedded", None, ScoreOptions(), False, "rewards")


def test_both_entries_run_the_same_stages_on_the_normalized_requests() -> None:
    """``serve`` (the API's, on an event loop) and ``score`` (the trainer's, on its thread)
    hand the judge stage the same requests: within the item bound, without end tokens."""
    rewards = pipeline(end_tokens=[END], bounds=Bounds(max_reward_items=2))
    requests = [RewardRequest("abc" + END + "\n" + END, "p"), RewardRequest("de", "p")]
    served = asyncio.run(rewards.serve(call(), requests))
    seen_serving = rewards.seen
    scored = rewards.score(call(), requests)
    assert seen_serving == rewards.seen == [(call(), ["abc", "de"], False)]
    assert served.batch.rewards == scored.batch.rewards == [0.03, 0.02]
    with pytest.raises(TooManyItems, match="3 items: at most 2 per request"):
        rewards.score(call(), [*requests, RewardRequest("f", "p")])


def test_without_end_tokens_a_completion_is_judged_as_given() -> None:
    rewards = pipeline()
    text = "abc" + END
    rewards.score(call(), [RewardRequest(text, "p")])
    assert rewards.seen[0][1] == [text]


def test_the_work_bound_names_the_figure_its_parts_and_the_bound() -> None:
    bounded = pipeline(bounds=Bounds(max_reward_judgments=10, max_reward_evidence=100))
    bounded.bound(Workload(judgments=8, checks=2), completions=5)  # at the bound: admitted
    with pytest.raises(TooMuchWork) as judgments:
        bounded.bound(Workload(judgments=9, checks=2), completions=5)
    assert str(judgments.value) == (
        "11 judgments (completions: 5; planned by the judge's mode: 9; check criteria: 2): "
        "at most 10 per reward request; send smaller batches"
    )
    assert (judgments.value.figure, judgments.value.total, judgments.value.bound) == (
        "judgments",
        11,
        10,
    )
    assert judgments.value.field == "items"
    evidence = EvidenceCost(sent_chars=150, passages=1)
    with pytest.raises(TooMuchWork) as costly:
        bounded.bound(Workload(judgments=1, evidence=evidence), completions=1)
    assert costly.value.figure == "evidence" and costly.value.bound == 100
    assert str(costly.value).startswith(f"{evidence.total} evidence cost of citation checks")
    # No bounds given (the trainer's scorer): no work is too much.
    pipeline().bound(Workload(judgments=10**9), completions=1)


def test_a_group_is_projected_at_its_size_with_its_evolved_criteria() -> None:
    """A group holds ``size`` rollouts: a request of fewer projects their judgments up to the
    size; a request of more is judged in several groups of ``size``, so one of them is
    projected, plus the evolved criteria over each of its rollouts (``new_criteria``: those
    the set may still gain and the ``max_new`` its step judges)."""
    bounded = pipeline(bounds=Bounds(max_reward_judgments=10))
    # 2 rollouts of 2 judgments each, groups of 4: 8 judgments, no evolution: admitted.
    bounded.bound_group(Workload(judgments=4), rollouts=2, size=4)
    with pytest.raises(TooMuchWork, match="12 judgments planned for a group of 4") as refused:
        bounded.bound_group(Workload(judgments=6), rollouts=2, size=4)
    assert refused.value.field == "group_size"
    # 4 rollouts of 2 judgments in groups of 2, 3 evolved criteria: each group plans
    # 2 x 2 + 3 x 2 = 10, at the bound; a group of all 4 (20) would not be.
    bounded.bound_group(Workload(judgments=8), rollouts=4, size=2, new_criteria=3)
    with pytest.raises(TooMuchWork, match="11 judgments planned for a group of 2"):
        bounded.bound_group(Workload(judgments=10), rollouts=4, size=2, new_criteria=3)
    # More rollouts than a group and no evolution: the request's own bound is enough.
    bounded.bound_group(Workload(judgments=100), rollouts=4, size=2)


def test_the_answer_refuses_only_when_the_judge_was_unavailable_on_every_item() -> None:
    rewards = pipeline()
    unavailable = RewardBatch(
        judge="j", judge_config_hash="h", aggregation="rar",
        results=[RewardResult(None, "masked", reasons=["the judge backend failed: 503"])],
        failed=2, unavailable=2, retry_after=2.5,
    )  # fmt: skip
    with pytest.raises(JudgeUnavailable) as refused:
        rewards.answer([RewardRequest("a", "p")], unavailable, True, None)
    assert str(refused.value) == (
        "the judge failed on every item (2 judgment(s)): the judge backend failed: 503"
    )
    assert refused.value.retry_after == 2.5
    # Not asked to refuse (OpenRLHF, the trainer): the masked reward is answered, filled.
    answer = rewards.answer([RewardRequest("a", "p")], unavailable, False, 0.25)
    assert answer.filled == [0.25] and answer.batch is unavailable
    # One failure that may not pass: the judge is not the reason, nothing refused.
    unavailable.unavailable = 1
    assert rewards.answer([RewardRequest("a", "p")], unavailable, True, None).filled is None


def test_a_masked_reward_is_filled_with_its_prompts_mean_in_the_request() -> None:
    rewards = pipeline()
    requests = [RewardRequest("a", "p"), RewardRequest("", "p"), RewardRequest("bb", "q")]
    filled = rewards.score(call(), requests, fill_masked="mean").filled
    assert filled == [0.01, 0.01, 0.02]


def test_the_masked_value_is_mean_or_a_finite_number() -> None:
    assert masked_policy(None, "mean") == "mean"
    assert masked_policy(" Mean ", 0.0) == "mean"
    assert masked_policy("-1.5", "mean") == -1.5
    for bad in ("nan", "inf", "half"):
        with pytest.raises(BadMaskedValue, match="masked reward"):
            masked_policy(bad, "mean")
