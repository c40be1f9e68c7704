"""Round 3's brackets (trainer/recovered.py): an arm's share of the oracle's gain over the
control with its interval, undefined where the oracle is not told apart from the control, and
each run's over-optimization onset, with figures a reader can check by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.recovered import (
    bracketed_section,
    gold_peak_step,
    gold_recovered,
    held_out_gold_late_change,
)
from trainer.report import Point, RunRecord


def run(
    group: str,
    seed: int,
    held_out_gold: list[float],
    train_gold: list[float] | None = None,
    proxy: list[float] | None = None,
) -> RunRecord:
    name = f"{group}-s{seed}"
    config = {"name": name, "group": group, "grpo": {"seed": seed, "max_steps": 10}}
    train_gold = train_gold or [0.0] * 10
    proxy = proxy or [0.0] * len(train_gold)
    metrics = [
        {"step": step, "gold/train_reward": gold, "rubric/reward": reward}
        for step, (gold, reward) in enumerate(zip(train_gold, proxy, strict=True), 1)
    ]
    held_out = [Point(5 * i, 0.5, gold) for i, gold in enumerate(held_out_gold)]
    return RunRecord(Path(name), config, metrics, held_out, [])


def test_the_share_is_the_arms_gain_over_the_oracles() -> None:
    # Constant seeds: every resample has the means' share, 0.2 / 0.4.
    found = gold_recovered([0.2, 0.2], [0.0, 0.0], [0.4, 0.4])
    assert found.share == pytest.approx(0.5)
    assert found.interval == pytest.approx((0.5, 0.5))
    assert found.oracle_gain == pytest.approx((0.4, 0.4)) and found.dropped == 0
    # An arm below the control recovers a negative share; above the oracle, more than all.
    assert gold_recovered([-0.1, -0.1], [0.0, 0.0], [0.4, 0.4]).share == pytest.approx(-0.25)
    assert gold_recovered([0.6, 0.6], [0.0, 0.0], [0.4, 0.4]).share == pytest.approx(1.5)
    # Spread seeds: the interval holds the share and is the same for the same seed.
    spread = gold_recovered([0.1, 0.3, 0.2], [0.0, 0.05, -0.05], [0.4, 0.5, 0.3])
    assert spread.share == pytest.approx(0.5)
    assert spread.interval is not None and spread.interval[0] < 0.5 < spread.interval[1]
    assert spread == gold_recovered([0.1, 0.3, 0.2], [0.0, 0.05, -0.05], [0.4, 0.5, 0.3])


def test_no_share_where_the_oracle_does_not_beat_the_control() -> None:
    # The oracle's seeds straddle the control's: some resamples have no gain to share.
    found = gold_recovered([0.1, 0.2], [0.0, 0.1], [-0.1, 0.3])
    assert found.share is None and found.interval is None
    assert found.oracle_gain is not None and found.oracle_gain[0] <= 0
    assert found.dropped > 0 and "not told apart" in found.reason
    one_seed = gold_recovered([0.1], [0.0, 0.1], [0.4, 0.5])
    assert one_seed.share is None and "two seeds" in one_seed.reason


def test_the_onset_is_where_gold_peaks_while_the_proxy_keeps_rising() -> None:
    rising = [0.1 * step for step in range(10)]
    # Gold's 5-step moving mean peaks at step 6 (values 0.2 x 3, then 0.8 x 3, then 0.0 x 4).
    gaming = run("a", 0, [0.0, 0.0], [0.2] * 3 + [0.8] * 3 + [0.0] * 4, rising)
    assert gold_peak_step(gaming) == 6
    # The same gold under a proxy that falls with it: no onset.
    assert gold_peak_step(run("a", 1, [0.0, 0.0], gaming.training("gold/train_reward")[1],
                              rising[::-1])) is None  # fmt: skip
    # Gold rising to the end: no onset.
    assert gold_peak_step(run("a", 2, [0.0, 0.0], rising, rising)) is None


def test_the_section_needs_both_brackets_and_shows_each_arms_share() -> None:
    groups = {
        "control": [run("control", s, [0.3, 0.3]) for s in (0, 1)],
        "oracle": [run("oracle", s, [0.3, 0.7]) for s in (0, 1)],
        "genrm": [run("genrm", s, [0.3, 0.4]) for s in (0, 1)],
    }
    lines = bracketed_section(groups)
    assert "## Gold recovered" in lines
    row = next(line for line in lines if line.startswith("| genrm | held-out gold"))
    assert "0.25 [0.25, 0.25]" in row and "[+0.400, +0.400]" in row
    assert any(line.startswith("| oracle | s0 - / -, s1 - / -") for line in lines)
    assert bracketed_section({k: v for k, v in groups.items() if k != "oracle"}) == []


def test_agreement_is_tabled_by_ten_step_window() -> None:
    def sample(step: int, proxy: float, gold: float) -> dict[str, object]:
        return {"step": step, "prompt_id": "p", "rubric_reward": proxy, "gold_reward": gold}

    # Steps 1-10: the proxy orders the pair as gold does; steps 11-20: the other way round.
    agreeing = [sample(3, 0.9, 1.0), sample(3, 0.1, 0.0)]
    reversed_ = [sample(12, 0.1, 1.0), sample(12, 0.9, 0.0)]
    groups = {
        "control": [run("control", s, [0.3, 0.3]) for s in (0, 1)],
        "oracle": [run("oracle", s, [0.3, 0.7]) for s in (0, 1)],
    }
    for one in groups["control"]:
        one.samples.extend(agreeing + reversed_)
    lines = bracketed_section(groups)
    assert "| arm | steps 1-10 | steps 11-12 |" in lines
    assert "| control | 1.000 [1.000, 1.000] | 0.000 [0.000, 0.000] |" in lines
    assert "| oracle | - | - |" in lines  # no samples: no pair to order


def test_the_secondary_outcome_is_the_mean_of_the_last_three_evaluations() -> None:
    # Start 0.3; the last three evaluations 0.5, 0.2, 0.5 (mean 0.4): +0.1, where the primary
    # outcome (the last evaluation alone) reads +0.2.
    noisy = run("oracle", 0, [0.3, 0.9, 0.5, 0.2, 0.5])
    assert held_out_gold_late_change(noisy) == pytest.approx(0.1)
    assert held_out_gold_late_change(run("oracle", 1, [0.3, 0.5, 0.2])) is None  # 3: too few
    groups = {
        "control": [run("control", s, [0.3, 0.3, 0.3, 0.3]) for s in (0, 1)],
        "oracle": [run("oracle", s, [0.3, 0.6, 0.7, 0.8]) for s in (0, 1)],  # late +0.4
        "genrm": [run("genrm", s, [0.3, 0.4, 0.4, 0.4]) for s in (0, 1)],  # late +0.1
    }
    lines = bracketed_section(groups)
    assert "| oracle | 2 | +0.400 [+0.400, +0.400] | s0 +0.400, s1 +0.400 |" in lines
    row = next(line for line in lines if line.startswith("| genrm | held-out gold, mean of"))
    assert "(secondary)" in row and "0.25 [0.25, 0.25]" in row
