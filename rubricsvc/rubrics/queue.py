"""The review queue: versions awaiting a reviewer, filtered, counted and paged in the database.

By default the queue holds drafts that are their rubric's newest version (a draft already
superseded by a newer one awaits nobody), oldest first, as a queue is worked through. Filters:
origin (llm, imported, human), the generator model of LLM drafts, a prompt tag
(``key`` or ``key=value``) and age; and criterion validity: only versions with a criterion
whose agreement with its pointwise labels under a judge is below a threshold
(``rubricsvc.validation.validity``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import ColumnElement, FromClause, and_, exists, func, join, select
from sqlalchemy.orm import InstrumentedAttribute, Session, aliased, selectinload

from rubricsvc.models import Criterion, Origin, Prompt, Rubric, RubricVersion, VersionStatus

PAGE_SIZE = 25


@dataclass(frozen=True)
class QueueFilter:
    status: VersionStatus | None = VersionStatus.DRAFT  # None: any status
    origin: Origin | None = None
    generator: str | None = None
    tag: str | None = None  # "key" or "key=value" of the prompt's tags
    max_age_days: float | None = None
    include_superseded: bool = False
    validity_judge: str | None = None  # only versions with a criterion this judge is flagged on
    validity_below: float = 0.5
    # The versions that filter keeps, found by the caller (rubricsvc.validation.validity);
    # None: no such filter.
    validity_versions: frozenset[int] | None = None


@dataclass(frozen=True)
class QueueRow:
    version: RubricVersion
    criteria: int
    latest: bool


@dataclass
class QueuePage:
    rows: list[QueueRow]
    total: int
    page: int
    pages: int
    by_origin: dict[str, int] = field(default_factory=dict)
    generators: list[str] = field(default_factory=list)


def _generator_of() -> ColumnElement[str]:
    generator: ColumnElement[str] = RubricVersion.origin_detail["generator_model"].as_string()
    return generator


def _conditions(
    wanted: QueueFilter, flagged: frozenset[int] | None, *, with_origin: bool = True
) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if flagged is not None:
        conditions.append(RubricVersion.id.in_(sorted(flagged)))
    if wanted.status is not None:
        conditions.append(RubricVersion.status == wanted.status)
    if not wanted.include_superseded:
        newer = aliased(RubricVersion)
        conditions.append(
            ~exists().where(
                and_(
                    newer.rubric_id == RubricVersion.rubric_id, newer.number > RubricVersion.number
                )
            )
        )
    if with_origin and wanted.origin is not None:
        conditions.append(RubricVersion.origin == wanted.origin)
    if wanted.generator:
        conditions.append(_generator_of() == wanted.generator)
    if wanted.tag:
        key, _, value = wanted.tag.partition("=")
        tagged = Prompt.tags[key.strip()]
        conditions.append(
            tagged.as_string() == value.strip() if value else tagged.as_string().is_not(None)
        )
    if wanted.max_age_days is not None:
        since = datetime.now(UTC) - timedelta(days=wanted.max_age_days)
        conditions.append(RubricVersion.created_at >= since)
    return conditions


def _source(wanted: QueueFilter) -> FromClause:
    """Versions, joined to their rubric's prompt only when a tag is asked for (the counts
    read every matching version: no join they do not need)."""
    if not wanted.tag:
        return RubricVersion.__table__
    rubric_prompt = join(RubricVersion, Rubric, RubricVersion.rubric_id == Rubric.id)
    return rubric_prompt.join(Prompt, Rubric.prompt_id == Prompt.id)


def review_queue(session: Session, wanted: QueueFilter, page: int = 1) -> QueuePage:
    """One page of the queue with its total, counts by origin and the generators seen."""
    flagged = wanted.validity_versions
    conditions = _conditions(wanted, flagged)
    source = _source(wanted)
    total = (
        session.scalar(select(func.count(RubricVersion.id)).select_from(source).where(*conditions))
        or 0
    )
    pages = max(1, -(-total // PAGE_SIZE))
    page = min(max(page, 1), pages)
    versions = list(
        session.scalars(
            select(RubricVersion)
            .select_from(source)
            .where(*conditions)
            .options(selectinload(RubricVersion.rubric).selectinload(Rubric.prompt))
            .order_by(RubricVersion.created_at, RubricVersion.id)
            .limit(PAGE_SIZE)
            .offset((page - 1) * PAGE_SIZE)
        )
    )
    version_ids = [v.id for v in versions]
    counts = _per_key(session, Criterion.version_id, func.count(Criterion.id), version_ids)
    rubric_ids = {v.rubric_id for v in versions}
    latest = _per_key(session, RubricVersion.rubric_id, func.max(RubricVersion.number), rubric_ids)
    rows = [QueueRow(v, counts.get(v.id, 0), latest.get(v.rubric_id) == v.number) for v in versions]
    by_origin = {
        str(origin): count
        for origin, count in session.execute(
            select(RubricVersion.origin, func.count(RubricVersion.id))
            .select_from(source)
            .where(*_conditions(wanted, flagged, with_origin=False))
            .group_by(RubricVersion.origin)
        )
    }
    generators = sorted(
        g
        for g in session.scalars(
            select(_generator_of())
            .where(RubricVersion.origin == Origin.LLM, RubricVersion.status == VersionStatus.DRAFT)
            .distinct()
        )
        if g
    )
    return QueuePage(rows, total, page, pages, by_origin, generators)


def _per_key(
    session: Session,
    key: InstrumentedAttribute[int],
    aggregate: ColumnElement[int],
    keys: Collection[int],
) -> dict[int, int]:
    """``aggregate`` over the rows of each ``key`` among ``keys``, in one grouped query."""
    if not keys:
        return {}
    rows = session.execute(select(key, aggregate).where(key.in_(keys)).group_by(key))
    return {k: value for k, value in rows}
