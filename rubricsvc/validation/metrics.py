"""The statistics behind ``rubricsvc judges evaluate``: how far a judge agrees with human labels.

Plain Python on purpose: scipy and sklearn are not dependencies, and label sets are thousands of
items, not millions, so nothing here needs numpy to be fast. Every function takes paired
sequences, refuses pairs of different lengths (a silent ``zip`` would hide a misaligned join),
and answers None where the statistic is undefined (no items, a constant input), so a report
shows "n/a" instead of a made-up number.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import chain, pairwise
from typing import TypeVar

_A = TypeVar("_A")
_B = TypeVar("_B")


def _paired(a: Sequence[_A], b: Sequence[_B]) -> None:
    if len(a) != len(b):
        raise ValueError(f"paired inputs differ in length: {len(a)} and {len(b)}")


# --- bootstrap ---------------------------------------------------------------------------------


def bootstrap_interval(
    clusters: Sequence[Hashable],
    statistic: Callable[[Sequence[int]], float | None],
    *,
    resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float] | None:
    """The cluster percentile bootstrap interval of ``statistic``.

    Labels come several to a prompt, and the items of one prompt are correlated (an easy prompt
    makes every criterion of it easy). Resampling items would treat them as independent and give
    an interval that is too narrow; resampling prompts (``clusters[i]`` is item i's) keeps each
    prompt's items together, so the interval reflects how many prompts were really labelled.

    ``statistic`` gets the item indices of one resample (a cluster drawn twice gives its items
    twice) rather than copies of the data, so the caller indexes its own arrays and a resample
    costs one list of ints. Resamples where it answers None (say, no positive item drawn) are
    left out; the interval is over the rest, and None when none is left.
    """
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, not {resamples}")
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1, not {level}")
    members: dict[Hashable, list[int]] = {}
    for index, cluster in enumerate(clusters):
        members.setdefault(cluster, []).append(index)
    if not members:
        return None
    groups = list(members.values())
    rng = random.Random(seed)
    values: list[float] = []
    for _ in range(resamples):
        drawn = rng.choices(groups, k=len(groups))
        value = statistic(list(chain.from_iterable(drawn)))
        if value is not None:
            values.append(value)
    if not values:
        return None
    values.sort()
    tail = (1 - level) / 2
    return _quantile(values, tail), _quantile(values, 1 - tail)


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default), so small resample
    counts do not snap the bounds to one draw."""
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    fraction = position - below
    return ordered[below] + (ordered[above] - ordered[below]) * fraction


# --- categorical agreement ---------------------------------------------------------------------


def accuracy(predicted: Sequence[str], truth: Sequence[str]) -> float | None:
    """The share of items where the judge's label is the human one (None for no items)."""
    _paired(predicted, truth)
    if not truth:
        return None
    return sum(1 for p, t in zip(predicted, truth, strict=True) if p == t) / len(truth)


def cohen_kappa(predicted: Sequence[str], truth: Sequence[str]) -> float | None:
    """Agreement beyond what the two label distributions give by chance.

    Accuracy flatters a judge on skewed labels (always saying "pass" when 90% pass scores 0.9);
    kappa scores that judge 0. Computed on integer counts so that perfect agreement is exactly 1.

    When chance agreement is 1 (both sides use one and the same label throughout) kappa is 0/0;
    we answer 1.0 if the observed agreement is also 1 and 0.0 otherwise, because the judge
    reproduced the labels exactly and a report should not show that as undefined.
    """
    _paired(predicted, truth)
    n = len(truth)
    if n == 0:
        return None
    agree = sum(1 for p, t in zip(predicted, truth, strict=True) if p == t)
    by_predicted, by_truth = Counter(predicted), Counter(truth)
    chance = sum(count * by_truth[label] for label, count in by_predicted.items())  # pe * n^2
    if chance == n * n:
        return 1.0 if agree == n else 0.0
    return (n * agree - chance) / (n * n - chance)


def _f1_counts(predicted: Sequence[str], truth: Sequence[str], positive: str) -> float | None:
    tp = fp = fn = 0
    for p, t in zip(predicted, truth, strict=True):
        if p == positive and t == positive:
            tp += 1
        elif p == positive:
            fp += 1
        elif t == positive:
            fn += 1
    if tp + fp + fn == 0:
        return None
    return 2 * tp / (2 * tp + fp + fn)


def f1(predicted: Sequence[str], truth: Sequence[str], positive: str) -> float | None:
    """F1 of the ``positive`` class: for rare failures, where accuracy hides missed ones.

    None when neither side ever says ``positive``: precision and recall are both 0/0 and no
    value would be honest.
    """
    _paired(predicted, truth)
    return _f1_counts(predicted, truth, positive)


def macro_f1(
    predicted: Sequence[str], truth: Sequence[str], classes: Sequence[str]
) -> float | None:
    """The unweighted mean of the per-class F1, so a small class counts as much as a big one.

    A class that neither side uses has no F1 and is left out of the mean rather than counted
    as 0 or 1; None when every class is left out.
    """
    _paired(predicted, truth)
    scores = [s for c in classes if (s := _f1_counts(predicted, truth, c)) is not None]
    return sum(scores) / len(scores) if scores else None


# --- calibration -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReliabilityBin:
    """One equal-width bin of predicted probability: ``[low, high)``, the top bin closed.

    ``mean_prob`` and ``frequency`` (the mean outcome) are None for an empty bin, so a diagram
    can leave a gap instead of drawing a 0.
    """

    low: float
    high: float
    count: int
    mean_prob: float | None
    frequency: float | None


def reliability_bins(
    probs: Sequence[float], outcomes: Sequence[float], bins: int = 10
) -> list[ReliabilityBin]:
    """Every bin, empty ones included, so diagrams of different judges line up.

    Bin edges are ``k / bins`` and an item goes to the bin whose reported edges contain it
    (a bisect over the same edges), so the ``low``/``high`` shown always match the assignment.
    """
    _paired(probs, outcomes)
    if bins < 1:
        raise ValueError(f"bins must be at least 1, not {bins}")
    edges = [k / bins for k in range(bins)] + [1.0]
    prob_sums = [0.0] * bins
    outcome_sums = [0.0] * bins
    counts = [0] * bins
    for prob, outcome in zip(probs, outcomes, strict=True):
        if not 0.0 <= prob <= 1.0:
            raise ValueError(f"a probability must be in [0, 1], not {prob}")
        index = min(bisect_right(edges, prob) - 1, bins - 1)
        prob_sums[index] += prob
        outcome_sums[index] += outcome
        counts[index] += 1
    result: list[ReliabilityBin] = []
    for k, n in enumerate(counts):
        result.append(
            ReliabilityBin(
                low=edges[k],
                high=edges[k + 1],
                count=n,
                mean_prob=prob_sums[k] / n if n else None,
                frequency=outcome_sums[k] / n if n else None,
            )
        )
    return result


def expected_calibration_error(
    probs: Sequence[float], outcomes: Sequence[float], bins: int = 10
) -> float | None:
    """The count-weighted mean gap between stated confidence and observed frequency per bin.

    A probability judge's score is only a usable reward weight if 0.8 means "right 80% of the
    time"; this is how far from that it is on average (0 is perfectly calibrated). None for no
    items.
    """
    table = reliability_bins(probs, outcomes, bins)
    total = sum(b.count for b in table)
    if total == 0:
        return None
    return (
        sum(
            b.count * abs(b.mean_prob - b.frequency)
            for b in table
            if b.mean_prob is not None and b.frequency is not None
        )
        / total
    )


# --- correlation -------------------------------------------------------------------------------


def _constant(values: Sequence[float]) -> bool:
    # Compared exactly: a mean-centred sum of squares can come out a hair above 0 for equal
    # values and would turn a constant input into a meaningless correlation.
    return min(values) == max(values)


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Linear correlation of judge scores with human scores.

    None for fewer than 2 items or a constant side, where it is 0/0.
    """
    _paired(x, y)
    if len(x) < 2 or _constant(x) or _constant(y):
        return None
    n = len(x)
    mean_x, mean_y = math.fsum(x) / n, math.fsum(y) / n
    dx = [v - mean_x for v in x]
    dy = [v - mean_y for v in y]
    covariance = math.fsum(a * b for a, b in zip(dx, dy, strict=True))
    spread = math.sqrt(math.fsum(a * a for a in dx) * math.fsum(b * b for b in dy))
    return max(-1.0, min(1.0, covariance / spread))


def _average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks with tied values sharing the mean of their positions (scipy's "average")."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        rank = (start + end) / 2 + 1
        for position in range(start, end + 1):
            ranks[order[position]] = rank
        start = end + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Rank correlation: whether the judge orders responses as humans do, whatever its scale.

    Pearson on average ranks, so ties (frequent on 1-5 scales) are handled as scipy does.
    """
    _paired(x, y)
    if len(x) < 2 or _constant(x) or _constant(y):
        return None
    return pearson(_average_ranks(x), _average_ranks(y))


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b: the share of concordant minus discordant pairs, corrected for ties.

    Judges on coarse scales tie a lot, and tau-b (unlike tau-a) still reaches 1 for a judge that
    orders all untied pairs correctly. Knight's O(n log n) algorithm, so it stays usable as a
    bootstrap statistic over thousands of items.
    """
    _paired(x, y)
    n = len(x)
    if n < 2 or _constant(x) or _constant(y):
        return None
    pairs = sorted(zip(x, y, strict=True))
    total = n * (n - 1) // 2
    tied_x = _tied_pairs([p[0] for p in pairs])
    tied_xy = _tied_pairs(pairs)
    ys = [p[1] for p in pairs]
    swaps = _count_inversions(ys)  # ys is sorted in place
    tied_y = _tied_pairs(ys)
    # concordant - discordant, from the pairs left once all ties are taken out.
    difference = total - tied_x - tied_y + tied_xy - 2 * swaps
    return max(-1.0, min(1.0, difference / math.sqrt((total - tied_x) * (total - tied_y))))


def _tied_pairs(ordered: Sequence[object]) -> int:
    """Pairs of equal neighbours' runs in a sorted sequence."""
    pairs = 0
    run = 1
    for previous, current in pairwise(ordered):
        if current == previous:
            run += 1
        else:
            pairs += run * (run - 1) // 2
            run = 1
    return pairs + run * (run - 1) // 2


def _count_inversions(values: list[float]) -> int:
    """Strict inversions (a[i] > a[j], i < j) by bottom-up merge sort; sorts ``values``."""
    n = len(values)
    buffer = values[:]
    swaps = 0
    width = 1
    source, target = values, buffer
    while width < n:
        for start in range(0, n, 2 * width):
            middle = min(start + width, n)
            end = min(start + 2 * width, n)
            i, j, k = start, middle, start
            while i < middle and j < end:
                if source[j] < source[i]:
                    target[k] = source[j]
                    swaps += middle - i
                    j += 1
                else:
                    target[k] = source[i]
                    i += 1
                k += 1
            target[k : k + middle - i] = source[i:middle]
            k += middle - i
            target[k : k + end - j] = source[j:end]
        source, target = target, source
        width *= 2
    if source is not values:
        values[:] = source
    return swaps


# --- several labellers per item ----------------------------------------------------------------


def majority(votes: Sequence[str]) -> str | None:
    """The label most labellers gave; None on a tie for the top (or no votes), since picking one
    of the tied labels would invent a gold label the humans did not agree on."""
    ranked = Counter(votes).most_common(2)
    if not ranked or (len(ranked) == 2 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]


def labeller_agreement(items: Sequence[Sequence[str]]) -> float | None:
    """How often two humans labelling the same item agree: the ceiling a judge can be held to.

    The mean over items with at least 2 votes of the share of labeller pairs that agree; None
    when no item has 2 votes.
    """
    shares: list[float] = []
    for votes in items:
        k = len(votes)
        if k < 2:
            continue
        agreeing = sum(c * (c - 1) // 2 for c in Counter(votes).values())
        shares.append(agreeing / (k * (k - 1) // 2))
    return sum(shares) / len(shares) if shares else None


def fleiss_kappa(items: Sequence[Sequence[str]]) -> float | None:
    """Chance-corrected agreement among the human labellers.

    Fleiss' formula assumes every item has the same number of raters, so any other label set
    (or one with fewer than 2 raters per item, or no items) gets None rather than a biased
    value. Computed in exact fractions; when chance agreement is 1 (one label throughout) the
    same convention as ``cohen_kappa`` applies: 1.0 for perfect observed agreement, else 0.0.
    """
    if not items:
        return None
    raters = len(items[0])
    if raters < 2 or any(len(votes) != raters for votes in items):
        return None
    n_items = len(items)
    totals: Counter[str] = Counter()
    agreeing = 0
    for votes in items:
        counts = Counter(votes)
        totals.update(counts)
        agreeing += sum(c * c for c in counts.values()) - raters
    observed = Fraction(agreeing, n_items * raters * (raters - 1))
    chance = Fraction(sum(c * c for c in totals.values()), (n_items * raters) ** 2)
    if chance == 1:
        return 1.0 if observed == 1 else 0.0
    return float((observed - chance) / (1 - chance))
