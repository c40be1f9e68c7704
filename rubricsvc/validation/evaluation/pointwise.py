"""Pointwise labels: whether a completion meets a criterion (the labellers' majority), against
the judge's value for that completion x criterion."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from rubricsvc.backends import JudgeBackend
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.modes import get_mode, modes_that
from rubricsvc.models import JudgeConfig, Judgment, JudgmentStatus, Label, LabelSet, RubricVersion
from rubricsvc.scoring.judge_configs import ensure_judge_config
from rubricsvc.scoring.scorer import case_plan
from rubricsvc.scoring.selection import Selection
from rubricsvc.scoring.store import judgments_by_key
from rubricsvc.validation import metrics as m
from rubricsvc.validation.evaluation.common import (
    EvaluationOptions,
    Judging,
    Progress,
    _agreement_fields,
    _by_tag,
    _either,
    _Figures,
    _imported_verdict,
    _Items,
    _items,
    _length_bias,
    _tags,
)

MET, NOT_MET = "met", "not met"


@dataclass(frozen=True)
class PointwiseObservation:
    """One completion x criterion: the labellers' majority and the judge's value."""

    prompt_id: int
    completion_id: int
    criterion_id: int
    label: float  # 1.0 met, 0.0 not met (the majority of the labellers)
    judged: float | None  # the judge's value (a probability for criterion-prob); None: failed
    response_length: int
    tags: tuple[str, ...] = ()


def _majority_met(labels: Sequence[Label]) -> float | None:
    verdict = m.majority([MET if label.value >= 0.5 else NOT_MET for label in labels])
    return None if verdict is None else float(verdict == MET)


def pointwise_observations(
    session: Session,
    spec: JudgeSpec,
    label_set: LabelSet,
    backend_factory: Callable[[], JudgeBackend],
    progress: Progress | None = None,
    checkpoint: Callable[[], None] | None = None,
    judge_row: JudgeConfig | None = None,
) -> list[PointwiseObservation]:
    """Each labelled completion x criterion with a majority, and the judge's value for it."""
    items = _items(session, label_set)
    judge_row = judge_row or ensure_judge_config(session, spec)
    judging = Judging(session, spec, judge_row, backend_factory, progress, checkpoint)
    return _pointwise(judging, items)


def _pointwise(judging: Judging, items: _Items) -> list[PointwiseObservation]:
    if not items.pointwise:
        return []
    session, spec = judging.session, judging.spec
    if get_mode(spec.mode).compares:
        raise ValidationFailed(
            f"judge {spec.name} compares completions ({spec.mode}); pointwise labels need a "
            f"judge of criteria: pass --mode {_either(modes_that(per_criterion=True))}"
        )
    versions = {items.criteria[c].version_id for _, c in items.pointwise}
    completion_ids = tuple(sorted({c for c, _ in items.pointwise}))
    selection = Selection(
        completion_ids=completion_ids, version_ids=tuple(sorted(versions)), include_drafts=True
    )
    judging.judge_what_is_missing(selection)
    version_rows = {
        v.id: v
        for v in session.scalars(
            select(RubricVersion)
            .where(RubricVersion.id.in_(versions))
            .options(selectinload(RubricVersion.criteria))
        )
    }
    key_of: dict[tuple[int, int], str] = {}
    for completion_id, criterion_id in items.pointwise:
        completion = items.completions[completion_id]
        version = version_rows[items.criteria[criterion_id].version_id]
        plan = case_plan(spec, judging.judge_row.config_hash, completion, version)
        if criterion_id not in plan.key_of:
            raise ValidationFailed(
                f"judge {spec.name} ({spec.mode}) does not judge criteria one by one; pointwise "
                f"labels need {_either(modes_that(per_criterion=True))}"
            )
        key_of[(completion_id, criterion_id)] = plan.key_of[criterion_id]
    judged = judgments_by_key(session, key_of.values())
    observations = []
    for (completion_id, criterion_id), labels in items.pointwise.items():
        label = _majority_met(labels)
        if label is None:
            continue  # the labellers split evenly: no majority to compare with
        judgment = judged.get(key_of[(completion_id, criterion_id)])
        completion = items.completions[completion_id]
        if judging.imported:
            value = _imported_verdict(judgment, labels[0].item, pairwise=False)[1]
        else:
            value = _value(judgment)
        observations.append(
            PointwiseObservation(
                completion.prompt_id,
                completion_id,
                criterion_id,
                label,
                value,
                len(completion.text),
                _tags(labels),
            )
        )
    return observations


def _value(judgment: Judgment | None) -> float | None:
    if judgment is None or judgment.status != JudgmentStatus.OK:
        return None
    return judgment.value


# --- figures --------------------------------------------------------------------------------


def pointwise_figures(
    observations: Sequence[PointwiseObservation], options: EvaluationOptions
) -> dict[str, Any]:
    figures = _Figures(options)
    judged = [o for o in observations if o.judged is not None]
    predicted = [MET if (o.judged or 0.0) >= 0.5 else NOT_MET for o in judged]
    truth = [MET if o.label >= 0.5 else NOT_MET for o in judged]
    clusters = [o.prompt_id for o in judged]
    result: dict[str, Any] = {
        "kind": "pointwise",
        "n_labelled": len(observations),
        "n_judged": len(judged),
        **_agreement_fields(figures, clusters, predicted, truth),
    }

    def f1(ix: Sequence[int]) -> float | None:
        return m.f1([predicted[i] for i in ix], [truth[i] for i in ix], MET)

    result["f1"], result["f1_ci"] = figures.with_interval(clusters, f1)
    probs = [o.judged or 0.0 for o in judged]
    outcomes = [o.label for o in judged]

    def ece(ix: Sequence[int]) -> float | None:
        return m.expected_calibration_error(
            [probs[i] for i in ix], [outcomes[i] for i in ix], options.bins
        )

    result["ece"], result["ece_ci"] = figures.with_interval(clusters, ece)
    result["reliability"] = [
        {
            "low": b.low,
            "high": b.high,
            "count": b.count,
            "mean_prob": b.mean_prob,
            "frequency": b.frequency,
        }
        for b in m.reliability_bins(probs, outcomes, options.bins)
    ]
    result["label_base_rate"] = (math.fsum(outcomes) / len(outcomes)) if outcomes else None
    result["length_bias"] = _length_bias(
        probs, outcomes, [float(o.response_length) for o in judged]
    )
    result["by_tag"] = _by_tag(
        [o.tags for o in judged],
        lambda ix: m.accuracy([predicted[i] for i in ix], [truth[i] for i in ix]),
    )
    return result
