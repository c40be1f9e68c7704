"""The gold monitor's test: the within-prompt trend, and its permutation test's level under
noise that moves a whole step at once."""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest

from trainer.trends import Observation, trend


def _within_slope_by_least_squares(rows: list[Observation]) -> float:
    """The slope of a regression with one indicator per prompt (numpy), for comparison."""
    prompts = sorted({str(p) for p, _, _ in rows})
    design = np.array(
        [[x] + [1.0 if str(p) == q else 0.0 for q in prompts] for p, x, _ in rows], dtype=float
    )
    target = np.array([y for _, _, y in rows], dtype=float)
    coefficients, *_ = np.linalg.lstsq(design, target, rcond=None)
    return float(coefficients[0])


def test_which_prompts_a_step_drew_does_not_pass_for_a_trend() -> None:
    # An easy prompt drawn early, a hard one late: pooled, the score "falls" steeply; within
    # each prompt it rises by 0.01 a step.
    rows: list[Observation] = [("easy", s, 0.8 + 0.01 * s) for s in range(0, 6)]
    rows += [("hard", s, 0.1 + 0.01 * s) for s in range(4, 10)]
    found = trend(rows)
    assert found is not None
    assert found.slope == pytest.approx(0.01)
    assert found.slope == pytest.approx(_within_slope_by_least_squares(rows))
    assert found.p_rising < 0.001 and found.p_falling == 1.0
    assert (found.steps, found.answers) == (10, 12)


def test_the_slope_matches_a_regression_with_an_intercept_per_prompt() -> None:
    chance = random.Random(3)
    rows: list[Observation] = [
        (chance.choice("abcd"), step, chance.random() + 0.002 * step)
        for step in range(30)
        for _ in range(4)
    ]
    found = trend(rows)
    assert found is not None
    assert found.slope == pytest.approx(_within_slope_by_least_squares(rows))
    assert trend(rows) == found  # the orders are drawn from a fixed seed


def test_three_evaluations_are_never_sure() -> None:
    # Six orders of three steps: the steepest possible rise is still p = 1/6.
    rows: list[Observation] = [(p, s, 0.1 * s) for p in "abcd" for s in (0, 5, 10)]
    found = trend(rows)
    assert found is not None and found.p_rising == pytest.approx(1 / 6)


def test_a_flat_score_is_no_trend_either_way() -> None:
    found = trend([(p, s, 0.25) for p in "ab" for s in range(8)])
    assert found is not None and found.slope == 0.0
    assert found.p_rising == 1.0 and found.p_falling == 1.0


def test_nothing_to_fit_is_no_trend() -> None:
    assert trend([]) is None
    assert trend([("a", 1, 0.5), ("a", 1, 0.7)]) is None  # one step
    assert trend([("a", 1, 0.5), ("b", 2, 0.7)]) is None  # no prompt seen twice


def _null_run(chance: random.Random, steps: int = 40) -> list[Observation]:
    """No trend, but each step's answers share a shock (one policy), as in training."""
    rows: list[Observation] = []
    for step in range(1, steps + 1):
        shock = chance.gauss(0, 0.05)
        for prompt in chance.sample(range(12), 2):
            base = 0.1 + 0.05 * prompt
            rows += [(prompt, step, base + shock + chance.gauss(0, 0.08)) for _ in range(4)]
    return rows


def test_the_test_keeps_its_level_when_a_steps_answers_move_together() -> None:
    chance = random.Random(11)
    runs = 1000
    rejected = 0
    for run in range(runs):
        # 199 orders a run (p in steps of 1/200) keep this quick; the level holds at any count.
        found = trend(_null_run(chance), seed=run, permutations=199)
        assert found is not None
        rejected += found.p_rising < 0.05
    # 0.05 expected; a standard error of 0.0069 at this many runs.
    assert 0.03 <= rejected / runs <= 0.07, rejected / runs


def test_a_real_rise_is_found() -> None:
    chance = random.Random(5)
    rows = [(p, s, y + 0.004 * s) for p, s, y in _null_run(chance)]
    found = trend(rows)
    assert found is not None and found.p_rising < 0.001 and found.p_falling > 0.999


def test_the_logged_slope_is_the_same_on_every_processor() -> None:
    """Each of the slope's sums is correctly rounded, so no BLAS kernel's order of summing (it
    differs between processors) reaches the value a run logs: here it equals the same sums
    done in exact rational arithmetic, on scores whose magnitudes differ enough that summing
    in another order changes the last digits."""
    chance = random.Random(7)
    rows: list[Observation] = [
        (f"p{prompt}", step, chance.choice((1e-9, 1.0, 1e9)) * chance.random())
        for prompt in range(40)
        for step in range(30)
        if chance.random() < 0.8
    ]
    found = trend(rows)
    assert found is not None
    # The same centring and per-cell sums as the trend (sequential, like numpy's bincount).
    prompt_sum: dict[str, float] = {}
    prompt_count: dict[str, int] = {}
    for prompt, _, score in rows:
        prompt_sum[str(prompt)] = prompt_sum.get(str(prompt), 0.0) + score
        prompt_count[str(prompt)] = prompt_count.get(str(prompt), 0) + 1
    cells: dict[tuple[str, float], list[float]] = {}
    for prompt, step, score in rows:
        centred = score - prompt_sum[str(prompt)] / prompt_count[str(prompt)]
        cell = cells.setdefault((str(prompt), float(step)), [0.0, 0.0])
        cell[0] += centred
        cell[1] += 1
    sxy = sum(Fraction(step * total) for (_, step), (total, _) in cells.items())
    per_prompt: dict[str, Fraction] = {}
    sxx = Fraction(0)
    for (prompt, step), (_, answers) in cells.items():
        sxx += Fraction(step * step * answers)
        per_prompt[prompt] = per_prompt.get(prompt, Fraction(0)) + Fraction(step * answers)
    # Each prompt's square over its answers is divided in floating point, as the trend does.
    sxx -= sum(Fraction(float(total**2) / prompt_count[p]) for p, total in per_prompt.items())
    assert found.slope == float(sxy) / float(sxx)
