"""Over-optimization monitors: a gold judge in the shadow of the training judge, and saturation.

Gold monitor. Every K steps the current policy answers a fixed set of held-out prompts; the
same answers are scored by the training reward (training judge and rubric) and by the gold
scorer (a second judge, or another rubric). The alarm rule, on the last W evaluations
(W = ``window``): the least-squares slope of the training score per evaluation is above
``min_slope`` while the slope of the gold score is below ``-min_slope``. That is, the policy
gets better at pleasing its judge while getting worse by the gold standard. It fires again at
every evaluation for which it holds.

Saturation. A criterion whose pass rate stays at or above ``threshold`` for ``steps``
consecutive logged steps no longer separates completions: it gives no learning signal and,
with a weak judge, often means it is being gamed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rubricsvc.scoring.rewards import RewardRequest, RewardResult
from trainer.scorers import Scorer

log = logging.getLogger(__name__)


def slope(values: Sequence[float]) -> float:
    """Least-squares slope of ``values`` against 0, 1, 2, ... (0 for fewer than two)."""
    size = len(values)
    if size < 2:
        return 0.0
    mean_x = (size - 1) / 2
    mean_y = sum(values) / size
    numerator = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(values))
    denominator = sum((x - mean_x) ** 2 for x in range(size))
    return numerator / denominator


def diverging(
    train: Sequence[float], gold: Sequence[float], window: int, min_slope: float = 0.0
) -> bool:
    """The alarm rule (module docstring) on the last ``window`` evaluations."""
    if len(train) < window or len(gold) < window:
        return False
    return slope(train[-window:]) > min_slope and slope(gold[-window:]) < -min_slope


def mean_reward(results: Sequence[RewardResult]) -> float | None:
    values = [r.reward for r in results if r.reward is not None]
    return sum(values) / len(values) if values else None


@dataclass
class GoldPoint:
    step: int
    train_score: float | None
    gold_score: float | None
    train_slope: float = 0.0
    gold_slope: float = 0.0
    alarm: bool = False
    samples: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class GoldMonitor:
    """Scores held-out answers with the training and the gold scorer; raises the alarm."""

    def __init__(
        self, train: Scorer, gold: Scorer, window: int = 3, min_slope: float = 0.0
    ) -> None:
        self.train = train
        self.gold = gold
        self.window = window
        self.min_slope = min_slope
        self.points: list[GoldPoint] = []

    def evaluate(
        self, step: int, prompt_ids: Sequence[str], completions: Sequence[str]
    ) -> GoldPoint:
        requests = [
            RewardRequest(text, prompt_id=pid)
            for pid, text in zip(prompt_ids, completions, strict=True)
        ]
        train_results = self.train.score(requests)
        gold_results = self.gold.score(requests)
        point = GoldPoint(step, mean_reward(train_results), mean_reward(gold_results))
        point.samples = [
            {"prompt_id": pid, "completion": text, "train": t.reward, "gold": g.reward}
            for pid, text, t, g in zip(
                prompt_ids, completions, train_results, gold_results, strict=True
            )
        ]
        self.points.append(point)
        scored = [p for p in self.points if p.train_score is not None and p.gold_score is not None]
        train = [p.train_score for p in scored if p.train_score is not None]
        gold = [p.gold_score for p in scored if p.gold_score is not None]
        point.train_slope = slope(train[-self.window :])
        point.gold_slope = slope(gold[-self.window :])
        point.alarm = diverging(train, gold, self.window, self.min_slope)
        if point.alarm:
            log.warning(
                "gold monitor alarm at step %d: training score slope %+.3f, gold slope %+.3f "
                "over the last %d evaluations",
                step,
                point.train_slope,
                point.gold_slope,
                self.window,
            )
        return point


class SaturationTracker:
    """Criteria whose pass rate stayed >= threshold for ``steps`` consecutive updates."""

    def __init__(self, threshold: float = 0.95, steps: int = 5) -> None:
        self.threshold = threshold
        self.steps = steps
        self._streak: dict[str, int] = {}
        self.saturated: set[str] = set()

    def update(self, pass_rates: dict[str, float]) -> list[str]:
        """Record one step's pass rates; returns the criteria that just became saturated."""
        newly = []
        for name, rate in pass_rates.items():
            streak = self._streak.get(name, 0) + 1 if rate >= self.threshold else 0
            self._streak[name] = streak
            if streak >= self.steps and name not in self.saturated:
                self.saturated.add(name)
                newly.append(name)
            elif streak == 0:
                self.saturated.discard(name)
        return newly
