"""Arms compared over seeds: the over-optimization lab's analysis plan, computed from run logs.

An *arm* is a group of runs (``group`` in their configs) that differ only in their seed. Per run,
four outcomes (docs/overoptimization.md, "Round 2: the analysis plan"):

1. ``held_out_gold``: held-out gold at the last evaluation minus at the first (gold.jsonl).
2. ``training_gold``: training gold (``gold/train_reward``), the mean of the last 5 logged steps
   minus the mean of the first 5.
3. the gold monitor's alarms (its test rule, replayed from the logs as the run report does).
4. ``agreement``: the proxy's within-group agreement with gold over the whole run; for runs that
   refresh their judge, also after each refresh minus before it (``refreshes_over_seeds``).

Per arm, each outcome's mean over its seeds with a percentile bootstrap interval that resamples
seeds, and every seed's value; per arm against a baseline arm, the difference of the means with
an interval that resamples the seeds of each arm independently, and a verdict on it: *helps*
(the interval lies above 0), *hurts* (below 0) or *not told apart*. With a few seeds an interval
of this kind cannot be wider than the seeds' range: it describes the seeds, it is no test at
95%.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trainer.agreement import group_agreement
from trainer.refresh_report import periods


class HeldOutPoint(Protocol):
    @property
    def gold(self) -> float | None: ...


class RunRecord(Protocol):
    """What the analysis reads of a run (``trainer.report.RunRecord`` has it)."""

    @property
    def seed(self) -> int: ...

    @property
    def held_out(self) -> Sequence[HeldOutPoint]: ...

    @property
    def samples(self) -> list[dict[str, Any]]: ...

    @property
    def refreshes(self) -> list[dict[str, Any]]: ...

    def training(self, key: str) -> tuple[list[int], list[float]]: ...

    def test_alarms(self, alpha: float | None = None) -> list[int]: ...


TRAIN_GOLD = "gold/train_reward"
ENDS = 5  # steps averaged at each end of the training-gold curve
RESAMPLES = 10_000
SEED = 0
LEVEL = 0.95


def held_out_gold_change(run: RunRecord) -> float | None:
    """Held-out gold at the run's last evaluation minus at its first; None with fewer than two."""
    gold = [p.gold for p in run.held_out if p.gold is not None]
    return gold[-1] - gold[0] if len(gold) >= 2 else None


def training_gold_change(run: RunRecord, ends: int = ENDS) -> float | None:
    """Training gold, the mean of the last ``ends`` logged steps minus that of the first
    ``ends``; None when the run logged fewer than ``2 x ends`` steps of it (the two ends would
    share steps)."""
    _, values = run.training(TRAIN_GOLD)
    if len(values) < 2 * ends:
        return None
    return statistics.fmean(values[-ends:]) - statistics.fmean(values[:ends])


def agreement(run: RunRecord) -> float | None:
    """The proxy's within-group agreement with gold over the run's recorded samples."""
    return group_agreement(run.samples, interval=False).agreement


# The outcomes a run is summed up by, in the plan's order (alarms are counted apart).
OUTCOMES: dict[str, tuple[str, Callable[[RunRecord], float | None]]] = {
    "held_out_gold": ("held-out gold, end - start", held_out_gold_change),
    "training_gold": ("training gold, last 5 - first 5 steps", training_gold_change),
    "agreement": ("proxy's within-group agreement with gold", agreement),
}


def percentile_interval(values: Sequence[float], level: float) -> tuple[float, float]:
    """The central ``level`` interval of ``values`` (bootstrap statistics), by linear
    interpolation between order statistics."""
    tail = (1 - level) / 2
    ordered = sorted(values)
    last = len(ordered) - 1

    def at(q: float) -> float:
        position = q * last
        low = int(position)
        high = min(low + 1, last)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

    return at(tail), at(1 - tail)


def mean_interval(
    values: Sequence[float], *, resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL
) -> tuple[float, float] | None:
    """The percentile bootstrap interval of the mean of ``values`` (seeds resampled); None for
    fewer than two values."""
    if len(values) < 2:
        return None
    rng = random.Random(seed)
    means = [statistics.fmean(rng.choices(values, k=len(values))) for _ in range(resamples)]
    return percentile_interval(means, level)


def difference_interval(
    arm: Sequence[float],
    baseline: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
) -> tuple[float, float] | None:
    """The percentile bootstrap interval of mean(arm) - mean(baseline), the seeds of each
    resampled independently; None unless each has two values or more."""
    if len(arm) < 2 or len(baseline) < 2:
        return None
    rng = random.Random(seed)
    differences = [
        statistics.fmean(rng.choices(arm, k=len(arm)))
        - statistics.fmean(rng.choices(baseline, k=len(baseline)))
        for _ in range(resamples)
    ]
    return percentile_interval(differences, level)


def verdict(interval: tuple[float, float] | None) -> str:
    """What a difference's interval says: helps (above 0), hurts (below 0), not told apart."""
    if interval is None:
        return "too few seeds"
    low, high = interval
    if low > 0:
        return "helps"
    if high < 0:
        return "hurts"
    return "not told apart"


@dataclass(frozen=True)
class ArmOutcome:
    """One outcome of one arm: each seed's value (seed order; None where the run has none),
    their mean and its interval."""

    values: tuple[tuple[int, float | None], ...]
    mean: float | None
    interval: tuple[float, float] | None

    @property
    def present(self) -> list[float]:
        return [v for _, v in self.values if v is not None]


def arm_outcome(
    runs: Sequence[RunRecord], measure: Callable[[RunRecord], float | None]
) -> ArmOutcome:
    values = tuple((run.seed, measure(run)) for run in sorted(runs, key=lambda r: r.seed))
    present = [v for _, v in values if v is not None]
    return ArmOutcome(
        values,
        statistics.fmean(present) if present else None,
        mean_interval(present),
    )


