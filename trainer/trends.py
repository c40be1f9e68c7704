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


@dataclass(frozen=True)
class _Cells:
    """The answers summed per (prompt, step) cell, cells ordered by prompt: all the slope
    needs. A step's answers of one prompt share their time in every order of the steps, so
    the slope is a sum over cells, not answers (a group of rollouts per prompt and step is one
    cell), and no answers-by-prompts matrix is built."""

    step_of: np.ndarray  # each cell's step (index into the steps)
    answers: np.ndarray  # answers in each cell
    y_sums: np.ndarray  # each cell's sum of the scores centred within their prompt
    prompt_starts: np.ndarray  # where each prompt's cells start
    prompt_answers: np.ndarray  # answers per prompt

    @classmethod
    def of(cls, prompt_of: np.ndarray, step_of: np.ndarray, y: np.ndarray, steps: int) -> _Cells:
        cell = prompt_of * steps + step_of
        codes, inverse = np.unique(cell, return_inverse=True)  # sorted: by prompt, then step
        prompts = codes // steps
        return cls(
            step_of=codes % steps,
            answers=np.bincount(inverse).astype(float),
            y_sums=np.bincount(inverse, weights=y),
            prompt_starts=np.flatnonzero(np.r_[True, prompts[1:] != prompts[:-1]]),
            prompt_answers=np.bincount(prompt_of).astype(float)[np.unique(prompts)],
        )


def _slopes(cells: _Cells, orders: np.ndarray) -> np.ndarray:
    """The within-prompt slope of the scores for each row of ``orders`` (the time of each
    step): sum of (x - prompt mean of x) * y over answers, over the same sum of squares."""
    x = orders[:, cells.step_of]  # (orders, cells)
    weighted = x * cells.answers
    # y is centred within each prompt, so the prompt means of x drop out of the numerator.
    sxy = x @ cells.y_sums
    per_prompt = np.add.reduceat(weighted, cells.prompt_starts, axis=1)
    sxx = np.einsum("ij,ij->i", weighted, x) - (per_prompt**2 / cells.prompt_answers).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(sxy / sxx)


def _exact_slope(cells: _Cells, times: np.ndarray) -> float:
    """``_slopes`` for the observed order, each sum correctly rounded (``math.fsum``): the
    value a run logs is then the same on every processor. A BLAS product sums in an order its
    kernel for the processor picks (a recorded run and its re-run on another AMD EPYC logged
    slopes that differed in the 16th digit, everything else equal). The step times and
    answer counts are whole numbers, so the sums of squares are exact."""
    x = times[cells.step_of]
    weighted = x * cells.answers
    per_prompt = np.add.reduceat(weighted, cells.prompt_starts)
    sxy = math.fsum((x * cells.y_sums).tolist())
    sxx = math.fsum((weighted * x).tolist()) - math.fsum(
        (per_prompt**2 / cells.prompt_answers).tolist()
    )
    return sxy / sxx if sxx else math.nan


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
    cells = _Cells.of(prompt_of, step_of, y, len(times))
    observed = _exact_slope(cells, times)
    if not math.isfinite(observed):
        return None  # no prompt was seen at two steps: nothing varies within a prompt
    if math.factorial(len(times)) <= permutations:
        orders = np.array([list(o) for o in itertools.permutations(times)])
    else:
        generator = np.random.default_rng(seed)
        orders = np.array([generator.permutation(times) for _ in range(permutations)])
        orders = np.vstack([times[None, :], orders])  # the observed order is one of them
    # In slices, so that memory stays bounded however many cells a run has logged.
    per_slice = max(1, 2_000_000 // len(cells.answers))
    shuffled = np.concatenate(
        [
            _slopes(cells, orders[start : start + per_slice])
            for start in range(0, len(orders), per_slice)
        ]
    )
    # Ties within rounding count as "at least as steep", so a flat score is never a trend.
    tolerance = 1e-12 * max(1.0, abs(observed))
    p_rising = float(np.mean(shuffled >= observed - tolerance))
    p_falling = float(np.mean(shuffled <= observed + tolerance))
    return Trend(float(observed), p_rising, p_falling, len(times), len(rows))
