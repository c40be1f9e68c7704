"""Fitting a calibration map (``judging.calibration.CalibrationMap``) to human labels, behind
``rubricsvc judges calibrate``. Plain Python, no database: scipy and sklearn are not
dependencies, and a label set is thousands of items, so a hand-written Newton step and
pool-adjacent-violators are fast enough and easy to check.

The procedure (``calibrate``): split the labelled prompts in two (``split_prompts``: a seeded
shuffle of the distinct prompts, so the labels of one prompt, which are correlated, are all on
one side), fit the map on one part, and measure the calibration error before and after on the
other, held-out part, where the map has seen nothing. A map measured on its own fit data would
look better than it is, isotonic most of all.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from rubricsvc.judging.calibration import (
    CalibrationMap,
    CalibrationMethod,
    logit,
    sigmoid,
)
from rubricsvc.validation.metrics import (
    ReliabilityBin,
    bootstrap_interval,
    expected_calibration_error,
    reliability_bins,
)

__all__ = [
    "ISOTONIC_MIN_LABELS",
    "CalibrationMap",
    "CalibrationPoint",
    "CalibrationResult",
    "brier_score",
    "calibrate",
    "choose_method",
    "fit_isotonic",
    "fit_platt",
    "method_reason",
    "pool_adjacent_violators",
    "split_prompts",
]

# Isotonic regression fits a free step function: on a few hundred labels it follows their noise
# (steps of a handful of labels, jumps to 0 and 1) and does worse on held-out prompts than the
# two parameters of a Platt sigmoid. With this many fit labels its blocks are large enough to
# trust, and its freedom (any monotone shape) starts to pay.
ISOTONIC_MIN_LABELS = 1000

Method = Literal["auto", "platt", "isotonic"]
_Id = TypeVar("_Id", bound=Hashable)


def choose_method(n: int) -> CalibrationMethod:
    """``isotonic`` with at least ``ISOTONIC_MIN_LABELS`` fit labels, else ``platt``."""
    return "isotonic" if n >= ISOTONIC_MIN_LABELS else "platt"


def method_reason(method: CalibrationMethod, n: int, requested: Method) -> str:
    """Why ``method`` fits ``n`` labels: asked for, or chosen by ``choose_method``'s rule."""
    if requested != "auto":
        return f"{method}: asked for (--method {requested}), on {n} fit labels"
    if method == "isotonic":
        return (
            f"isotonic: {n} fit labels (at least {ISOTONIC_MIN_LABELS}) are enough for a free "
            "monotone step function"
        )
    return (
        f"platt: {n} fit labels (fewer than {ISOTONIC_MIN_LABELS}); isotonic regression would "
        "follow their noise, a 2-parameter sigmoid does not"
    )


# --- the split ---------------------------------------------------------------------------------


def split_prompts(
    prompt_ids: Sequence[_Id], holdout: float, seed: int
) -> tuple[list[_Id], list[_Id]]:
    """``(fit, held_out)``: the distinct prompts, shuffled with ``seed``, the first
    ``round(holdout * n)`` held out (at least one, and at least one left to fit on).

    The same prompts, holdout and seed give the same split whatever order the ids come in."""
    if not 0.0 < holdout < 1.0:
        raise ValueError(f"holdout is a share of the prompts between 0 and 1, not {holdout}")
    distinct = sorted_ids(list(set(prompt_ids)))  # sorted first: the input order is no matter
    if len(distinct) < 2:
        raise ValueError(
            f"{len(distinct)} labelled prompt(s): a split needs at least 2 (one to fit on, one "
            "to measure on)"
        )
    random.Random(seed).shuffle(distinct)
    held = min(max(round(holdout * len(distinct)), 1), len(distinct) - 1)
    return sorted_ids(distinct[held:]), sorted_ids(distinct[:held])


def sorted_ids(ids: Sequence[_Id]) -> list[_Id]:
    """``ids`` in order (by their repr when they do not order: still deterministic)."""
    try:
        return sorted(ids)  # type: ignore[type-var]
    except TypeError:
        return sorted(ids, key=repr)


# --- Platt scaling -----------------------------------------------------------------------------


def _log1p_exp(x: float) -> float:
    """``log(1 + exp(x))`` without overflow."""
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


