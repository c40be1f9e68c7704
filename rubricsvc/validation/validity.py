"""Criterion validity: how far a judge agrees with labellers on each criterion of a version.

For a rubric version with pointwise labels (from any label set), each criterion's labelled
completions are compared with one judge's stored verdicts on them: the share the judge gets
right (its verdict's "met" is the labellers' majority), a prompt-clustered bootstrap interval
and n. Only verdicts already stored are read (``judges evaluate`` or ``score`` make them), so
the analytics page and ``rubrics show`` never call a model. A criterion whose agreement is
below a threshold (by default 0.5: the judge gets it wrong on most labelled items) is flagged:
either its wording lets the judge read it otherwise than the labellers, or the judge cannot
judge it; ``rubrics refine`` proposes rewording or removing it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from rubricsvc.backends import replays_only
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.modes import get_mode, modes_that
from rubricsvc.models import (
    Completion,
    Criterion,
    JudgeConfig,
    Judgment,
    Label,
    LabelKind,
    RubricVersion,
)
from rubricsvc.scoring.scorer import case_plan
from rubricsvc.scoring.store import judgments_by_key
from rubricsvc.validation import metrics as m
from rubricsvc.validation.evaluation.common import _either, _imported_verdict
from rubricsvc.validation.evaluation.pointwise import _majority_met, _value

DEFAULT_BELOW = 0.5
RESAMPLES = 1000


@dataclass(frozen=True)
class CriterionValidity:
    criterion_id: int
    position: int  # from 0, as stored
    text: str
    n_labelled: int  # labelled completions with a majority
    n: int  # of them, those the judge gave a valid verdict for
    agreement: float | None
    interval: tuple[float, float] | None
    flagged: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "criterion": self.position + 1,
            "text": self.text,
            "n_labelled": self.n_labelled,
            "n": self.n,
            "agreement": self.agreement,
            "agreement_ci": list(self.interval) if self.interval else None,
            "flagged": self.flagged,
        }


def _labels_by_item(
    session: Session, criterion_ids: Sequence[int]
) -> dict[tuple[int, int], list[Label]]:
    labels = session.scalars(
        select(Label)
        .where(Label.kind == LabelKind.POINTWISE, Label.criterion_id.in_(criterion_ids))
        .order_by(Label.id)
    )
    items: dict[tuple[int, int], list[Label]] = {}
    for label in labels:
        assert label.criterion_id is not None
        items.setdefault((label.completion_id, label.criterion_id), []).append(label)
    return items


def has_pointwise_labels(session: Session, version: RubricVersion) -> bool:
    ids = [c.id for c in version.criteria]
    return bool(ids) and (
        session.scalar(
            select(Label.id)
            .where(Label.kind == LabelKind.POINTWISE, Label.criterion_id.in_(ids))
            .limit(1)
        )
        is not None
    )


def criterion_validity(
    session: Session,
    version: RubricVersion,
    spec: JudgeSpec,
    below: float = DEFAULT_BELOW,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> list[CriterionValidity]:
    """Each criterion of ``version`` with pointwise labels: the judge's agreement with the
    labellers' majority on its labelled completions (every label set's labels on it; an item
    whose labellers split evenly is left out), the interval over prompts, n, and whether the
    agreement is below ``below``. Criteria without labels are left out."""
    if not get_mode(spec.mode).per_criterion:
        raise ValidationFailed(
            f"judge {spec.name} ({spec.mode}) does not judge criteria one by one; criterion "
            f"validity needs a judge in the {_either(modes_that(per_criterion=True))} mode"
        )
    criteria = {c.id: c for c in version.criteria}
    items = _labels_by_item(session, list(criteria))
    if not items:
        return []
    completions = {
        c.id: c
        for c in session.scalars(
            select(Completion)
            .where(Completion.id.in_({completion_id for completion_id, _ in items}))
            .options(selectinload(Completion.prompt))
        )
    }
    judge_hash = spec.config_hash()
    key_of: dict[tuple[int, int], str] = {}
    for completion_id in {completion_id for completion_id, _ in items}:
        plan = case_plan(spec, judge_hash, completions[completion_id], version)
        for criterion_id in criteria:
            if criterion_id in plan.key_of:
                key_of[(completion_id, criterion_id)] = plan.key_of[criterion_id]
    judged = judgments_by_key(session, key_of.values())
    imported = replays_only(spec.backend)
    rows: dict[int, list[tuple[int, float, float | None]]] = defaultdict(list)
    for (completion_id, criterion_id), labels in items.items():
        label = _majority_met(labels)
        if label is None:
            continue
        key = key_of.get((completion_id, criterion_id))
        judgment: Judgment | None = judged.get(key) if key is not None else None
        value = (
            _imported_verdict(judgment, labels[0].item, pairwise=False)[1]
            if imported
            else _value(judgment)
        )
        rows[criterion_id].append((completions[completion_id].prompt_id, label, value))
    found = []
    for criterion_id, criterion in criteria.items():
        if criterion_id not in rows:
            continue
        found.append(_one(criterion, rows[criterion_id], below, resamples, seed))
    return found


def _one(
    criterion: Criterion,
    rows: Sequence[tuple[int, float, float | None]],
    below: float,
    resamples: int,
    seed: int,
) -> CriterionValidity:
    judged = [(prompt, label, value) for prompt, label, value in rows if value is not None]
    right = [(value >= 0.5) == (label >= 0.5) for _, label, value in judged]

    def share(ix: Sequence[int]) -> float | None:
        return sum(1 for i in ix if right[i]) / len(ix) if ix else None

    agreement = share(range(len(right)))
    interval = (
        m.bootstrap_interval([p for p, _, _ in judged], share, resamples=resamples, seed=seed)
        if judged
        else None
    )
    return CriterionValidity(
        criterion.id,
        criterion.position,
        criterion.text,
        len(rows),
        len(judged),
        agreement,
        interval,
        agreement is not None and agreement < below,
    )


def flagged_version_ids(session: Session, spec: JudgeSpec, below: float) -> set[int]:
    """The versions with pointwise labels where a criterion's agreement with ``spec`` is below
    ``below`` (read from stored verdicts; the point figure only, no interval)."""
    version_ids = set(
        session.scalars(
            select(Criterion.version_id)
            .join(Label, Label.criterion_id == Criterion.id)
            .where(Label.kind == LabelKind.POINTWISE)
            .distinct()
        )
    )
    if not version_ids:
        return set()
    versions = session.scalars(
        select(RubricVersion)
        .where(RubricVersion.id.in_(version_ids))
        .options(selectinload(RubricVersion.criteria))
    )
    return {
        version.id
        for version in versions
        if any(row.flagged for row in criterion_validity(session, version, spec, below, 1))
    }


def validity_judges(session: Session, version: RubricVersion | None = None) -> list[str]:
    """The names of the judges, in a mode that judges criteria one by one, with stored
    verdicts on criteria with pointwise labels (of ``version``, else of any version)."""
    labelled = select(Label.criterion_id).where(Label.kind == LabelKind.POINTWISE)
    if version is not None:
        labelled = labelled.where(Label.criterion_id.in_([c.id for c in version.criteria]))
    rows = session.execute(
        select(JudgeConfig.name, JudgeConfig.verdict_mode)
        .where(
            JudgeConfig.id.in_(
                select(Judgment.judge_config_id).where(Judgment.criterion_id.in_(labelled))
            )
        )
        .distinct()
    )
    per_criterion = set(modes_that(per_criterion=True))
    return sorted({name for name, mode in rows if mode in per_criterion})
