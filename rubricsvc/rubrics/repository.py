"""Queries over rubrics and versions, including the ``REF`` syntax the CLI and API accept.

A reference is a version id (``12``), a rubric name (its latest version) or
``name@N`` (version N of that rubric).
"""

from __future__ import annotations

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session, selectinload

from rubricsvc.errors import NotFoundError
from rubricsvc.models import Rubric, RubricVersion, VersionStatus


def get_rubric(session: Session, name: str) -> Rubric | None:
    return session.scalar(select(Rubric).where(Rubric.name == name))


def latest_version(session: Session, rubric: Rubric) -> RubricVersion | None:
    return session.scalar(
        select(RubricVersion)
        .where(RubricVersion.rubric_id == rubric.id)
        .order_by(RubricVersion.number.desc())
        .limit(1)
    )


def resolve_version(session: Session, ref: str) -> RubricVersion:
    """The version a reference names, or ``NotFoundError`` saying what was looked for."""
    ref = ref.strip()
    if ref.isdigit():
        version = session.get(RubricVersion, int(ref))
        if version is None:
            raise NotFoundError(f"no rubric version with id {ref}")
        return version
    name, _, number = ref.partition("@")
    rubric = get_rubric(session, name)
    if rubric is None:
        raise NotFoundError(f"no rubric named {name!r}")
    if not number:
        found = latest_version(session, rubric)
        if found is None:  # pragma: no cover - a rubric is always saved with a version
            raise NotFoundError(f"rubric {name!r} has no versions")
        return found
    if not number.isdigit():
        raise NotFoundError(f"bad reference {ref!r}: expected NAME@NUMBER")
    version = session.scalar(
        select(RubricVersion).where(
            RubricVersion.rubric_id == rubric.id, RubricVersion.number == int(number)
        )
    )
    if version is None:
        raise NotFoundError(f"rubric {name!r} has no version {number}")
    return version


def versions_query(
    *, status: VersionStatus | None = None, all_versions: bool = False, rubric: str | None = None
) -> Select[RubricVersion]:
    """Versions ordered by rubric name then number, criteria loaded; by default only each
    rubric's latest (``rubric``: only that rubric's). A query, so callers can page it."""
    query = (
        select(RubricVersion)
        .join(Rubric, RubricVersion.rubric_id == Rubric.id)
        .options(selectinload(RubricVersion.criteria), selectinload(RubricVersion.rubric))
        .order_by(Rubric.name, RubricVersion.number)
    )
    if rubric is not None:
        query = query.where(Rubric.name == rubric)
    if not all_versions:
        newest = (
            select(RubricVersion.rubric_id, func.max(RubricVersion.number).label("number"))
            .group_by(RubricVersion.rubric_id)
            .subquery()
        )
        query = query.join(
            newest,
            (newest.c.rubric_id == RubricVersion.rubric_id)
            & (newest.c.number == RubricVersion.number),
        )
    if status is not None:
        query = query.where(RubricVersion.status == status)
    return query


def list_versions(
    session: Session, *, status: VersionStatus | None = None, all_versions: bool = False
) -> list[RubricVersion]:
    """Versions ordered by rubric name then number; by default only each rubric's latest."""
    return list(session.scalars(versions_query(status=status, all_versions=all_versions)))
