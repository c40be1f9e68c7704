"""What share of the reachable gain an arm delivers, and where its proxy starts to mislead.

Round 3 of the over-optimization lab (docs/overoptimization.md, "Round 3: the analysis plan")
brackets every arm between a ``control`` arm (random rewards: the floor) and an ``oracle`` arm
(gold itself as the reward: the ceiling of what the policy learns in the budget).

- *Gold recovered* by an arm: (arm - control) / (oracle - control) on an outcome's means over
  seeds, with a percentile bootstrap interval that resamples the seeds of the three arms
  independently. It is a share only where the oracle beats the control (the interval of their
  difference lies above 0); otherwise it is reported as undefined at this many seeds.
- *Over-optimization onset* of a run: the step of its first gold-monitor alarm, and the step
  at which training gold's moving mean peaks while the proxy's keeps rising after it.
- The proxy's within-group agreement with gold in windows of 10 steps, per arm over seeds.
- A secondary outcome, declared by round 3's second setup before its runs: held-out gold as
  the mean of the last 3 evaluations minus the first, the plan's primary outcome read with a
  third of one evaluation's noise (each greedy answer moves its prompt's score by a quarter or
  a third).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from trainer.agreement import group_agreement
from trainer.arms import (
    LEVEL,
    OUTCOMES,
    RESAMPLES,
    SEED,
    TRAIN_GOLD,
    RunRecord,
    arm_outcome,
    format_outcome_rows,
    mean_interval,
    percentile_interval,
)

PROXY = "rubric/reward"
WINDOW = 5  # steps in the moving means of the onset
AGREEMENT_WINDOW = 10  # steps per window of the proxy's agreement with gold
LATE = 3  # evaluations averaged at the end of the secondary held-out outcome


def held_out_gold_late_change(run: RunRecord, last: int = LATE) -> float | None:
    """Held-out gold, the mean of the run's last ``last`` evaluations minus its first; None
    with fewer than ``last + 1`` evaluations (the first would be among the last)."""
    gold = [p.gold for p in run.held_out if p.gold is not None]
    if len(gold) < last + 1:
        return None
    return statistics.fmean(gold[-last:]) - gold[0]


# Round 3's outcomes read between the brackets: the plan's two gold outcomes, then the
# secondary one its second setup declared.
BRACKETED: dict[str, tuple[str, Callable[[RunRecord], float | None]]] = {
    "held_out_gold": OUTCOMES["held_out_gold"],
    "training_gold": OUTCOMES["training_gold"],
    "held_out_gold_late": (
        f"held-out gold, mean of the last {LATE} evaluations - start (secondary)",
        held_out_gold_late_change,
    ),
}


@dataclass(frozen=True)
class Recovered:
    """An arm's share of the oracle's gain over the control.

    ``share`` is None where it is undefined (too few seeds, or the oracle not told apart from
    the control); ``dropped`` counts the bootstrap resamples in which the oracle's resampled
    mean did not exceed the control's (no share exists there; they are left out of the
    interval and reported)."""

    share: float | None
    interval: tuple[float, float] | None
    oracle_gain: tuple[float, float] | None  # the interval of oracle - control
    dropped: int
    reason: str = ""


def gold_recovered(
    arm: Sequence[float],
    control: Sequence[float],
    oracle: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    level: float = LEVEL,
) -> Recovered:
    """The share (arm - control) / (oracle - control) of the seeds' means, with its interval."""
    if min(len(arm), len(control), len(oracle)) < 2:
        return Recovered(None, None, None, 0, "fewer than two seeds in an arm")
    rng = random.Random(seed)
    shares: list[float] = []
    gains: list[float] = []
    dropped = 0
    for _ in range(resamples):
        a = statistics.fmean(rng.choices(arm, k=len(arm)))
        c = statistics.fmean(rng.choices(control, k=len(control)))
        o = statistics.fmean(rng.choices(oracle, k=len(oracle)))
        gains.append(o - c)
        if o - c > 0:
            shares.append((a - c) / (o - c))
        else:
            dropped += 1
    oracle_gain = percentile_interval(gains, level)
    if oracle_gain[0] <= 0:
        return Recovered(
            None, None, oracle_gain, dropped, "the oracle is not told apart from the control"
        )
    denominator = statistics.fmean(oracle) - statistics.fmean(control)
    share = (statistics.fmean(arm) - statistics.fmean(control)) / denominator
    return Recovered(share, percentile_interval(shares, level), oracle_gain, dropped)


def _moving_means(values: Sequence[float], window: int) -> list[float]:
    return [statistics.fmean(values[max(0, i - window + 1) : i + 1]) for i in range(len(values))]


def gold_peak_step(run: RunRecord, window: int = WINDOW) -> int | None:
    """The step at which training gold's ``window``-step moving mean peaks, when the proxy's
    moving mean rises after it (ends higher than at the peak); None when gold peaks at the last
    step, the proxy does not rise after the peak, or either curve is missing."""
    gold_steps, gold = run.training(TRAIN_GOLD)
    proxy_steps, proxy = run.training(PROXY)
    if len(gold) < 2 or not proxy:
        return None
    smoothed = _moving_means(gold, window)
    peak = max(range(len(smoothed)), key=lambda i: (smoothed[i], -i))  # the first highest
    if peak == len(smoothed) - 1:
        return None
    step = gold_steps[peak]
    proxy_by_step = dict(zip(proxy_steps, _moving_means(proxy, window), strict=True))
    at_peak = proxy_by_step.get(step)
    last = proxy_by_step.get(proxy_steps[-1])
    if at_peak is None or last is None or last <= at_peak:
        return None
    return step