def _number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:+.{digits}f}"


def _plain(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _interval(interval: tuple[float, float] | None, signed: bool = True) -> str:
    if interval is None:
        return ""
    show = _number if signed else _plain
    return f" [{show(interval[0])}, {show(interval[1])}]"


def _seeds(outcome: ArmOutcome, signed: bool = True) -> str:
    show = _number if signed else _plain
    return ", ".join(f"s{seed} {show(value)}" for seed, value in outcome.values)


def format_outcome_rows(outcomes: Mapping[str, ArmOutcome], signed: bool = True) -> list[str]:
    """Markdown table rows, an arm each: its seeds, mean [interval], and each seed's value."""
    show = _number if signed else _plain
    return [
        f"| {arm} | {len(outcome.present)} | {show(outcome.mean)}"
        f"{_interval(outcome.interval, signed)} | {_seeds(outcome, signed)} |"
        for arm, outcome in outcomes.items()
    ]


def arms_section(
    groups: Mapping[str, Sequence[RunRecord]], baseline: str | None = "baseline"
) -> list[str]:
    """The plan's tables as Markdown lines: each arm's outcomes over its seeds, each arm's
    difference from ``baseline`` (when that arm is among the runs), and alarms per arm.
    Empty when no arm has two seeds."""
    if not any(len(runs) >= 2 for runs in groups.values()):
        return []
    outcomes = {
        arm: {key: arm_outcome(runs, measure) for key, (_, measure) in OUTCOMES.items()}
        for arm, runs in groups.items()
    }
    lines = [
        "## Arms over seeds",
        "",
        f"Each arm's mean over its seeds with a {LEVEL:.0%} percentile bootstrap interval "
        f"resampling seeds ({RESAMPLES:,} resamples, seed {SEED}), and each seed's value. With "
        "a few seeds the interval cannot be wider than the seeds' range: it describes them.",
        "",
    ]
    for key, (title, _) in OUTCOMES.items():
        lines += [
            f"**{title}**",
            "",
            "| arm | seeds | mean [interval] | each seed |",
            "| --- | --- | --- | --- |",
            *format_outcome_rows(
                {arm: found[key] for arm, found in outcomes.items()}, signed=key != "agreement"
            ),
            "",
        ]
    lines += ["**Gold monitor alarms** (its test rule, replayed from the logs)", ""]
    lines += ["| arm | runs that alarm | alarms |", "| --- | --- | --- |"]
    for arm, runs in groups.items():
        alarms = [len(run.test_alarms()) for run in runs]
        lines.append(f"| {arm} | {sum(1 for a in alarms if a)} of {len(runs)} | {sum(alarms)} |")
    lines.append("")
    lines += refreshes_over_seeds(groups)
    if baseline is None or baseline not in outcomes:
        return lines
    lines += [
        f"**Each arm against {baseline}**: the difference of the means, with a {LEVEL:.0%} "
        "interval resampling the seeds of each arm independently; *helps* where the interval "
        "lies above 0, *hurts* where below, else *not told apart* at this many seeds.",
        "",
        "| arm | held-out gold: difference [interval] | verdict | training gold: difference "
        "[interval] | verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    base = outcomes[baseline]
    for arm, found in outcomes.items():
        if arm == baseline:
            continue
        cells = []
        for key in ("held_out_gold", "training_gold"):
            mine, theirs = found[key], base[key]
            difference = (
                None if mine.mean is None or theirs.mean is None else mine.mean - theirs.mean
            )
            interval = difference_interval(mine.present, theirs.present)
            cells.append(f"{_number(difference)}{_interval(interval)} | {verdict(interval)}")
        lines.append(f"| {arm} | {' | '.join(cells)} |")
    lines.append("")
    return lines


def refreshes_over_seeds(groups: Mapping[str, Sequence[RunRecord]]) -> list[str]:
    """For each arm whose runs refreshed their judge, each refresh in order (the first, the
    second, ...): how many runs swapped their judge at it, and the proxy's within-group
    agreement with gold over the steps after it minus over the steps before it (as each run's
    report splits them), per seed and as a mean with an interval resampling seeds. Whether
    the root cause moved, over seeds; empty when no run refreshed."""
    rows = []
    for arm, runs in groups.items():
        changes = [
            (run.seed, periods(run.refreshes, run.samples))
            for run in sorted(runs, key=lambda r: r.seed)
        ]
        for index in range(max((len(found) for _, found in changes), default=0)):
            at = [(seed, found[index]) for seed, found in changes if index < len(found)]
            steps = sorted({int(refresh["step"]) for _, (refresh, _) in at})
            swapped = sum(1 for _, (refresh, _) in at if refresh.get("swapped"))
            values = tuple((seed, change.difference) for seed, (_, change) in at)
            present = [v for _, v in values if v is not None]
            outcome = ArmOutcome(
                values, statistics.fmean(present) if present else None, mean_interval(present)
            )
            rows.append(
                f"| {arm} | {index + 1} | {', '.join(map(str, steps))} | {swapped} of {len(at)} "
                f"| {_number(outcome.mean)}{_interval(outcome.interval)} | {_seeds(outcome)} |"
            )
    if not rows:
        return []
    return [
        "**Judge refreshes over seeds**: at each refresh, the runs that swapped their judge, "
        "and the proxy's within-group agreement with gold over the steps after the refresh "
        "minus over the steps before it (each run's report gives both sides with intervals "
        "resampling groups); the mean over seeds with an interval resampling seeds.",
        "",
        "| arm | refresh | at step | swapped | agreement after - before: mean [interval] "
        "| each seed |",
        "| --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]
