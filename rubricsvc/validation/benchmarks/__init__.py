"""Each judge benchmark's own published metric, computed from the pairs of its label set beside
the platform's figures (``judges evaluate`` reports it under ``benchmark``).

A benchmark's importer names every label item ``<benchmark>/...`` (its record, and for
benchmarks with several pairs per record which pair); a pairwise label set whose items all
carry one benchmark's prefix is that benchmark's, and its metric is computed from the same
observations the platform's figures use: each pair's verdicts in the orders the judge saw it,
or, for a judge that scores completions, the two scores. Modules: ``judgebench.py``,
``rmbench.py``, ``rewardbench2.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rubricsvc.validation.benchmarks import judgebench, rewardbench2, rmbench
from rubricsvc.validation.benchmarks.observations import EvaluationOptions, PairObservation

# A benchmark's figures from the pairs and the evaluation's options, by its items' prefix.
BENCHMARKS: dict[str, Callable[[Sequence[PairObservation], EvaluationOptions], dict[str, Any]]] = {
    judgebench.PREFIX: judgebench.figures,
    rmbench.PREFIX: rmbench.figures,
    rewardbench2.PREFIX: rewardbench2.figures,
}


def benchmark_figures(
    observations: Sequence[PairObservation], options: EvaluationOptions
) -> dict[str, Any] | None:
    """The benchmark's own figures when every pair is one benchmark's item, else None."""
    if not observations:
        return None
    for prefix, figures in BENCHMARKS.items():
        if all(o.item.startswith(prefix) for o in observations):
            return figures(observations, options)
    return None
