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
    # Exactly these versions (each for the completions of its prompt, a shared one for all):
    # a job pins what it found at submission, so a version approved mid-job changes nothing.
    version_ids: tuple[int, ...] = ()
    # Modes that compare completions: compare exactly these (completion id, completion id)
    # pairs (labelled pairs under evaluation) instead of every selected completion of a prompt.
    pairs: tuple[tuple[int, int], ...] = ()


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


def _latest_usable_versions(
    session: Session, prompt_ids: set[int], include_drafts: bool
) -> dict[int, list[RubricVersion]]:
    """Per prompt, the newest usable version of each of its rubrics, criteria loaded: one query."""
    allowed = {VersionStatus.APPROVED} | ({VersionStatus.DRAFT} if include_drafts else set())
    query = (
        select(RubricVersion)
        .join(Rubric, RubricVersion.rubric_id == Rubric.id)
        .where(Rubric.prompt_id.in_(prompt_ids), RubricVersion.status.in_(allowed))
        .options(selectinload(RubricVersion.criteria), selectinload(RubricVersion.rubric))
        .order_by(RubricVersion.rubric_id, RubricVersion.number.desc())
    )
    newest: dict[int, RubricVersion] = {}
    for version in session.scalars(query):
        newest.setdefault(version.rubric_id, version)
    by_prompt: dict[int, list[RubricVersion]] = defaultdict(list)
    for version in newest.values():
        by_prompt[version.rubric.prompt_id or 0].append(version)
    return by_prompt


def select_work(
    session: Session, selection: Selection
) -> tuple[list[tuple[Completion, RubricVersion]], list[Completion]]:
    """(completion, version) pairs to score, and the selected completions that have no rubric."""
    completions = _completions(session, selection)
    if selection.version_ids:
        return _pair(completions, _versions_by_id(session, selection.version_ids))
    if selection.rubric_ref is not None:
        version = resolve_version(session, selection.rubric_ref)
        if version.status == VersionStatus.RETIRED:
            raise ValidationFailed(f"{version.ref} is retired; score with a current version")
        prompt_id = version.rubric.prompt_id
        matched = [c for c in completions if prompt_id is None or c.prompt_id == prompt_id]
        unmatched = [c for c in completions if prompt_id is not None and c.prompt_id != prompt_id]
        return [(c, version) for c in matched], unmatched

    prompt_ids = {c.prompt_id for c in completions}
    versions = _latest_usable_versions(session, prompt_ids, selection.include_drafts)
    work = [(c, v) for c in completions for v in versions.get(c.prompt_id, [])]
    without = [c for c in completions if not versions.get(c.prompt_id)]
    return work, without


def _versions_by_id(session: Session, ids: tuple[int, ...]) -> list[RubricVersion]:
    query = (
        select(RubricVersion)
        .where(RubricVersion.id.in_(ids))
        .options(selectinload(RubricVersion.criteria), selectinload(RubricVersion.rubric))
        .order_by(RubricVersion.id)
    )
    versions = list(session.scalars(query))
    missing = set(ids) - {v.id for v in versions}
    if missing:
        raise NotFoundError(f"no rubric version with id {min(missing)}")
    return versions


def _pair(
    completions: list[Completion], versions: list[RubricVersion]
) -> tuple[list[tuple[Completion, RubricVersion]], list[Completion]]:
    """Each completion with the versions of its prompt's rubrics and the shared ones."""
    work = [
        (c, v) for c in completions for v in versions if v.rubric.prompt_id in (None, c.prompt_id)
    ]
    paired = {c.id for c, _ in work}
    return work, [c for c in completions if c.id not in paired]