def fit_platt(
    probs: Sequence[float], outcomes: Sequence[float], *, smooth: bool = True
) -> CalibrationMap:
    """Logistic regression of the outcome on ``logit(p)``: ``sigmoid(a * logit(p) + b)``.

    Newton's method on the two parameters with a backtracking line search (the log loss is
    convex, so it converges from the identity map ``a=1, b=0`` it starts at). ``smooth`` uses
    Platt's targets, ``(positives + 1) / (positives + 2)`` for a met label and
    ``1 / (negatives + 2)`` for another, so a fit set with one class only (or one separated by
    the judge) gets a finite map instead of an infinite slope.

    The map must be monotone: a fit whose slope comes out negative (the judge's probabilities
    run against the labels) is fitted again with slope 0, the constant map to the labels' rate,
    which is the best non-decreasing sigmoid then.
    """
    _check_fit_data(probs, outcomes)
    z = [logit(p) for p in probs]
    positives = sum(1 for y in outcomes if y >= 0.5)
    negatives = len(outcomes) - positives
    if smooth:
        high, low = (positives + 1) / (positives + 2), 1 / (negatives + 2)
        targets = [low + (high - low) * y for y in outcomes]  # 0/1 -> low/high; soft in between
    else:
        targets = list(outcomes)
    rate = math.fsum(targets) / len(targets)
    constant = CalibrationMap(method="platt", params={"a": 0.0, "b": logit(rate)})
    if max(z) - min(z) < 1e-12:
        return constant  # one probability throughout: only the rate can be fitted
    a, b = _newton(z, targets)
    if a < 0:
        return constant
    return CalibrationMap(method="platt", params={"a": a, "b": b})


def _newton(z: Sequence[float], t: Sequence[float]) -> tuple[float, float]:
    def loss(a: float, b: float) -> float:
        # -sum t log s + (1 - t) log(1 - s), with s = sigmoid(u): log(1 + e^u) - t u
        return math.fsum(
            _log1p_exp(a * zi + b) - ti * (a * zi + b) for zi, ti in zip(z, t, strict=True)
        )

    a, b = 1.0, 0.0
    current = loss(a, b)
    for _ in range(100):
        ga = gb = haa = hab = hbb = 0.0
        for zi, ti in zip(z, t, strict=True):
            s = sigmoid(a * zi + b)
            r, w = s - ti, s * (1.0 - s)
            ga += r * zi
            gb += r
            haa += w * zi * zi
            hab += w * zi
            hbb += w
        if math.hypot(ga, gb) < 1e-9 * len(z):
            break
        det = haa * hbb - hab * hab
        if det <= 1e-300:  # flat: a gradient step instead
            da, db = -ga, -gb
        else:
            da = -(hbb * ga - hab * gb) / det
            db = -(haa * gb - hab * ga) / det
        step = 1.0
        while step > 1e-10:
            candidate = loss(a + step * da, b + step * db)
            if candidate <= current:
                break
            step /= 2
        else:
            break  # no step lowers the loss: at the optimum as far as floats can tell
        a, b = a + step * da, b + step * db
        improvement = current - candidate
        current = candidate
        if improvement < 1e-14 * max(1.0, abs(current)) and step * math.hypot(da, db) < 1e-10:
            break
    return a, b


# --- isotonic regression -----------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """A run of consecutive (sorted) inputs pooled to one value: their weighted mean."""

    start: int  # the first input's index
    end: int  # one past the last
    value: float
    weight: float


def pool_adjacent_violators(
    values: Sequence[float], weights: Sequence[float] | None = None
) -> list[Block]:
    """The least-squares non-decreasing fit of ``values`` (in their order), as blocks: a run
    that decreases is pooled into its weighted mean until no two neighbouring blocks do."""
    if weights is None:
        weights = [1.0] * len(values)
    if len(weights) != len(values):
        raise ValueError(f"values and weights differ in length: {len(values)}, {len(weights)}")
    blocks: list[Block] = []
    for index, (value, weight) in enumerate(zip(values, weights, strict=True)):
        block = Block(index, index + 1, value, weight)
        while blocks and blocks[-1].value > block.value:
            last = blocks.pop()
            total = last.weight + block.weight
            mean = (last.value * last.weight + block.value * block.weight) / total
            block = Block(last.start, block.end, mean, total)
        blocks.append(block)
    return blocks


def fit_isotonic(probs: Sequence[float], outcomes: Sequence[float]) -> CalibrationMap:
    """The non-decreasing step function closest to the outcomes (pool-adjacent-violators over
    the judge's distinct probabilities, each weighted by how many labels it has).

    Stored as breakpoints: each block's mean probability ``x`` and its label frequency ``y``;
    ``apply`` interpolates linearly between them (a smoother map than the steps, which is
    still monotone) and is flat outside them."""
    _check_fit_data(probs, outcomes)
    sums: dict[float, list[float]] = {}
    for p, outcome in zip(probs, outcomes, strict=True):
        entry = sums.setdefault(p, [0.0, 0.0])
        entry[0] += outcome
        entry[1] += 1.0
    distinct = sorted(sums)
    means = [sums[p][0] / sums[p][1] for p in distinct]
    weights = [sums[p][1] for p in distinct]
    x: list[float] = []
    y: list[float] = []
    for block in pool_adjacent_violators(means, weights):
        members = range(block.start, block.end)
        x.append(math.fsum(distinct[i] * weights[i] for i in members) / block.weight)
        y.append(min(1.0, max(0.0, block.value)))
    return CalibrationMap(method="isotonic", params={"x": x, "y": y})


