"""Creating, versioning and reviewing rubrics. Services flush; the caller commits.

Saved versions are never changed: ``save_rubric`` with new content appends a version
whose parent is the previous latest, and the same content is a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc.errors import ConflictError
from rubricsvc.hashing import content_hash
from rubricsvc.models import (
    Criterion,
    Origin,
    Prompt,
    Rubric,
    RubricVersion,
    VersionStatus,
)
from rubricsvc.prompts import get_or_create_prompt
from rubricsvc.rubrics.repository import get_rubric, latest_version
from rubricsvc.rubrics.schemas import CriterionSpec, RubricSpec


@dataclass(frozen=True)
class SaveResult:
    version: RubricVersion
    outcome: str  # "created" (new rubric), "new version", or "unchanged"


def save_rubric(session: Session, spec: RubricSpec) -> SaveResult:
    """Store ``spec`` as the rubric's next version, unless the latest already has this content."""
    prompt = _prompt_for(session, spec)
    rubric = get_rubric(session, spec.name)
    if rubric is None:
        rubric = Rubric(
            name=spec.name,
            prompt_id=prompt.id if prompt else None,
            description=spec.description,
        )
        session.add(rubric)
        session.flush()
        return SaveResult(_append_version(session, rubric, spec, parent=None), "created")

    if prompt is not None and rubric.prompt_id not in (None, prompt.id):
        raise ConflictError(
            f"rubric {spec.name!r} belongs to prompt {rubric.prompt_id}, not to the prompt in this file"
        )
    parent = latest_version(session, rubric)
    if parent is not None and parent.content_hash == spec.content_hash():
        return SaveResult(parent, "unchanged")
    return SaveResult(_append_version(session, rubric, spec, parent=parent), "new version")


def _prompt_for(session: Session, spec: RubricSpec) -> Prompt | None:
    if spec.prompt is None:
        return None
    return get_or_create_prompt(
        session,
        spec.prompt.chat(),
        external_id=spec.prompt.external_id,
        reference_answer=spec.prompt.reference_answer,
        tags=spec.prompt.tags,
    )


def _append_version(
    session: Session, rubric: Rubric, spec: RubricSpec, parent: RubricVersion | None
) -> RubricVersion:
    # Two writers racing for the same number collide on the (rubric_id, number) unique key,
    # so one of them fails instead of both silently claiming the same version.
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
        content_hash=content_hash(spec.judged_content()),
    )


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
        "criteria": [
            {
                "text": c.text,
                "explanation": c.explanation,
                "weight": c.weight,
                "category": c.category.value,
                "theme": c.theme,
                "kind": c.kind.value,
                "scale": c.scale,
                "check": c.check,
                "required": c.required,
                "tags": c.tags,
            }
            for c in version.criteria
        ],
    }
    if rubric.prompt is not None:
        data["prompt"] = {
            "messages": rubric.prompt.messages,
            "external_id": rubric.prompt.external_id,
            "reference_answer": rubric.prompt.reference_answer,
            "tags": rubric.prompt.tags,
        }
    return RubricSpec.model_validate(data)


def approve(session: Session, version: RubricVersion, reviewer: str | None = None) -> RubricVersion:
    """Mark a draft approved: scoring and training use approved versions by default."""
    if version.status == VersionStatus.RETIRED:
        raise ConflictError(f"{version.ref} is retired; approve a newer version instead")
    if version.status == VersionStatus.APPROVED:
        raise ConflictError(f"{version.ref} is already approved")
    return _review(session, version, VersionStatus.APPROVED, reviewer)


def retire(session: Session, version: RubricVersion, reviewer: str | None = None) -> RubricVersion:
    """Take a version out of use; it stays stored so past scores remain traceable."""
    if version.status == VersionStatus.RETIRED:
        raise ConflictError(f"{version.ref} is already retired")
    return _review(session, version, VersionStatus.RETIRED, reviewer)


def _review(
    session: Session, version: RubricVersion, status: VersionStatus, reviewer: str | None
) -> RubricVersion:
    version.status = status
    version.reviewed_by = reviewer
    version.reviewed_at = datetime.now(UTC)
    session.flush()
    return version
