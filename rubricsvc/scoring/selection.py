"""Which completions to score, and against which rubric version."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from rubricsvc.errors import NotFoundError, ValidationFailed
from rubricsvc.models import Completion, Prompt, Rubric, RubricVersion, VersionStatus
from rubricsvc.rubrics.repository import resolve_version


@dataclass(frozen=True)
class Selection:
    completion_ids: tuple[int, ...] = ()
    prompt_external_ids: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    rubric_ref: str | None = None  # one version for every selected completion of its prompt
    include_drafts: bool = False  # else only approved versions are used


def _completions(session: Session, selection: Selection) -> list[Completion]:
    query = select(Completion).options(selectinload(Completion.prompt)).order_by(Completion.id)
    if selection.completion_ids:
        query = query.where(Completion.id.in_(selection.completion_ids))
    if selection.prompt_external_ids:
        query = query.join(Prompt).where(Prompt.external_id.in_(selection.prompt_external_ids))
    if selection.sources:
        query = query.where(Completion.source.in_(selection.sources))
    completions = list(session.scalars(query))
    if selection.completion_ids:
        missing = set(selection.completion_ids) - {c.id for c in completions}
        if missing:
            raise NotFoundError(f"no completion with id {min(missing)}")
    return completions


def _usable_version(session: Session, rubric: Rubric, include_drafts: bool) -> RubricVersion | None:
    allowed = {VersionStatus.APPROVED} | ({VersionStatus.DRAFT} if include_drafts else set())
    return session.scalar(
        select(RubricVersion)
        .where(RubricVersion.rubric_id == rubric.id, RubricVersion.status.in_(allowed))
        .order_by(RubricVersion.number.desc())
        .limit(1)
    )


def select_work(
    session: Session, selection: Selection
) -> tuple[list[tuple[Completion, RubricVersion]], list[Completion]]:
    """(completion, version) pairs to score, and the selected completions that have no rubric."""
    completions = _completions(session, selection)
    if selection.rubric_ref is not None:
        version = resolve_version(session, selection.rubric_ref)
        if version.status == VersionStatus.RETIRED:
            raise ValidationFailed(f"{version.ref} is retired; score with a current version")
        prompt_id = version.rubric.prompt_id
        matched = [c for c in completions if prompt_id is None or c.prompt_id == prompt_id]
        unmatched = [c for c in completions if c not in matched]
        return [(c, version) for c in matched], unmatched

    rubrics_by_prompt: dict[int, list[Rubric]] = defaultdict(list)
    prompt_ids = {c.prompt_id for c in completions}
    if prompt_ids:
        for rubric in session.scalars(select(Rubric).where(Rubric.prompt_id.in_(prompt_ids))):
            rubrics_by_prompt[rubric.prompt_id or 0].append(rubric)
    versions: dict[int, list[RubricVersion]] = {}
    for prompt_id, rubrics in rubrics_by_prompt.items():
        found = [_usable_version(session, r, selection.include_drafts) for r in rubrics]
        versions[prompt_id] = [v for v in found if v is not None]
    work = [(c, v) for c in completions for v in versions.get(c.prompt_id, [])]
    without = [c for c in completions if not versions.get(c.prompt_id)]
    return work, without
