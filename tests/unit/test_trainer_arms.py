"""The lab's analysis plan over seeds (trainer/arms.py): each outcome read off a run's logs,
arm means with seed-resampling intervals, differences from the baseline and their verdicts,
with figures a reader can check by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainer.arms import (
    arms_section,
    difference_interval,
    held_out_gold_change,
    mean_interval,
    training_gold_change,
    verdict,
)
from trainer.report import Point, RunRecord


def run(
    group: str,
    seed: int,
    held_out_gold: list[float],
    train_gold: list[float],
    samples: list[dict[str, Any]] | None = None,
    refreshes: list[dict[str, Any]] | None = None,
) -> RunRecord:
    name = f"{group}-s{seed}"
    config = {"name": name, "group": group, "grpo": {"seed": seed, "max_steps": 10}}
    metrics = [
        {"step": step, "gold/train_reward": value} for step, value in enumerate(train_gold, 1)
    ]
    held_out = [Point(5 * i, 0.5, gold) for i, gold in enumerate(held_out_gold)]
    return RunRecord(
        Path(name), config, metrics, held_out, [], samples or [], refreshes=refreshes or []
    )


def test_each_run_outcome_is_read_off_its_logs() -> None:
    one = run("a", 0, [0.40, None, 0.55, 0.30], [0.1] * 5 + [0.9] * 3 + [0.3] * 4)  # type: ignore[list-item]
    # Held-out: the last evaluation with gold (0.30) minus the first (0.40).
    assert held_out_gold_change(one) == pytest.approx(-0.10)
    # Training: the last five steps (0.9, 0.3 x 4: mean 0.42) minus the first five (0.1).
    assert training_gold_change(one) == pytest.approx((0.9 + 4 * 0.3) / 5 - 0.1)
    short = run("a", 1, [0.4], [0.1] * 9)
    assert held_out_gold_change(short) is None  # one evaluation: nothing to subtract
    assert training_gold_change(short) is None  # nine steps: the two ends would overlap


def test_intervals_resample_seeds_and_stay_within_their_range() -> None:
    assert mean_interval([0.2]) is None
    low, high = mean_interval([0.0, 0.1, 0.2, 0.3])  # type: ignore[misc]
    assert 0.0 <= low < 0.15 < high <= 0.3
    # Every resample of equal seeds has their mean.
    assert mean_interval([0.1, 0.1, 0.1]) == pytest.approx((0.1, 0.1))
    # Arms of constant seeds differ by exactly their difference in every resample.
    assert difference_interval([0.3, 0.3], [0.1, 0.1]) == pytest.approx((0.2, 0.2))
    assert difference_interval([0.3], [0.1, 0.1]) is None
    # The same seed gives the same interval.
    assert mean_interval([0.0, 0.4, 0.1]) == mean_interval([0.0, 0.4, 0.1])


def test_verdicts_follow_the_side_of_zero_the_interval_is_on() -> None:
    assert verdict((0.01, 0.2)) == "helps"
    assert verdict((-0.2, -0.01)) == "hurts"
    assert verdict((-0.01, 0.2)) == "not told apart"
    assert verdict((0.0, 0.2)) == "not told apart"  # touching 0 is not above it
    assert verdict(None) == "too few seeds"


def samples(step: int, proxy: list[float], gold: list[float]) -> list[dict[str, Any]]:
    return [
        {"step": step, "prompt_id": "p", "rubric_reward": p, "gold_reward": g}
        for p, g in zip(proxy, gold, strict=True)
    ]


def test_the_arms_section_tables_each_arm_and_its_difference_from_the_baseline() -> None:
    flat = [0.5] * 10
    rising = [0.5] * 5 + [0.7] * 5  # training gold +0.2
    groups = {
        "baseline": [
            run("baseline", 0, [0.5, 0.4], flat, samples(1, [0.1, 0.2], [1.0, 0.0])),
            run("baseline", 1, [0.5, 0.4], flat, samples(1, [0.1, 0.2], [1.0, 0.0])),
        ],
        "better": [
            run("better", 0, [0.5, 0.6], rising, samples(1, [0.2, 0.1], [1.0, 0.0])),
            run("better", 1, [0.5, 0.7], rising, samples(1, [0.2, 0.1], [1.0, 0.0])),
        ],
    }
    text = "\n".join(arms_section(groups))
    # Held-out gold: baseline -0.1 in both seeds; better +0.1 and +0.2 (mean +0.15).
    assert "| baseline | 2 | -0.100 [-0.100, -0.100] | s0 -0.100, s1 -0.100 |" in text
    assert "| better | 2 | +0.150 [+0.100, +0.200] | s0 +0.100, s1 +0.200 |" in text
    # Agreement: the baseline orders its one pair against gold, the better arm with it.
    assert "| baseline | 2 | 0.000 [0.000, 0.000] | s0 0.000, s1 0.000 |" in text
    assert "| better | 2 | 1.000 [1.000, 1.000] | s0 1.000, s1 1.000 |" in text
    # Against the baseline: +0.25 held out (seeds +0.2, +0.3), +0.2 in training, both helping.
    assert "| better | +0.250 [+0.200, +0.300] | helps | +0.200 [+0.200, +0.200] | helps |" in text
    assert "| baseline | 0 of 2 | 0 |" in text
    # A baseline that is not among the runs: the arms alone.
    assert "against" not in "\n".join(arms_section(groups, baseline="none-such"))
    # One seed per arm: nothing over seeds to say.
    assert arms_section({"a": [groups["baseline"][0]], "b": [groups["better"][0]]}) == []


def test_each_refresh_is_tabled_over_seeds_with_the_agreement_after_minus_before() -> None:
    """Seed 0 swaps at step 2 and its proxy turns from against gold (step 1) to with it (step
    3): +1. Seed 1 keeps its judge and agrees with gold on both sides: 0. Mean +0.5."""
    against, along = [0.1, 0.2], [0.2, 0.1]  # proxy of two completions; gold is 1.0, 0.0
    gold = [1.0, 0.0]
    flat = [0.5] * 10
    refresh = run(
        "refresh",
        0,
        [0.5, 0.5],
        flat,
        samples(1, against, gold) + samples(3, along, gold),
        [{"step": 2, "swapped": True}],
    )
    kept = run(
        "refresh",
        1,
        [0.5, 0.5],
        flat,
        samples(1, along, gold) + samples(3, along, gold),
        [{"step": 2, "swapped": False}],
    )
    plain = [run("baseline", s, [0.5, 0.5], flat, samples(1, along, gold)) for s in (0, 1)]
    text = "\n".join(arms_section({"baseline": plain, "refresh": [refresh, kept]}))
    assert "**Judge refreshes over seeds**" in text
    assert "| refresh | 1 | 2 | 1 of 2 | +0.500 [+0.000, +1.000] | s0 +1.000, s1 +0.000 |" in text
    # No arm refreshed: no such table.
    assert "refreshes over seeds" not in "\n".join(arms_section({"baseline": plain}))
