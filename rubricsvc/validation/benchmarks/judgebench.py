"""JudgeBench (ScalerLab; arXiv 2410.12784): hard response pairs whose label is which response
is correct, judged in both orders.

Its metric (``utils/metrics.py``, ``compute_final_metrics`` with ``reverse_order``): each
order's decision, the second flipped back to the pair's own order, counts +1 when it names
the correct response and -1 when it names the other (a tie or no decision counts 0); a pair
is right when the sum is positive. Accuracy is the share of right pairs among all pairs, a
pair without any decision included, reported per category (the ``source`` prefixes
``mmlu-pro``, ``livebench-reasoning``, ``livebench-math``, ``livecodebench``) and overall.

A reward model's decision in each order is "A>B" when A's score is higher, else "B>A"
(``utils/judges.py``), so under the same rule it is right exactly when the correct response
scores strictly higher: equal scores give +1 and -1. A judge that scores completions is
counted that way here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rubricsvc.validation import metrics as m
from rubricsvc.validation.benchmarks.observations import EvaluationOptions, PairObservation

PREFIX = "judgebench/"
NAME = "JudgeBench"
# The categories JudgeBench's run_judge.py prints, each the prefix of a pair's source.
CATEGORIES = ("mmlu-pro", "livebench-reasoning", "livebench-math", "livecodebench")
OTHER = {"first": "second", "second": "first", "tie": "tie"}
RULE = (
    "a pair is right when its decisions in the two orders name the correct response more "
    "often than the other one (a tie or no decision counts neither way); accuracy over all "
    "pairs (JudgeBench's utils/metrics.py)"
)


def item_name(pair_id: str) -> str:
    return f"{PREFIX}{pair_id}"


def counter(observation: PairObservation) -> int:
    """JudgeBench's count for one pair: +1 per decision naming the correct response, -1 per
    decision naming the other; a pair is right when it is positive."""
    label = observation.label
    if observation.scores is not None:
        # Both orders give the same decision from scores: "A>B" when A scores higher, else
        # "B>A" (equal scores: B in one order, A in the other).
        first, second = observation.scores
        if first == second:
            return 0
        winner = "first" if first > second else "second"
        return 2 if winner == label else -2 if winner == OTHER[label] else 0
    total = 0
    for decision in observation.orders:  # both seen from the label's first response
        if decision == label:
            total += 1
        elif decision is not None and decision == OTHER[label]:
            total -= 1
    return total


def category(observation: PairObservation) -> str | None:
    """The category of the pair's source (its tag), as run_judge.py's prefixes match it."""
    for tag in observation.tags:
        for name in CATEGORIES:
            if tag.startswith(name):
                return name
    return None


def figures(observations: Sequence[PairObservation], options: EvaluationOptions) -> dict[str, Any]:
    counts = [counter(o) for o in observations]
    right = [c > 0 for c in counts]

    def accuracy(ix: Sequence[int]) -> float | None:
        return sum(right[i] for i in ix) / len(ix) if ix else None

    clusters = [o.prompt_id for o in observations]
    interval = m.bootstrap_interval(
        clusters,
        accuracy,
        resamples=options.resamples,
        level=options.level,
        seed=options.seed,
    )
    correct = sum(right)
    n = len(observations)
    by_category: dict[str, dict[str, Any]] = {}
    for name in CATEGORIES:
        members = [i for i, o in enumerate(observations) if category(o) == name]
        if members:
            hits = sum(right[i] for i in members)
            by_category[name] = {
                "n": len(members),
                "correct": hits,
                "percent": 100 * hits / len(members),
            }
    return {
        "name": NAME,
        "metric": RULE,
        "compared_by": "scores" if any(o.scores is not None for o in observations) else "verdicts",
        "n": n,
        "correct": correct,
        "incorrect": sum(1 for c in counts if c < 0),
        "neither": sum(1 for c in counts if c == 0),
        "accuracy": correct / n if n else None,
        "accuracy_ci": list(interval) if interval is not None else None,
        # As JudgeBench prints it: 100 * correct / pairs.
        "percent": 100 * correct / n if n else None,
        "by_category": by_category,
    }
