"""Criterion dropout: each rollout group's reward from a random part of its judged criteria.

A policy trained against a fixed rubric learns what its judge rewards on those criteria; one
rewarded each step on a different random subset cannot tune itself to any one of them as
easily (Rubric Dropout, arXiv 2608.11669: dropping half the criteria per rollout group
recovered 2 to 7 points of a gold judge's score). Every criterion is still judged (the
judgments are cached and logged); only the reward is the aggregate over the kept ones.

The draw is seeded by (seed, step, group): the same for every completion of a group, so
GRPO's advantages compare completions on the same criteria; re-drawn each step. Check
criteria and required criteria are always kept (a check is not a judge to game, and a
required criterion's gate must hold), and at least one judged criterion is.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Collection, Sequence
from typing import Any

from rubricsvc.judging.aggregation import Outcome, aggregate
from rubricsvc.scoring.rewards import RewardResult


def droppable(entry: dict[str, Any]) -> bool:
    """Whether a criterion of a reward's breakdown may be dropped: a judged one, not required."""
    return entry.get("status") != "check" and not entry.get("required", False)


def kept_criteria(
    criterion_ids: Collection[int], share: float, *, seed: int, step: int, group: str
) -> set[int]:
    """The judged criteria a group keeps this step: all but ``round(share x n)``, at least one."""
    ordered = sorted(criterion_ids)
    dropped = min(round(share * len(ordered)), max(len(ordered) - 1, 0))
    draw = random.Random(f"{seed}/{step}/{group}")
    return set(ordered) - set(draw.sample(ordered, dropped))


def with_dropout(
    result: RewardResult,
    kept: Collection[int],
    *,
    aggregation: str,
    min_coverage: float,
) -> RewardResult:
    """``result`` with its reward aggregated over the kept criteria (and every one that may
    not be dropped). A result without a per-criterion breakdown (a masked score, a mode
    that compares completions) is returned as it is."""
    entries = [e for e in result.criteria if "criterion_id" in e and "weight" in e]
    if result.reward is None or not entries or len(entries) != len(result.criteria):
        return result
    chosen = [e for e in entries if not droppable(e) or e["criterion_id"] in kept]
    outcomes = [
        Outcome(
            int(e["criterion_id"]),
            float(e["weight"]),
            None if e.get("value") is None else float(e["value"]),
            e.get("theme"),
            bool(e.get("required", False)),
            None if e.get("reference") is None else float(e["reference"]),
        )
        for e in chosen
    ]
    # The coverage floor is the score's own: a dropped criterion is not a failed one.
    scored = aggregate(aggregation, outcomes, min_coverage=min_coverage)
    reason = f"criterion dropout: rewarded on {len(chosen)} of {len(entries)} criteria"
    return dataclasses.replace(
        result, reward=scored.value, reasons=[*result.reasons, reason, *scored.reasons]
    )


def apply_dropout(
    results: Sequence[RewardResult],
    groups: Sequence[str],
    share: float,
    *,
    seed: int,
    step: int,
    aggregation: str,
    min_coverage: float,
) -> list[RewardResult]:
    """Each result's reward over its group's kept criteria (``groups``: one key per result,
    the prompt the rollout answers)."""
    out = []
    for result, group in zip(results, groups, strict=True):
        judged = {
            int(e["criterion_id"]) for e in result.criteria if "criterion_id" in e and droppable(e)
        }
        kept = kept_criteria(judged, share, seed=seed, step=step, group=group)
        out.append(with_dropout(result, kept, aggregation=aggregation, min_coverage=min_coverage))
    return out