def _check_fit_data(probs: Sequence[float], outcomes: Sequence[float]) -> None:
    if len(probs) != len(outcomes):
        raise ValueError(f"probs and outcomes differ in length: {len(probs)}, {len(outcomes)}")
    if not probs:
        raise ValueError("no labels to fit a calibration map on")
    for p in (*probs, *outcomes):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"probabilities and outcomes lie in [0, 1], not {p}")


def fit(
    method: CalibrationMethod, probs: Sequence[float], outcomes: Sequence[float]
) -> CalibrationMap:
    return fit_platt(probs, outcomes) if method == "platt" else fit_isotonic(probs, outcomes)


# --- measuring ---------------------------------------------------------------------------------


def brier_score(probs: Sequence[float], outcomes: Sequence[float]) -> float | None:
    """The mean squared difference between probability and outcome (0 is perfect; None for no
    items). Unlike the ECE it also rewards sharpness: a judge that always says the base rate
    is calibrated (ECE 0) but has a poor Brier score."""
    if len(probs) != len(outcomes):
        raise ValueError(f"paired inputs differ in length: {len(probs)} and {len(outcomes)}")
    if not probs:
        return None
    return math.fsum((p - y) ** 2 for p, y in zip(probs, outcomes, strict=True)) / len(probs)


@dataclass(frozen=True)
class CalibrationPoint:
    """One labelled judgment: the prompt it belongs to (the unit of the split), the judge's
    probability and the label (1.0 met, 0.0 not met)."""

    prompt_id: int
    prob: float
    label: float


@dataclass(frozen=True)
class Measured:
    """How calibrated some probabilities are against their labels."""

    ece: float | None
    brier: float | None
    ece_interval: tuple[float, float] | None  # cluster bootstrap over prompts, 95%
    bins: list[ReliabilityBin]


@dataclass
class CalibrationResult:
    """What ``calibrate`` found: the map, the split and the figures before and after."""

    calibration: CalibrationMap
    method: CalibrationMethod
    reason: str
    holdout: float
    seed: int
    fit_prompts: list[int]
    held_out_prompts: list[int]
    n_fit: int
    n_held_out: int
    before: Measured
    after: Measured
    # after - before on the held-out prompts, with its bootstrap interval (negative: better)
    ece_change: float | None
    ece_change_interval: tuple[float, float] | None
    notes: list[str] = field(default_factory=list)


def calibrate(
    points: Sequence[CalibrationPoint],
    *,
    method: Method = "auto",
    holdout: float = 0.5,
    seed: int = 0,
    bins: int = 10,
    resamples: int = 1000,
) -> CalibrationResult:
    """Split ``points`` by prompt, fit a map on one part, measure it on the other."""
    fit_prompts, held_prompts = split_prompts([p.prompt_id for p in points], holdout, seed)
    fit_side = set(fit_prompts)
    fit_points = [p for p in points if p.prompt_id in fit_side]
    held_points = [p for p in points if p.prompt_id not in fit_side]
    chosen: CalibrationMethod = choose_method(len(fit_points)) if method == "auto" else method
    calibration = fit(chosen, [p.prob for p in fit_points], [p.label for p in fit_points])
    labels = [p.label for p in held_points]
    raw = [p.prob for p in held_points]
    mapped = [calibration.apply(p) for p in raw]
    clusters = [p.prompt_id for p in held_points]

    def measured(probs: list[float]) -> Measured:
        def ece_of(indices: Sequence[int]) -> float | None:
            return expected_calibration_error(
                [probs[i] for i in indices], [labels[i] for i in indices], bins
            )

        return Measured(
            ece=expected_calibration_error(probs, labels, bins),
            brier=brier_score(probs, labels),
            ece_interval=bootstrap_interval(clusters, ece_of, resamples=resamples, seed=seed),
            bins=reliability_bins(probs, labels, bins),
        )

    def change_of(indices: Sequence[int]) -> float | None:
        truth = [labels[i] for i in indices]
        before = expected_calibration_error([raw[i] for i in indices], truth, bins)
        after = expected_calibration_error([mapped[i] for i in indices], truth, bins)
        return None if before is None or after is None else after - before

    before, after = measured(raw), measured(mapped)
    notes = []
    if len({p.label for p in fit_points}) < 2:
        notes.append(
            "the fit labels are all of one class: the map can only move every probability "
            "towards that class"
        )
    return CalibrationResult(
        calibration=calibration,
        method=chosen,
        reason=method_reason(chosen, len(fit_points), method),
        holdout=holdout,
        seed=seed,
        fit_prompts=fit_prompts,
        held_out_prompts=held_prompts,
        n_fit=len(fit_points),
        n_held_out=len(held_points),
        before=before,
        after=after,
        ece_change=change_of(range(len(held_points))),
        ece_change_interval=bootstrap_interval(clusters, change_of, resamples=resamples, seed=seed),
        notes=notes,
    )
