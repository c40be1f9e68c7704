"""Which completions to score, and against which rubric versions.

A completion is scored against the newest usable version of each of its prompt's rubrics and
of each shared rubric assigned to it or to its prompt (``rubricsvc.assignments``). A chosen
version (``rubric_ref``) scores the completions of its prompt (a draft only where drafts are
included: naming one is asking for it); a shared one scores the
completions assigned to it, or, when the selection names completions, prompts or sources,
exactly those: it never widens to every completion stored.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from rubricsvc.assignments import assigned_rubrics, completions_assigned_to
from rubricsvc.errors import ForbiddenError, NotFoundError, ValidationFailed
from rubricsvc.models import (
    Completion,
    CompletionDocument,
    Prompt,
    Rubric,
    RubricVersion,
    VersionStatus,
)
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
    # With ``version_ids``: a shared version scores only the completions assigned to its rubric
    # (a job's pinned versions), else every selected completion (a labelled set's rubric).
    shared_by_assignment: bool = False
    # Rewards: one reward needs one rubric. A completion with more than one usable version
    # (its prompt's own rubrics and those assigned to it) is not judged at all; it is
    # returned with the completions without work, and ``without_reasons`` says ``ambiguous``.
    one_version_each: bool = False

    @property
    def narrowed(self) -> bool:
        """Whether the selection names completions, prompts or sources."""
        return bool(self.completion_ids or self.prompt_external_ids or self.sources)


def selected_completions(session: Session, selection: Selection) -> list[Completion]:
    """The completions ``selection`` names (by id, prompt, source; all when it names none),
    in id order, their prompts and documents loaded; NotFoundError for a name that matches
    nothing stored."""
    query = (
        select(Completion)
        .options(
            selectinload(Completion.prompt),
            selectinload(Completion.documents).selectinload(CompletionDocument.document),
        )
        .order_by(Completion.id)
    )
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
    if selection.prompt_external_ids:
        known = set(
            session.scalars(
                select(Prompt.external_id).where(
                    Prompt.external_id.in_(selection.prompt_external_ids)
                )
            )
        )
        for name in selection.prompt_external_ids:
            if name not in known:
                raise NotFoundError(f"no prompt with external id {name!r}")
    if selection.sources:
        sources = set(
            session.scalars(
                select(Completion.source).where(Completion.source.in_(selection.sources))
            )
        )
        for name in selection.sources:
            if name not in sources:
                raise NotFoundError(f"no completion has source {name!r}")
    return completions


def _latest_usable_versions(
    session: Session, prompt_ids: set[int], rubric_ids: set[int], include_drafts: bool
) -> tuple[dict[int, list[RubricVersion]], dict[int, RubricVersion]]:
    """Per prompt, the newest usable version of each of its rubrics, and per assigned
    rubric id its newest usable version, criteria loaded: one query."""
    allowed = {VersionStatus.APPROVED} | ({VersionStatus.DRAFT} if include_drafts else set())
    query = (
        select(RubricVersion)
        .join(Rubric, RubricVersion.rubric_id == Rubric.id)
        .where(
            Rubric.prompt_id.in_(prompt_ids) | Rubric.id.in_(rubric_ids),
            RubricVersion.status.in_(allowed),
        )
        .options(selectinload(RubricVersion.criteria), selectinload(RubricVersion.rubric))
        .order_by(RubricVersion.rubric_id, RubricVersion.number.desc())
    )
    newest: dict[int, RubricVersion] = {}
    for version in session.scalars(query):
        newest.setdefault(version.rubric_id, version)
    by_prompt: dict[int, list[RubricVersion]] = defaultdict(list)
    for version in newest.values():
        if version.rubric.prompt_id in prompt_ids:
            by_prompt[version.rubric.prompt_id or 0].append(version)
    return by_prompt, {r: v for r, v in newest.items() if r in rubric_ids}


def select_work(
    session: Session, selection: Selection, completions: Sequence[Completion] | None = None
) -> tuple[list[tuple[Completion, RubricVersion]], list[Completion]]:
    """(completion, version) pairs to score, and the selected completions that have no rubric.
    ``completions``: these (in id order; stored, or not yet, as ``scoring.workload`` plans a
    reward batch) instead of the ones the selection's completion ids name."""
    if selection.rubric_ref is not None and not selection.version_ids:
        return _with_chosen_version(session, selection, completions)
    if completions is None:
        completions = selected_completions(session, selection)
    if selection.version_ids:
        versions = _versions_by_id(session, selection.version_ids)
        assigned = (
            assigned_rubrics(session, completions) if selection.shared_by_assignment else None
        )
        return _pair(completions, versions, assigned)

    work = []
    without = []
    usable = usable_versions(session, completions, selection.include_drafts)
    for c, versions in zip(completions, usable, strict=True):
        if not versions or (selection.one_version_each and len(versions) > 1):
            without.append(c)
        else:
            work += [(c, v) for v in versions]
    return work, without