def first_alarm_step(run: RunRecord) -> int | None:
    """The step of the run's first gold-monitor alarm (its test rule, replayed); None if none."""
    alarms = run.test_alarms()
    return min(alarms) if alarms else None


CONTROL = "control"
ORACLE = "oracle"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def bracketed_section(groups: Mapping[str, Sequence[RunRecord]]) -> list[str]:
    """Markdown lines: each arm's gold recovered between the ``control`` and ``oracle`` arms on
    the plan's gold outcomes, and each run's over-optimization onset. Empty unless both
    brackets are among the arms."""
    if CONTROL not in groups or ORACLE not in groups:
        return []
    title, measure = BRACKETED["held_out_gold_late"]
    lines = [
        f"**{title}**: declared as a secondary outcome by round 3's second setup before its "
        "runs (docs/overoptimization.md); the mean over seeds with a "
        f"{LEVEL:.0%} interval resampling seeds, and each seed's value.",
        "",
        "| arm | seeds | mean [interval] | each seed |",
        "| --- | --- | --- | --- |",
        *format_outcome_rows({arm: arm_outcome(runs, measure) for arm, runs in groups.items()}),
        "",
        "## Gold recovered",
        "",
        f"Each arm's share of the oracle's gain over the control, (arm - {CONTROL}) / "
        f"({ORACLE} - {CONTROL}) of the means over seeds, with a {LEVEL:.0%} percentile "
        f"bootstrap interval resampling the seeds of the three arms independently "
        f"({RESAMPLES:,} resamples, seed {SEED}); undefined where the oracle's gain over the "
        "control has an interval reaching 0. 1.00: all of gold's reachable gain; 0: none.",
        "",
        "| arm | outcome | share [interval] | oracle - control [interval] | resamples left out |",
        "| --- | --- | --- | --- | --- |",
    ]
    for title, measure in BRACKETED.values():
        control = arm_outcome(groups[CONTROL], measure).present
        oracle = arm_outcome(groups[ORACLE], measure).present
        for arm, runs in groups.items():
            if arm in (CONTROL, ORACLE):
                continue
            found = gold_recovered(arm_outcome(runs, measure).present, control, oracle)
            share = _share(found.share)
            if found.interval is not None:
                share += f" [{_share(found.interval[0])}, {_share(found.interval[1])}]"
            elif found.reason:
                share += f" ({found.reason})"
            gain = (
                "-"
                if found.oracle_gain is None
                else f"[{found.oracle_gain[0]:+.3f}, {found.oracle_gain[1]:+.3f}]"
            )
            lines.append(f"| {arm} | {title} | {share} | {gain} | {found.dropped} |")
    lines += [
        "",
        "**Over-optimization onset** of each run: the step of the gold monitor's first alarm, "
        f"and the step at which training gold's {WINDOW}-step moving mean peaks while the "
        "proxy's rises after it (- where there is none).",
        "",
        "| arm | each seed: first alarm / gold peak under a rising proxy |",
        "| --- | --- |",
    ]
    for arm, runs in groups.items():
        cells = [
            f"s{run.seed} {_step(first_alarm_step(run))} / {_step(gold_peak_step(run))}"
            for run in sorted(runs, key=lambda r: r.seed)
        ]
        lines.append(f"| {arm} | {', '.join(cells)} |")
    lines.append("")
    return lines + agreement_windows_section(groups)


def windowed_agreement(run: RunRecord, start: int, size: int = AGREEMENT_WINDOW) -> float | None:
    """The proxy's within-group agreement with gold over the run's samples of steps
    ``start`` to ``start + size - 1``; None where gold tells no pair apart there."""
    window = [s for s in run.samples if start <= int(s.get("step", 0)) < start + size]
    return group_agreement(window, interval=False).agreement


def agreement_windows_section(groups: Mapping[str, Sequence[RunRecord]]) -> list[str]:
    """Markdown lines: per arm, the proxy's within-group agreement with gold in windows of
    ``AGREEMENT_WINDOW`` steps, the mean over seeds with a seed-resampling interval: does a
    judge order the policy's answers worse as the policy moves? Empty without samples."""
    last = max((int(s.get("step", 0)) for runs in groups.values() for run in runs
                for s in run.samples), default=0)  # fmt: skip
    if last < 1:
        return []
    starts = list(range(1, last + 1, AGREEMENT_WINDOW))
    heads = [f"steps {a}-{min(a + AGREEMENT_WINDOW - 1, last)}" for a in starts]
    lines = [
        f"**The proxy's within-group agreement with gold, by {AGREEMENT_WINDOW}-step window**: "
        f"the mean over seeds with a {LEVEL:.0%} interval resampling seeds.",
        "",
        "| arm | " + " | ".join(heads) + " |",
        "| --- | " + " | ".join("---" for _ in heads) + " |",
    ]
    for arm, runs in groups.items():
        cells = []
        for start in starts:
            values = [v for run in runs if (v := windowed_agreement(run, start)) is not None]
            if not values:
                cells.append("-")
                continue
            interval = mean_interval(values)
            cells.append(
                f"{statistics.fmean(values):.3f}"
                + ("" if interval is None else f" [{interval[0]:.3f}, {interval[1]:.3f}]")
            )
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def _step(step: int | None) -> str:
    return "-" if step is None else str(step)
