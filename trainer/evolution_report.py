"""Evolving rubrics in a run's report and in ``rubricsvc train compare``, from the run's
logged ``evolution/*`` metrics alone (trainer/evolution.py logs them every step).

Per run: the steps at which prompts evolved, the evolved criteria active at the last of them,
the criteria added, pruned and refused in all, the generator calls that failed (of all
calls), and the means over the run of the persistent and evolved parts of the reward and of
how often the two order a group's rollouts the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

HEADER = (
    "| run | steps evolved | active at the end | added | pruned | refused "
    "| generator failures (of calls) | persistent reward | evolved reward "
    "| persistent and evolved agree in direction |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def _values(metrics: Sequence[dict[str, Any]], key: str) -> list[float]:
    return [float(row[key]) for row in metrics if row.get(key) is not None]


def _mean(values: Sequence[float]) -> str:
    return f"{sum(values) / len(values):.3f}" if values else "-"


def evolved(metrics: Sequence[dict[str, Any]]) -> bool:
    """Whether the run logged any evolution step."""
    return bool(_values(metrics, "evolution/active"))


def evolution_row(name: str, metrics: Sequence[dict[str, Any]]) -> str:
    """One table row (see ``HEADER``) of a run's evolution."""
    active = _values(metrics, "evolution/active")
    calls = _values(metrics, "evolution/prompts")
    failures = sum(_values(metrics, "evolution/generator_failures"))
    # Runs logged before evolution/prompts existed: the calls are not known.
    of_calls = f" of {sum(calls):.0f}" if calls else ""
    return (
        f"| {name} | {len(active)} | {active[-1]:.0f} "
        f"| {sum(_values(metrics, 'evolution/new')):.0f} "
        f"| {sum(_values(metrics, 'evolution/pruned')):.0f} "
        f"| {sum(_values(metrics, 'evolution/refused')):.0f} "
        f"| {failures:.0f}{of_calls} "
        f"| {_mean(_values(metrics, 'evolution/persistent_reward'))} "
        f"| {_mean(_values(metrics, 'evolution/evolved_reward'))} "
        f"| {_mean(_values(metrics, 'evolution/direction_agreement'))} |"
    )


def evolution_section(runs: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> list[str]:
    """A Markdown section over the runs (name, metrics) that evolved rubrics; none else."""
    rows = [evolution_row(name, metrics) for name, metrics in runs if evolved(metrics)]
    if not rows:
        return []
    return [
        "## Evolving rubrics",
        "",
        "Summed over the steps (active: summed over the last evolution step's prompts); the "
        "rewards and the agreement are means over the logged steps. The criteria themselves: "
        "each run directory's `evolution.json`, or `rubricsvc rubrics evolution show RUN` on "
        "the run's database.",
        "",
        HEADER,
        *rows,
        "",
    ]
