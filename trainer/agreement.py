"""The proxy's agreement with gold within rollout groups: over the pairs of a group's
completions (a prompt's completions at a step) that gold tells apart, the share the proxy puts
in gold's order, which is what GRPO's group-relative advantage follows. 0.5 is a proxy that
ranks at random by gold's standard. Intervals resample groups."""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rubricsvc.validation.metrics import bootstrap_interval


@dataclass
class GroupAgreement:
    """How often the proxy orders two completions of one rollout group (a prompt at a step)
    as gold does, over the pairs gold tells apart: what GRPO's group-relative advantage
    follows. 0.5 is a proxy that ranks at random by gold's standard."""

    pairs: int
    groups: int
    agreement: float | None  # a proxy tie counts half
    interval: tuple[float, float] | None  # 95%, resampling groups


def group_agreement(
    samples: Sequence[dict[str, Any]], proxy: str = "rubric_reward", interval: bool = True
) -> GroupAgreement:
    """The proxy's agreement with gold within rollout groups of the recorded samples;
    ``proxy``: the samples' field that holds the score compared with gold (an evolving run's
    samples also hold its ``persistent_reward`` and ``evolved_reward`` parts). ``interval``
    False leaves the interval out (None): its bootstrap is most of the time a run's
    agreement takes, and tables of many runs show only the figure."""
    credit, clusters = pair_credits(samples, proxy)

    def share(indices: Sequence[int]) -> float | None:
        return statistics.fmean(credit[i] for i in indices) if indices else None

    return GroupAgreement(
        pairs=len(credit),
        groups=len(set(clusters)),
        agreement=share(range(len(credit))),
        interval=bootstrap_interval(clusters, share) if credit and interval else None,
    )


def pair_credits(
    samples: Sequence[dict[str, Any]], proxy_field: str = "rubric_reward"
) -> tuple[list[float], list[tuple[Any, Any]]]:
    """Each pair of a group's completions that gold tells apart: 1 when the proxy orders it
    as gold does, 0.5 for a proxy tie, 0 otherwise; and the pair's group (step, prompt)."""
    groups: dict[tuple[Any, Any], list[tuple[float, float]]] = {}
    for sample in samples:
        proxy, gold = sample.get(proxy_field), sample.get("gold_reward")
        if proxy is None or gold is None:
            continue
        key = (sample.get("step"), sample.get("prompt_id"))
        groups.setdefault(key, []).append((float(proxy), float(gold)))
    credit: list[float] = []
    clusters: list[tuple[Any, Any]] = []
    for key, scored in groups.items():
        for a, (proxy_a, gold_a) in enumerate(scored):
            for proxy_b, gold_b in scored[a + 1 :]:
                if gold_a == gold_b:
                    continue
                same_way = (proxy_a - proxy_b) * (gold_a - gold_b)
                credit.append(1.0 if same_way > 0 else 0.5 if same_way == 0 else 0.0)
                clusters.append(key)
    return credit, clusters


def agreement_text(found: GroupAgreement) -> str:
    if found.agreement is None:
        return "-"
    interval = found.interval
    bounds = f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else ""
    return f"{found.agreement:.2f}{bounds} ({found.pairs} pairs)"


@dataclass
class AgreementChange:
    """The agreement after a moment minus before it, with a 95% interval that resamples the
    groups of each side independently (a group is on one side only)."""

    before: GroupAgreement
    after: GroupAgreement
    difference: float | None
    interval: tuple[float, float] | None


def agreement_change(
    before: Sequence[dict[str, Any]],
    after: Sequence[dict[str, Any]],
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> AgreementChange:
    """``group_agreement`` of ``after`` minus that of ``before`` (see AgreementChange)."""
    found_before, found_after = group_agreement(before), group_agreement(after)
    if found_before.agreement is None or found_after.agreement is None:
        return AgreementChange(found_before, found_after, None, None)
    sides = [_by_group(*pair_credits(before)), _by_group(*pair_credits(after))]
    rng = random.Random(seed)
    values = []
    for _ in range(resamples):
        means = []
        for groups in sides:
            drawn = [c for group in rng.choices(groups, k=len(groups)) for c in group]
            means.append(statistics.fmean(drawn))
        values.append(means[1] - means[0])
    # The 2.5% and 97.5% points, interpolated between draws (numpy's default method).
    cuts = statistics.quantiles(values, n=40, method="inclusive")
    low, high = cuts[0], cuts[-1]
    difference = found_after.agreement - found_before.agreement
    return AgreementChange(found_before, found_after, difference, (low, high))


def _by_group(credit: Sequence[float], clusters: Sequence[Any]) -> list[list[float]]:
    groups: dict[Any, list[float]] = {}
    for value, cluster in zip(credit, clusters, strict=True):
        groups.setdefault(cluster, []).append(value)
    return list(groups.values())