def usable_versions(
    session: Session, completions: Sequence[Completion], include_drafts: bool
) -> list[list[RubricVersion]]:
    """For each of ``completions``, in order, the newest usable version of each rubric it is
    scored against: its prompt's own rubrics, then those assigned to it."""
    prompt_ids = {c.prompt_id for c in completions}
    assigned = assigned_rubrics(session, completions)
    rubric_ids = set().union(*assigned.values()) if assigned else set()
    own, shared = _latest_usable_versions(session, prompt_ids, rubric_ids, include_drafts)
    return [
        list(own.get(c.prompt_id, []))
        + [shared[r] for r in sorted(assigned.get(c.id, ())) if r in shared]
        for c in completions
    ]


def _with_chosen_version(
    session: Session, selection: Selection, completions: Sequence[Completion] | None
) -> tuple[list[tuple[Completion, RubricVersion]], list[Completion]]:
    """``rubric_ref``'s version for the completions of its prompt; a shared one for the
    completions assigned to it, or for the selected ones when the selection names any."""
    version = resolve_version(session, selection.rubric_ref or "")
    if version.status == VersionStatus.RETIRED:
        raise ValidationFailed(f"{version.ref} is retired; score with a current version")
    if version.status == VersionStatus.DRAFT and not selection.include_drafts:
        # Naming a draft is asking for drafts: the same rule as include_drafts, or a caller
        # kept from drafts would get one by its reference.
        raise ForbiddenError(
            f"{version.ref} is a draft no person has approved: scoring with it needs drafts "
            "included (include_drafts: true with a key with the review scope, or "
            "--include-drafts), or a server that scores drafts for every key "
            "(RUBRICSVC_SCORING_USE_DRAFTS=true)"
        )
    prompt_id = version.rubric.prompt_id
    if prompt_id is None and not selection.narrowed:
        ids = completions_assigned_to(session, version.rubric_id)
        if not ids:
            raise NotFoundError(
                f"no completion is assigned to {version.rubric.name!r} and none is selected: "
                "assign it (a `rubric` field in the completions or prompts file, or "
                "`rubricsvc prompts assign`) or select completions with --completion, "
                "--prompt or --source"
            )
        selection = replace(selection, completion_ids=tuple(ids))
    if completions is None or not selection.narrowed:
        completions = selected_completions(session, selection)
    matched = [c for c in completions if prompt_id is None or c.prompt_id == prompt_id]
    unmatched = [c for c in completions if prompt_id is not None and c.prompt_id != prompt_id]
    return [(c, version) for c in matched], unmatched


def without_reasons(
    session: Session, completions: list[Completion], include_drafts: bool
) -> dict[str, list[int]]:
    """Why these completions have no usable rubric version, completion ids by reason:
    ``no_rubric`` (their prompt has none and none is assigned), ``drafts`` (only draft
    versions, and drafts are not in use), ``retired`` (only retired versions); and, present
    only when some are, ``ambiguous`` (more than one usable version: left out by a
    selection with ``one_version_each``)."""
    reasons: dict[str, list[int]] = {"no_rubric": [], "drafts": [], "retired": []}
    if not completions:
        return reasons
    assigned = assigned_rubrics(session, completions)
    prompt_ids = {c.prompt_id for c in completions}
    rubric_ids = set().union(*assigned.values()) if assigned else set()
    rows = session.execute(
        select(Rubric.id, Rubric.prompt_id, RubricVersion.status)
        .join(RubricVersion, RubricVersion.rubric_id == Rubric.id)
        .where(Rubric.prompt_id.in_(prompt_ids) | Rubric.id.in_(rubric_ids))
    ).all()
    statuses: dict[int, set[VersionStatus]] = defaultdict(set)
    of_prompt: dict[int, set[int]] = defaultdict(set)
    for rubric_id, prompt_id, status in rows:
        statuses[rubric_id].add(status)
        if prompt_id is not None:
            of_prompt[prompt_id].add(rubric_id)
    allowed = {VersionStatus.APPROVED} | ({VersionStatus.DRAFT} if include_drafts else set())
    for c in completions:
        found = of_prompt.get(c.prompt_id, set()) | assigned.get(c.id, set())
        seen = set().union(*(statuses[r] for r in found)) if found else set()
        if sum(1 for r in found if statuses[r] & allowed) > 1:
            reasons.setdefault("ambiguous", []).append(c.id)
        elif not seen:
            reasons["no_rubric"].append(c.id)
        elif VersionStatus.DRAFT in seen and not include_drafts:
            reasons["drafts"].append(c.id)
        else:
            reasons["retired"].append(c.id)
    return reasons


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
    completions: Sequence[Completion],
    versions: list[RubricVersion],
    assigned: dict[int, set[int]] | None = None,
) -> tuple[list[tuple[Completion, RubricVersion]], list[Completion]]:
    """Each completion with the versions of its prompt's rubrics and the shared ones (with
    ``assigned``: the shared ones assigned to it)."""
    work = [
        (c, v)
        for c in completions
        for v in versions
        if v.rubric.prompt_id == c.prompt_id
        or (
            v.rubric.prompt_id is None
            and (assigned is None or v.rubric_id in assigned.get(c.id, set()))
        )
    ]
    paired = {c.id for c, _ in work}
    return work, [c for c in completions if c.id not in paired]
