"""Label sets: labelled data a judge is measured against, stored once and never edited.

A label set holds labels of three kinds, each on stored items (``models.labels``):

- pointwise: a completion x a criterion -> met (1.0) / not met (0.0), or a value in [0, 1];
- pairwise: two different completions of one prompt -> first (1.0) / second (0.0) / tie (0.5);
- scalar: a completion -> a score within the label's stated scale [scale_min, scale_max].

Several labellers of one item are several labels with the same ``item``; the majority and the
agreement between labellers are computed (``label_set_summary``), never stored.

``save_label_set`` validates every label before it stores anything, so a bad label (a pair
across two prompts, a score outside its scale) fails the whole import with the label's location.
The set's ``content_hash`` names its content (the sorted labels, by content hashes of what they
point at, and the rubric version they are judged under): importing the same content under the
same name again adds nothing; other content under a stored name is refused.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from rubricsvc.batching import batches
from rubricsvc.errors import ConflictError, NotFoundError, ValidationFailed
from rubricsvc.hashing import canonical_json, content_hash
from rubricsvc.models import (
    Completion,
    Criterion,
    Label,
    LabelKind,
    LabelSet,
    Prompt,
    Rubric,
    RubricVersion,
)
from rubricsvc.validation.metrics import labeller_agreement, majority

NAME_MAX = 200  # label set names, items and labellers: the columns' length
# A pairwise label's verdict and the value it stands for (the first response's chance to win).
PAIRWISE_VALUES = {"first": 1.0, "second": 0.0, "tie": 0.5}
MET, NOT_MET = "met", "not met"


@dataclass(frozen=True)
class LabelInput:
    """One labeller's label on one stored item, as an importer resolved it.

    ``location`` (``file:line``, or a record) prefixes any error about this label."""

    kind: LabelKind
    item: str
    prompt: Prompt
    completion: Completion
    labeller: str
    value: float
    verdict: str | None = None
    other_completion: Completion | None = None  # pairwise: the one shown second
    criterion: Criterion | None = None  # pointwise
    scale_min: float | None = None  # scalar
    scale_max: float | None = None
    tags: tuple[str, ...] = ()
    location: str | None = None

    def content(self) -> dict[str, Any]:
        """What the label says, by the content hashes of what it points at (no row ids)."""
        other = self.other_completion
        return {
            "kind": self.kind.value,
            "item": self.item,
            "prompt": self.prompt.content_hash,
            "completion": self.completion.content_hash,
            "other_completion": other.content_hash if other is not None else None,
            "criterion": self.criterion.content_hash if self.criterion is not None else None,
            "labeller": self.labeller,
            "value": self.value,
            "verdict": self.verdict,
            "scale": [self.scale_min, self.scale_max] if self.kind == LabelKind.SCALAR else None,
            "tags": sorted(self.tags),
        }


@dataclass
class LabelSetReport:
    """What ``save_label_set`` did: the set, whether it was added, its labels by kind."""

    name: str
    label_set_id: int
    content_hash: str
    added: bool
    labels: Counter[str] = field(default_factory=Counter)  # kind -> labels (in the set)

    @property
    def total(self) -> int:
        return sum(self.labels.values())


def label_set_hash(labels: Sequence[LabelInput], rubric_version: RubricVersion | None) -> str:
    """The hash of a set's content: its labels, sorted, and the rubric version they are judged
    under, each by content hash, so the same labels on the same content hash alike anywhere."""
    ordered = sorted(canonical_json(label.content()) for label in labels)
    return content_hash(
        {
            "rubric_version": rubric_version.content_hash if rubric_version else None,
            "labels": ordered,
        }
    )


def save_label_set(
    session: Session,
    name: str,
    source: str | None,
    description: str | None,
    labels: list[LabelInput],
    rubric_version_id: int | None = None,
) -> LabelSetReport:
    """Store the label set ``name`` (every label validated first); the caller owns the
    transaction. The same content under the same name adds nothing; other content is refused."""
    _check_name(name)
    if not labels:
        raise ValidationFailed(f"label set {name!r}: no labels to store")
    version = None
    if rubric_version_id is not None:
        version = session.get(RubricVersion, rubric_version_id)
        if version is None:
            raise NotFoundError(f"no rubric version with id {rubric_version_id}")
    validate_labels(labels)
    digest = label_set_hash(labels, version)
    by_kind = Counter(label.kind.value for label in labels)
    stored = session.scalar(select(LabelSet).where(LabelSet.name == name))
    if stored is not None:
        if stored.content_hash != digest:
            raise ConflictError(
                f"label set {name!r} is already stored with other content (label sets are never "
                "edited): import these labels under another name (--name)"
            )
        return LabelSetReport(name, stored.id, digest, added=False, labels=by_kind)
    label_set = LabelSet(
        name=name,
        source=source,
        description=description,
        rubric_version_id=rubric_version_id,
        content_hash=digest,
    )
    session.add(label_set)
    session.flush()
    rows = [_row(label_set.id, label) for label in labels]
    for batch in batches(rows):
        session.execute(insert(Label), batch)
    session.flush()
    return LabelSetReport(name, label_set.id, digest, added=True, labels=by_kind)


def _row(label_set_id: int, label: LabelInput) -> dict[str, Any]:
    other = label.other_completion
    return {
        "label_set_id": label_set_id,
        "kind": label.kind,
        "item": label.item,
        "prompt_id": label.prompt.id,
        "completion_id": label.completion.id,
        "other_completion_id": other.id if other is not None else None,
        "criterion_id": label.criterion.id if label.criterion is not None else None,
        "labeller": label.labeller,
        "value": label.value,
        "verdict": label.verdict,
        "scale_min": label.scale_min,
        "scale_max": label.scale_max,
        "tags": list(label.tags),
    }


# --- validation ---------------------------------------------------------------------------------


def _check_name(name: str) -> None:
    if not name.strip() or len(name) > NAME_MAX:
        raise ValidationFailed(
            f"label set name {name!r}: expected 1 to {NAME_MAX} characters, not blank"
        )


def validate_labels(labels: Sequence[LabelInput]) -> None:
    """Refuse the first bad label with one line naming its location; check every label, and
    that the labels of one item all point at the same thing, before anything is stored."""
    targets: dict[str, tuple[str, tuple[Any, ...], str]] = {}  # item -> kind, target, location
    seen: set[tuple[str, str]] = set()
    for number, label in enumerate(labels, start=1):
        where = label.location or f"label {number}"
        try:
            _validate(label)
        except ValidationFailed as err:
            raise ValidationFailed(f"{where}: {err}") from None
        target = (
            label.completion.id,
            label.other_completion.id if label.other_completion is not None else None,
            label.criterion.id if label.criterion is not None else None,
            label.scale_min,
            label.scale_max,
        )
        known = targets.setdefault(label.item, (label.kind.value, target, where))
        if known[:2] != (label.kind.value, target):
            raise ValidationFailed(
                f"{where}: item {label.item!r} is labelled at {known[2]} on other completions, "
                "criterion, scale or kind: one item is one thing labelled"
            )
        if (label.item, label.labeller) in seen:
            raise ValidationFailed(
                f"{where}: labeller {label.labeller!r} labels item {label.item!r} twice"
            )
        seen.add((label.item, label.labeller))


def _validate(label: LabelInput) -> None:
    if not label.item or len(label.item) > NAME_MAX:
        raise ValidationFailed(f"item {label.item!r}: expected 1 to {NAME_MAX} characters")
    if not label.labeller.strip() or len(label.labeller) > NAME_MAX:
        raise ValidationFailed(
            f"labeller {label.labeller!r}: expected 1 to {NAME_MAX} characters, not blank"
        )
    if not math.isfinite(label.value):
        raise ValidationFailed(f"value {label.value}: expected a finite number")
    if label.completion.prompt_id != label.prompt.id:
        raise ValidationFailed(
            f"completion {_named(label.completion)} is not a completion of prompt {label.prompt.id}"
        )
    if label.kind == LabelKind.PAIRWISE:
        _validate_pairwise(label)
    elif label.kind == LabelKind.SCALAR:
        _validate_scalar(label)
    else:
        _validate_pointwise(label)


def _validate_pairwise(label: LabelInput) -> None:
    first, second = label.completion, label.other_completion
    if second is None:
        raise ValidationFailed("a pairwise label needs two completions")
    if label.criterion is not None or label.scale_min is not None or label.scale_max is not None:
        raise ValidationFailed("a pairwise label has no criterion and no scale")
    if second.prompt_id != first.prompt_id:
        raise ValidationFailed(
            f"a pairwise label compares two completions of one prompt: {_named(first)} answers "
            f"prompt {first.prompt_id}, {_named(second)} prompt {second.prompt_id}"
        )
    if second.id == first.id or second.content_hash == first.content_hash:
        raise ValidationFailed(
            f"a pairwise label compares two different completions: {_named(first)} and "
            f"{_named(second)} have the same text"
        )
    expected = PAIRWISE_VALUES.get(label.verdict or "")
    if expected is None:
        raise ValidationFailed(
            f"pairwise verdict {label.verdict!r}: expected one of {', '.join(PAIRWISE_VALUES)}"
        )
    if label.value != expected:
        raise ValidationFailed(
            f"pairwise verdict {label.verdict!r} has value {expected:g}, not {label.value:g}"
        )


def _validate_scalar(label: LabelInput) -> None:
    low, high = label.scale_min, label.scale_max
    if label.other_completion is not None or label.criterion is not None:
        raise ValidationFailed("a scalar label scores one completion, with no criterion")
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        raise ValidationFailed("a scalar label needs its scale [min, max], two finite numbers")
    if not low < high:
        raise ValidationFailed(f"scale [{low:g}, {high:g}]: expected min < max")
    if not low <= label.value <= high:
        raise ValidationFailed(f"score {label.value:g} is outside its scale [{low:g}, {high:g}]")


def _validate_pointwise(label: LabelInput) -> None:
    criterion = label.criterion
    if criterion is None:
        raise ValidationFailed("a pointwise label needs a criterion")
    if label.other_completion is not None or label.scale_min is not None:
        raise ValidationFailed("a pointwise label judges one completion, with no scale")
    if not 0.0 <= label.value <= 1.0:
        raise ValidationFailed(f"pointwise value {label.value:g} is outside [0, 1]")
    expected = {MET: 1.0, NOT_MET: 0.0}
    if label.verdict is not None and expected.get(label.verdict) != label.value:
        raise ValidationFailed(
            f"pointwise verdict {label.verdict!r}: expected met (1) or not met (0) matching "
            f"the value {label.value:g}"
        )
    owner = criterion.version.rubric.prompt_id
    if owner is not None and owner != label.completion.prompt_id:
        raise ValidationFailed(
            f"criterion {criterion.id} belongs to a rubric of prompt {owner}, not to prompt "
            f"{label.completion.prompt_id} of completion {_named(label.completion)}"
        )


def _named(completion: Completion) -> str:
    return repr(completion.external_id) if completion.external_id else f"#{completion.id}"


# --- queries ------------------------------------------------------------------------------------


def get_label_set(session: Session, name: str) -> LabelSet:
    """The label set ``name``, or ``NotFoundError`` listing the stored names."""
    found = session.scalar(select(LabelSet).where(LabelSet.name == name))
    if found is not None:
        return found
    known = list(session.scalars(select(LabelSet.name).order_by(LabelSet.name)))
    stored = f"known: {', '.join(known)}" if known else "none is stored"
    raise NotFoundError(f"no label set named {name!r} ({stored})")


def list_label_sets(session: Session) -> list[dict[str, Any]]:
    """Every label set with its label counts by kind, by name."""
    counts: dict[int, Counter[str]] = {}
    query = select(Label.label_set_id, Label.kind, func.count()).group_by(
        Label.label_set_id, Label.kind
    )
    for set_id, kind, count in session.execute(query):
        counts.setdefault(set_id, Counter())[LabelKind(kind).value] = count
    rows = []
    for label_set in session.scalars(select(LabelSet).order_by(LabelSet.name)):
        by_kind = counts.get(label_set.id, Counter())
        rows.append(
            {
                "name": label_set.name,
                "source": label_set.source,
                "labels": sum(by_kind.values()),
                "by_kind": dict(sorted(by_kind.items())),
                "rubric_version": _version_ref(session, label_set.rubric_version_id),
                "content_hash": label_set.content_hash,
                "created_at": label_set.created_at.isoformat() if label_set.created_at else None,
            }
        )
    return rows


def label_set_summary(session: Session, label_set: LabelSet) -> dict[str, Any]:
    """What a set holds, per kind: labels, items, labellers, and (computed) the share of items
    whose labellers have a majority and the mean agreement between two labellers of an item
    (pairwise and pointwise labels: the verdict, else the value, is the category)."""
    rows = session.execute(
        select(Label.kind, Label.item, Label.labeller, Label.verdict, Label.value)
        .where(Label.label_set_id == label_set.id)
        .order_by(Label.id)
    ).all()
    kinds: dict[str, dict[str, list[str]]] = {}  # kind -> item -> votes
    labellers: dict[str, Counter[str]] = {}
    for stored_kind, item, labeller, verdict, value in rows:
        kind = LabelKind(stored_kind).value
        vote = verdict if verdict is not None else f"{value:g}"
        kinds.setdefault(kind, {}).setdefault(item, []).append(vote)
        labellers.setdefault(kind, Counter())[labeller] += 1
    by_kind = {}
    for kind, items in sorted(kinds.items()):
        votes = list(items.values())
        categorical = kind in (LabelKind.PAIRWISE.value, LabelKind.POINTWISE.value)
        several = [v for v in votes if len(v) >= 2]
        with_majority = sum(1 for v in votes if majority(v) is not None)
        by_kind[kind] = {
            "labels": sum(len(v) for v in votes),
            "items": len(votes),
            "labellers": dict(sorted(labellers[kind].items())),
            "items_with_several_labellers": len(several),
            "majority_share": with_majority / len(votes) if categorical and votes else None,
            "labeller_agreement": labeller_agreement(votes) if categorical else None,
        }
    return {
        "name": label_set.name,
        "source": label_set.source,
        "description": label_set.description,
        "rubric_version": _version_ref(session, label_set.rubric_version_id),
        "content_hash": label_set.content_hash,
        "created_at": label_set.created_at.isoformat() if label_set.created_at else None,
        "labels": len(rows),
        "by_kind": by_kind,
    }


def _version_ref(session: Session, version_id: int | None) -> str | None:
    if version_id is None:
        return None
    found = session.execute(
        select(Rubric.name, RubricVersion.number)
        .join(RubricVersion, RubricVersion.rubric_id == Rubric.id)
        .where(RubricVersion.id == version_id)
    ).one()
    return f"{found[0]}@{found[1]}"
