"""The evaluation of a judge on a label set, every label kind of it at once, stored against the
judge's config and the set's hash, and the stored evaluations of judge configs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from rubricsvc.backends import JudgeBackend
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import JudgeEvaluation, LabelSet
from rubricsvc.scoring.judge_configs import ensure_judge_config
from rubricsvc.validation.benchmarks import benchmark_figures
from rubricsvc.validation.evaluation.common import EvaluationOptions, Judging, Progress, _items
from rubricsvc.validation.evaluation.pairwise import _pairwise, pairwise_figures
from rubricsvc.validation.evaluation.pointwise import _pointwise, pointwise_figures
from rubricsvc.validation.evaluation.scalar import _scalar, scalar_figures

# --- the evaluation -------------------------------------------------------------------------


def evaluate(
    session: Session,
    spec: JudgeSpec,
    label_set: LabelSet,
    backend_factory: Callable[[], JudgeBackend],
    options: EvaluationOptions | None = None,
    progress: Progress | None = None,
    checkpoint: Callable[[], None] | None = None,
) -> tuple[dict[str, Any], JudgeEvaluation]:
    """The judge's figures on the label set, stored against its config and the set's hash."""
    options = options or EvaluationOptions()
    if spec.jury is not None:
        raise ValidationFailed(
            f"judge {spec.name} is a jury, which has no verdicts of its own to compare: "
            "evaluate its members (`rubricsvc judges show` names them)"
        )
    judge_row = ensure_judge_config(session, spec)
    judging = Judging(session, spec, judge_row, backend_factory, progress, checkpoint)
    items = _items(session, label_set)
    by_kind: dict[str, dict[str, Any]] = {}
    point = _pointwise(judging, items)
    if point:
        by_kind["pointwise"] = pointwise_figures(point, options)
    pairs = _pairwise(judging, label_set, items)
    benchmark = None
    if pairs:
        by_kind["pairwise"] = pairwise_figures(pairs, options)
        benchmark = benchmark_figures(pairs, options)
    scalars = _scalar(judging, label_set, items)
    if scalars:
        by_kind["scalar"] = scalar_figures(scalars, options)
    if not by_kind:
        raise ValidationFailed(f"label set {label_set.name} has no item with a majority label")
    main = max(by_kind.values(), key=lambda figures: figures["n_labelled"])
    n_labelled, n_judged = main["n_labelled"], main["n_judged"]
    report: dict[str, Any] = {
        "judge": spec.name,
        "judge_config_hash": judge_row.config_hash,
        "mode": spec.mode,
        "labels": label_set.name,
        "label_set_hash": label_set.content_hash,
        "n_labelled": n_labelled,
        "n_judged": n_judged,
        "coverage": n_judged / n_labelled if n_labelled else None,
        **{k: v for k, v in main.items() if k not in {"n_labelled", "n_judged"}},
        "interval": {
            "level": options.level,
            "resamples": options.resamples,
            "seed": options.seed,
            "clusters": "prompts",
        },
    }
    if len(by_kind) > 1:
        report["by_kind"] = by_kind
    if benchmark is not None:
        # The benchmark's own published metric, from the same pairs and verdicts.
        report["benchmark"] = benchmark
    row = JudgeEvaluation(
        judge_config_id=judge_row.id,
        label_set_id=label_set.id,
        label_set_hash=label_set.content_hash,
        n_labelled=n_labelled,
        n_judged=n_judged,
        agreement=report.get("agreement"),
        report=report,
    )
    session.add(row)
    session.flush()
    return report, row


def evaluations_of(session: Session, judge_config_ids: Sequence[int]) -> list[JudgeEvaluation]:
    """Stored evaluations of these judge configs, newest first."""
    query = (
        select(JudgeEvaluation)
        .where(JudgeEvaluation.judge_config_id.in_(judge_config_ids))
        .options(selectinload(JudgeEvaluation.label_set))
        .order_by(JudgeEvaluation.id.desc())
    )
    return list(session.scalars(query))
