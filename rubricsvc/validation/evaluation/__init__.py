"""How well a judge agrees with a label set (``rubricsvc judges evaluate``).

1. Group the set's labels into items (a completion x criterion, a pair of completions, a
   completion), each with its labellers' majority.
2. Have the judge judge what the items need through the ordinary scoring path, so every
   verdict already made comes from the cache (an imported judge's are only read).
3. Read each item's verdict back by its cache key and compare.

Intervals are prompt-clustered percentile bootstraps: items of one prompt are correlated (one
conversation, often one grader), so whole prompts are resampled, never single items.
Agreement counts only items the judge gave a valid verdict for (``n_judged``); the share of
all labelled items it got right, an unjudged one counting as wrong, is reported beside it.
"""

from __future__ import annotations

from rubricsvc.validation.evaluation.common import (
    TAG_LIMIT,
    TAG_MIN_ITEMS,
    EvaluationOptions,
    Judging,
    Progress,
    own_rubric_versions,
)
from rubricsvc.validation.evaluation.pairwise import (
    PAIR_LABELS,
    PairObservation,
    order_figures,
    pairwise_figures,
)
from rubricsvc.validation.evaluation.pointwise import (
    MET,
    NOT_MET,
    PointwiseObservation,
    pointwise_figures,
    pointwise_observations,
)
from rubricsvc.validation.evaluation.run import evaluate, evaluations_of
from rubricsvc.validation.evaluation.scalar import ScalarObservation, scalar_figures

__all__ = [
    "MET",
    "NOT_MET",
    "PAIR_LABELS",
    "TAG_LIMIT",
    "TAG_MIN_ITEMS",
    "EvaluationOptions",
    "Judging",
    "PairObservation",
    "PointwiseObservation",
    "Progress",
    "ScalarObservation",
    "evaluate",
    "evaluations_of",
    "order_figures",
    "own_rubric_versions",
    "pairwise_figures",
    "pointwise_figures",
    "pointwise_observations",
    "scalar_figures",
]
