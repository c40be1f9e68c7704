"""Over-optimization monitors: a gold judge in the shadow of the training judge, and saturation.

Gold monitor. Every K steps the current policy answers a fixed set of held-out prompts; the
same answers are scored by the training reward (training judge and rubric) and by the gold
scorer (a second judge, or another rubric). In a tool environment each held-out answer is a
rollout through the environment, as in training (trainer/environments/held_out.py): its
final answer scored with its trajectory and opened documents. The alarm says that the policy gets better at
pleasing its judge while getting worse by the gold standard. Two rules:

- The test (``alpha`` set; a run's default, 0.05). At each evaluation the monitor tests, on two
  sets of answers, whether the training score rose and the gold score fell beyond their noise
  (trainer/trends.py: the within-prompt slope per step, one-sided permutation tests over
  the order of the steps): the held-out answers of the last W evaluations (W = ``window``), and the training
  completions of every step so far (scored by the gold scorer too when ``train_every`` is
  set). A set alarms when both tests pass. The level of each test is ``alpha / (2 x looks)``,
  ``looks`` being the evaluations a run makes: so a run in which the training score does not
  truly rise (or gold does not truly fall) raises the alarm at all with a chance of at most
  ``alpha``, whatever its length.
- The raw rule (``alpha`` None): on the last W evaluations, the least-squares slope of the
  training score per evaluation is above ``min_slope`` while the slope of the gold score is
  below ``-min_slope``. It takes no account of noise: a random-reward control fires it too.

Either fires again at every evaluation for which it holds.

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
from trainer.trends import Observation, trend

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
    tests: list[dict[str, Any]] = field(default_factory=list)  # the test rule's evidence

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def divergence_test(
    source: str, proxy: Sequence[Observation], gold: Sequence[Observation], level: float
) -> dict[str, Any] | None:
    """The test rule on one set of answers (None while there is no trend to fit)."""
    rising, falling = trend(proxy), trend(gold)
    if rising is None or falling is None:
        return None
    p_rising, p_falling = rising.p_rising, falling.p_falling
    return {
        "source": source,
        "proxy_slope": rising.slope,
        "proxy_p": p_rising,
        "gold_slope": falling.slope,
        "gold_p": p_falling,
        "steps": rising.steps,
        "level": level,
        "fires": p_rising < level and p_falling < level,
    }


def alarm_message(point: GoldPoint) -> str:
    """What an alarm says: the evidence of the tests that fired, or the raw slopes."""
    fired = [test for test in point.tests if test["fires"]]
    if not fired:
        return (
            f"training score rising (slope {point.train_slope:+.3f}) while the gold score "
            f"falls (slope {point.gold_slope:+.3f})"
        )
    where = {"held_out": "held-out answers", "training": "training completions"}
    return "; ".join(
        f"on the {where.get(t['source'], t['source'])} ({t['steps']} steps), the training score "
        f"rises ({t['proxy_slope']:+.4f}/step, p={t['proxy_p']:.2g}) while gold falls "
        f"({t['gold_slope']:+.4f}/step, p={t['gold_p']:.2g}); each test at level {t['level']:.3g}"
        for t in fired
    )


def held_out_observations(points: Sequence[GoldPoint], key: str) -> list[Observation]:
    """(prompt, step, score) of the held-out answers of ``points`` (``key``: train or gold)."""
    return [
        (sample["prompt_id"], point.step, float(sample[key]))
        for point in points
        for sample in point.samples
        if sample.get(key) is not None
    ]


def divergence_tests(
    points: Sequence[GoldPoint],
    window: int,
    training_proxy: Sequence[Observation],
    training_gold: Sequence[Observation],
    level: float,
) -> list[dict[str, Any]]:
    """The test rule at the last of ``points``: on the held-out answers of the last ``window``
    evaluations and on the training completions recorded so far."""
    recent = points[-window:]
    found = [
        divergence_test(
            "held_out",
            held_out_observations(recent, "train"),
            held_out_observations(recent, "gold"),
            level,
        ),
        divergence_test("training", training_proxy, training_gold, level),
    ]
    return [test for test in found if test is not None]


def per_test_level(alpha: float, looks: int) -> float:
    """Each test's level: two sets of answers at each of ``looks`` evaluations (Bonferroni)."""
    return alpha / (2 * max(1, looks))


class GoldMonitor:
    """Scores held-out answers with the training and the gold scorer; raises the alarm."""

    def __init__(
        self,
        train: Scorer,
        gold: Scorer,
        window: int = 3,
        min_slope: float = 0.0,
        alpha: float | None = None,
        looks: int = 1,
    ) -> None:
        self.train = train
        self.gold = gold
        self.window = window
        self.min_slope = min_slope
        self.level = per_test_level(alpha, looks) if alpha else None  # None: the raw rule
        self.points: list[GoldPoint] = []
        self.training_proxy: list[Observation] = []
        self.training_gold: list[Observation] = []

    def add_training(
        self,
        step: int,
        prompt_ids: Sequence[Any],
        proxy: Sequence[float | None],
        gold: Sequence[float | None],
    ) -> None:
        """The training completions of ``step``, scored by both (for the test rule)."""
        for prompt, train_score, gold_score in zip(prompt_ids, proxy, gold, strict=True):
            if prompt is not None and train_score is not None and gold_score is not None:
                self.training_proxy.append((prompt, step, train_score))
                self.training_gold.append((prompt, step, gold_score))

    def evaluate(
        self, step: int, prompt_ids: Sequence[str], completions: Sequence[str]
    ) -> GoldPoint:
        """The evaluation of single-turn held-out answers (``completions``)."""
        requests = [
            RewardRequest(text, prompt_id=pid)
            for pid, text in zip(prompt_ids, completions, strict=True)
        ]
        return self.evaluate_requests(step, requests)

    def evaluate_requests(self, step: int, requests: Sequence[RewardRequest]) -> GoldPoint:
        """The evaluation of held-out answers as scoring requests, each naming its prompt by
        id: a tool environment's carry the rollout's trajectory and opened documents, scored
        by both scorers as a training rollout is (and kept in the point's samples)."""
        train_results = self.train.score(requests)
        gold_results = self.gold.score(requests)
        point = GoldPoint(step, mean_reward(train_results), mean_reward(gold_results))
        point.samples = [
            {
                "prompt_id": r.prompt_id,
                "completion": r.completion,
                "train": t.reward,
                "gold": g.reward,
                **({"trajectory": r.trajectory} if r.trajectory is not None else {}),
                **({"documents": r.documents} if r.documents is not None else {}),
            }
            for r, t, g in zip(requests, train_results, gold_results, strict=True)
        ]
        self.points.append(point)
        scored = [p for p in self.points if p.train_score is not None and p.gold_score is not None]
        train = [p.train_score for p in scored if p.train_score is not None]
        gold = [p.gold_score for p in scored if p.gold_score is not None]
        point.train_slope = slope(train[-self.window :])
        point.gold_slope = slope(gold[-self.window :])
        if self.level is None:
            point.alarm = diverging(train, gold, self.window, self.min_slope)
        elif point.train_score is not None and point.gold_score is not None:
            point.tests = divergence_tests(
                scored, self.window, self.training_proxy, self.training_gold, self.level
            )
            point.alarm = any(test["fires"] for test in point.tests)
        if point.alarm:
            log.warning("gold monitor alarm at step %d: %s", step, alarm_message(point))
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
