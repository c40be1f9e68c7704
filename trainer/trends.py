"""Whether a score rose or fell beyond its noise: the gold monitor's test.

A score is observed per prompt at steps: the training completions of each step, or the
held-out answers at each evaluation. Its trend is the least-squares slope of the score on the
step *within prompts* (each prompt its own intercept), so that which prompts a step happened
to draw does not pass for a trend.

Whether the slope is more than noise is decided by a permutation test on the steps: the
steps' answers are kept together (they come from one policy and move together) and the
steps' positions in time are shuffled. If the score has no trend, every order of the steps
is as likely as the one observed, so the share of orders whose slope is at least as steep is
an exact p-value, whatever the noise looks like. (A t-test with step-clustered errors, tried
first, rejected 8.7% of trendless runs at a nominal 5% when a step's answers share a shock.)
With few steps the test cannot be sure and says so: three evaluations have six orders, so
their p-value is never below 1/6.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

import numpy as np

# (prompt, step, score): one answer's score.
Observation = tuple[Hashable, float, float]
# Orders of the steps drawn when there are too many to try them all; the p-value's resolution.
PERMUTATIONS = 4000


@dataclass(frozen=True)
class Trend:
    """The within-prompt slope of a score per step, and how often a shuffled order of the
    steps gives one at least as steep either way."""

    slope: float
    p_rising: float  # one-sided, against "the score does not rise"
    p_falling: float  # one-sided, against "the score does not fall"
    steps: int
    answers: int


def _slopes(
    step_of: np.ndarray, orders: np.ndarray, prompt_of: np.ndarray, prompts: int, y: np.ndarray
) -> np.ndarray:
    """The within-prompt slope of ``y`` for each row of ``orders`` (the time of each step)."""
    x = orders[:, step_of]  # (orders, answers)
    counts = np.bincount(prompt_of, minlength=prompts).astype(float)
    indicator = np.zeros((len(prompt_of), prompts))
    indicator[np.arange(len(prompt_of)), prompt_of] = 1.0
    x_centred = x - (x @ indicator / counts)[:, prompt_of]
    sxx = np.einsum("ij,ij->i", x_centred, x_centred)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(x_centred @ y / sxx)


def trend(
    observations: Iterable[Observation], seed: int = 0, permutations: int = PERMUTATIONS
) -> Trend | None:
    """The trend of ``observations``; None where there is none to fit: fewer than two steps,
    or no prompt seen at two steps. ``seed`` draws the ``permutations`` orders (fixed: the
    same data give the same p-values)."""
    rows = list(observations)
    prompt_index: dict[Hashable, int] = {}
    step_index: dict[float, int] = {}
    for prompt, step, _ in rows:
        prompt_index.setdefault(prompt, len(prompt_index))
        step_index.setdefault(float(step), len(step_index))
    if len(step_index) < 2:
        return None
    prompt_of = np.array([prompt_index[p] for p, _, _ in rows])
    step_of = np.array([step_index[float(s)] for _, s, _ in rows])
    scores = np.array([float(v) for _, _, v in rows])
    counts = np.bincount(prompt_of).astype(float)
    y = scores - (np.bincount(prompt_of, weights=scores) / counts)[prompt_of]
    times = np.array(list(step_index), dtype=float)
    observed = _slopes(step_of, times[None, :], prompt_of, len(prompt_index), y)[0]
    if not math.isfinite(observed):
        return None  # no prompt was seen at two steps: nothing varies within a prompt
    if math.factorial(len(times)) <= permutations:
        orders = np.array([list(o) for o in itertools.permutations(times)])
    else:
        generator = np.random.default_rng(seed)
        orders = np.array([generator.permutation(times) for _ in range(permutations)])
        orders = np.vstack([times[None, :], orders])  # the observed order is one of them
    # In slices, so that memory stays bounded however many answers a run has logged.
    per_slice = max(1, 2_000_000 // len(rows))
    shuffled = np.concatenate(
        [
            _slopes(step_of, orders[start : start + per_slice], prompt_of, len(prompt_index), y)
            for start in range(0, len(orders), per_slice)
        ]
    )
    # Ties within rounding count as "at least as steep", so a flat score is never a trend.
    tolerance = 1e-12 * max(1.0, abs(observed))
    p_rising = float(np.mean(shuffled >= observed - tolerance))
    p_falling = float(np.mean(shuffled <= observed + tolerance))
    return Trend(float(observed), p_rising, p_falling, len(times), len(rows))
