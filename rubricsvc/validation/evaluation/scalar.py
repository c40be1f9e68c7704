"""Scalar labels: a completion's score (the labellers' mean on their scale, to 0..1), against
the judge's score of it."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rubricsvc.models import LabelSet, RubricVersion
from rubricsvc.scoring.selection import Selection
from rubricsvc.validation import metrics as m
from rubricsvc.validation.evaluation.common import (
    EvaluationOptions,
    Judging,
    _Figures,
    _Items,
    _length_bias,
    _tags,
    own_rubric_versions,
)
from rubricsvc.validation.evaluation.scores import scores_of


@dataclass(frozen=True)
class ScalarObservation:
    """One completion's score: the labellers' mean on its scale (to 0..1) and the judge's."""

    prompt_id: int
    completion_id: int
    label: float
    judged: float | None
    response_length: int
    tags: tuple[str, ...] = ()


def _scalar(judging: Judging, label_set: LabelSet, items: _Items) -> list[ScalarObservation]:
    if not items.scalar:
        return []
    completion_ids = tuple(sorted(items.scalar))
    selection = Selection(
        completion_ids=completion_ids,
        version_ids=(label_set.rubric_version_id,) if label_set.rubric_version_id else (),
        include_drafts=True,
    )
    if judging.imported:
        by_completion = _imported_scores(judging, label_set, items)
    else:
        report = judging.judge_what_is_missing(selection)
        assert report is not None  # not an imported judge
        by_completion = defaultdict(list)
        for scored in report.scores:
            if scored.value is not None:
                by_completion[scored.completion_id].append(scored.value)
    observations = []
    for completion_id, labels in items.scalar.items():
        values = [
            (lb.value - (lb.scale_min or 0.0)) / ((lb.scale_max or 1.0) - (lb.scale_min or 0.0))
            for lb in labels
        ]
        judged = by_completion.get(completion_id)
        completion = items.completions[completion_id]
        observations.append(
            ScalarObservation(
                completion.prompt_id,
                completion_id,
                math.fsum(values) / len(values),
                math.fsum(judged) / len(judged) if judged else None,
                len(completion.text),
                _tags(labels),
            )
        )
    return observations


def _imported_scores(
    judging: Judging, label_set: LabelSet, items: _Items
) -> dict[int, list[float]]:
    """An imported holistic judge's scores (its values, in [0, 1]) of the labelled
    completions, read under the version ``judges import`` keys them under: the label set's,
    else each prompt's own (``own_rubric_versions``)."""
    completions = [items.completions[c] for c in sorted(items.scalar)]
    if label_set.rubric_version_id is not None:
        chosen = judging.session.get(RubricVersion, label_set.rubric_version_id)
        assert chosen is not None
        version_of = {c.prompt_id: chosen for c in completions}
    else:
        version_of, _ = own_rubric_versions(judging.session, [c.id for c in completions])
    item_of = {c: labels[0].item for c, labels in items.scalar.items()}
    found = scores_of(judging, completions, version_of, item_of)
    return {completion_id: [score.value] for completion_id, score in found.items()}


# --- figures --------------------------------------------------------------------------------


def scalar_figures(
    observations: Sequence[ScalarObservation], options: EvaluationOptions
) -> dict[str, Any]:
    figures = _Figures(options)
    judged = [o for o in observations if o.judged is not None]
    x = [o.judged or 0.0 for o in judged]
    y = [o.label for o in judged]
    clusters = [o.prompt_id for o in judged]

    def concordance(ix: Sequence[int]) -> float | None:
        tau = m.kendall_tau_b([x[i] for i in ix], [y[i] for i in ix])
        return None if tau is None else (tau + 1) / 2

    result: dict[str, Any] = {
        "kind": "scalar",
        "agreement_is": "(Kendall's tau-b + 1) / 2: the share of pairs ordered as the labels",
        "n_labelled": len(observations),
        "n_judged": len(judged),
    }
    result["agreement"], result["agreement_ci"] = figures.with_interval(clusters, concordance)
    for name, fn in (
        ("pearson", m.pearson),
        ("spearman", m.spearman),
        ("kendall", m.kendall_tau_b),
    ):

        def stat(ix: Sequence[int], fn: Callable[..., float | None] = fn) -> float | None:
            return fn([x[i] for i in ix], [y[i] for i in ix])

        result[name], result[f"{name}_ci"] = figures.with_interval(clusters, stat)
    result["length_bias"] = _length_bias(x, y, [float(o.response_length) for o in judged])
    return result
