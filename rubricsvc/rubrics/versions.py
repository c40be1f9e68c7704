"""Creating, versioning and reviewing rubrics. It flushes; the caller commits.

Saved versions are never changed: ``save_rubric`` with new content appends a version
whose parent is the previous latest, and the same content is a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc.db import insert_for
from rubricsvc.errors import ConflictError
from rubricsvc.hashing import content_hash
from rubricsvc.models import (
    Criterion,
    CriterionTarget,
    Origin,
    Prompt,
    Rubric,
    RubricVersion,
    VersionStatus,
)
from rubricsvc.models.base import utcnow
from rubricsvc.prompts import store_prompt
from rubricsvc.rubrics.repository import latest_version
from rubricsvc.rubrics.schemas import CriterionSpec, PromptSpec, RubricSpec


@dataclass(frozen=True)
class SaveResult:
    version: RubricVersion
    outcome: str  # "created" (new rubric), "new version", or "unchanged"


def save_rubric(
    session: Session, spec: RubricSpec, *, edited: RubricVersion | None = None
) -> SaveResult:
    """Store ``spec`` as the rubric's next version, unless the latest already has this content.

    The rubric's row stays locked until the transaction ends, so concurrent saves of one
    rubric take turns: each reads the latest version only after the previous save committed,
    and becomes its child (N+1, then N+2), never a sibling that loses the race. An edit of an
    older version (``edited``) is that version's child: the lineage says what it came from.
    """
    prompt = _prompt_for(session, spec)
    rubric, created = _locked_rubric(session, spec, prompt)
    if created:
        return SaveResult(_append_version(session, rubric, spec, parent=None), "created")

    if prompt is not None and rubric.prompt_id not in (None, prompt.id):
        raise ConflictError(
            f"rubric {spec.name!r} belongs to prompt {rubric.prompt_id}, not to the prompt in this file"
        )
    latest = latest_version(session, rubric)
    if latest is not None and latest.content_hash == spec.content_hash():
        return SaveResult(latest, "unchanged")
    if edited is not None and edited.rubric_id != rubric.id:
        raise ConflictError(f"{edited.ref} is not a version of rubric {spec.name!r}")
    parent = edited or latest
    return SaveResult(_append_version(session, rubric, spec, parent=parent), "new version")


def save_grown(session: Session, spec: RubricSpec, grown_from: RubricVersion) -> SaveResult:
    """Store ``spec`` as the next version of its rubric, its parent the version it grew from
    (``grown_from``, which may belong to another rubric: an evolved set's first version grows
    from the persistent rubric's); the same content as the rubric's latest is a no-op."""
    prompt = _prompt_for(session, spec)
    rubric, created = _locked_rubric(session, spec, prompt)
    latest = None if created else latest_version(session, rubric)
    if latest is not None and latest.content_hash == spec.content_hash():
        return SaveResult(latest, "unchanged")
    version = _append_version(session, rubric, spec, parent=grown_from)
    return SaveResult(version, "created" if created else "new version")


def _locked_rubric(
    session: Session, spec: RubricSpec, prompt: Prompt | None
) -> tuple[Rubric, bool]:
    """The rubric named by ``spec``, created if new, with its row locked; and whether it is new.

    PostgreSQL locks the row (``SELECT ... FOR UPDATE``); SQLite has one writer at a time
    and ignores the clause. A rubric created by a concurrent transaction is waited for
    (``ON CONFLICT DO NOTHING``), then locked like any existing one.
    """
    rubric = _select_locked(session, spec.name)
    if rubric is not None:
        return rubric, False
    inserted = session.scalar(
        insert_for(session, Rubric)
        .values(
            name=spec.name,
            prompt_id=prompt.id if prompt else None,
            description=spec.description,
            created_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=[Rubric.name])
        .returning(Rubric.id)
    )
    rubric = _select_locked(session, spec.name)
    assert rubric is not None  # inserted above, or by a transaction that has committed
    return rubric, inserted is not None


def _select_locked(session: Session, name: str) -> Rubric | None:
    return session.scalar(
        select(Rubric)
        .where(Rubric.name == name)
        .with_for_update()
        .execution_options(populate_existing=True)
    )


def _prompt_for(session: Session, spec: RubricSpec) -> Prompt | None:
    return store_prompt_spec(session, spec.prompt)[0] if spec.prompt else None


def store_prompt_spec(session: Session, spec: PromptSpec) -> tuple[Prompt, bool]:
    """The prompt ``spec`` describes, created if new, and whether it was created."""
    return store_prompt(
        session,
        spec.chat(),
        external_id=spec.external_id,
        reference_answer=spec.reference_answer,
        tags=spec.tags,
    )


def _append_version(
    session: Session, rubric: Rubric, spec: RubricSpec, parent: RubricVersion | None
) -> RubricVersion:
    # The caller holds the rubric's lock; should anything bypass it, two writers racing for
    # one number collide on the (rubric_id, number) unique key instead of both claiming it.
    number = (
        session.scalar(
            select(func.max(RubricVersion.number)).where(RubricVersion.rubric_id == rubric.id)
        )
        or 0
    ) + 1
    version = RubricVersion(
        rubric_id=rubric.id,
        number=number,
        parent_id=parent.id if parent else None,
        content_hash=spec.content_hash(),
        title=spec.title,
        dimension_weights=spec.dimension_weights,
        origin=Origin(spec.origin),
        origin_detail=spec.origin_detail,
        note=spec.note,
        status=VersionStatus.DRAFT,
    )
    session.add(version)
    session.flush()
    session.add_all(
        _criterion_row(version.id, position, criterion)
        for position, criterion in enumerate(spec.criteria)
    )
    session.flush()
    session.refresh(version)
    return version


def _criterion_row(version_id: int, position: int, spec: CriterionSpec) -> Criterion:
    assert spec.category is not None  # filled in by the schema's validator
    return Criterion(
        version_id=version_id,
        position=position,
        text=spec.text,
        explanation=spec.explanation,
        weight=spec.weight,
        category=spec.category,
        theme=spec.theme,
        kind=spec.kind,
        scale=spec.scale.model_dump(),
        check=spec.check.model_dump() if spec.check else None,
        required=spec.required,
        tags=spec.tags,
        target=spec.target.value,
        evidence=spec.evidence or None,
        content_hash=content_hash(spec.judged_content()),
    )


def authored_fields(criterion: Criterion) -> dict[str, Any]:
    """A stored criterion's fields in the rubric file format."""
    return {
        "text": criterion.text,
        "explanation": criterion.explanation,
        "weight": criterion.weight,
        "category": criterion.category.value,
        "theme": criterion.theme,
        "kind": criterion.kind.value,
        "scale": criterion.scale,
        "check": criterion.check,
        "required": criterion.required,
        "tags": criterion.tags,
        # Only when set, so an exported rubric of response criteria reads as it always did.
        **({"target": criterion.target} if criterion.target == CriterionTarget.TRAJECTORY else {}),
        **({"evidence": criterion.evidence} if criterion.evidence else {}),
    }


def spec_of(version: RubricVersion) -> RubricSpec:
    """The authored form of a stored version (for export, diff and editing)."""
    rubric = version.rubric
    data: dict[str, object] = {
        "name": rubric.name,
        "title": version.title,
        "dimension_weights": version.dimension_weights,
        "description": rubric.description,
        "origin": version.origin.value,
        "origin_detail": version.origin_detail,
        "note": version.note,
        "criteria": [authored_fields(c) for c in version.criteria],
    }
    if rubric.prompt is not None:
        data["prompt"] = prompt_spec_of(rubric.prompt)
    return RubricSpec.model_validate(data)


def prompt_spec_of(prompt: Prompt) -> PromptSpec:
    """The authored form of a stored prompt."""
    return PromptSpec.model_validate(
        {
            "messages": prompt.messages,
            "external_id": prompt.external_id,
            "reference_answer": prompt.reference_answer,
            "tags": prompt.tags,
        }
    )


def approve(
    session: Session, version: RubricVersion, reviewer: str | None = None, note: str | None = None
) -> RubricVersion:
    """Mark a draft approved: scoring and training use approved versions by default."""
    if version.status == VersionStatus.RETIRED:
        raise ConflictError(f"{version.ref} is retired; approve a newer version instead")
    if version.status == VersionStatus.APPROVED:
        raise ConflictError(f"{version.ref} is already approved")
    return _review(session, version, VersionStatus.APPROVED, reviewer, note)


def retire(
    session: Session, version: RubricVersion, reviewer: str | None = None, note: str | None = None
) -> RubricVersion:
    """Take a version out of use; it stays stored so past scores remain traceable."""
    if version.status == VersionStatus.RETIRED:
        raise ConflictError(f"{version.ref} is already retired")
    return _review(session, version, VersionStatus.RETIRED, reviewer, note)


def _review(
    session: Session,
    version: RubricVersion,
    status: VersionStatus,
    reviewer: str | None,
    note: str | None,
) -> RubricVersion:
    version.status = status
    version.reviewed_by = reviewer
    version.reviewed_at = datetime.now(UTC)
    version.review_note = note.strip() or None if note else None
    session.flush()
    return version
