"""The review queue."""

from __future__ import annotations

from typing import TypeVar

from fastapi import Depends, Query
from starlette.responses import Response

from rubricsvc.models import Origin, VersionStatus
from rubricsvc.rubrics.queue import QueueFilter, review_queue
from rubricsvc.scoring.judge_configs import find_judge
from rubricsvc.ui.routes.common import PageContext, page_context, page_router
from rubricsvc.validation.validity import flagged_version_ids, validity_judges

E = TypeVar("E", VersionStatus, Origin)

router = page_router("/ui")

STATUSES = ["draft", "approved", "retired", "any"]


def _blank(value: str | None) -> str | None:
    return value.strip() or None if value else None


@router.get("/queue")
def queue(
    status: str = Query("draft"),
    origin: str | None = Query(None),
    generator: str | None = Query(None, max_length=300),
    tag: str | None = Query(None, max_length=200),
    max_age_days: str | None = Query(None),
    validity_judge: str | None = Query(None, max_length=200),
    validity_below: str | None = Query(None),
    page: int = Query(1, ge=1, le=10**6),
    context: PageContext = Depends(page_context),
) -> Response:
    session = context.session
    errors: dict[str, str] = {}
    age: float | None = None
    if _blank(max_age_days):
        try:
            age = float(str(max_age_days))
            if age <= 0:
                raise ValueError
        except ValueError:
            errors["max_age_days"] = "A positive number of days."
    below = 0.5
    if _blank(validity_below):
        try:
            below = float(str(validity_below))
            if not 0 <= below <= 1:
                raise ValueError
        except ValueError:
            errors["validity_below"] = "A share between 0 and 1."
            below = 0.5
    judges = validity_judges(session)
    judge_name = _blank(validity_judge)
    if judge_name and judge_name not in judges:
        errors["validity_judge"] = "No judge with verdicts on labelled criteria."
        judge_name = None
    wanted = QueueFilter(
        status=None if status == "any" else _enum(VersionStatus, status, VersionStatus.DRAFT),
        origin=_enum(Origin, _blank(origin), None),
        generator=_blank(generator),
        tag=_blank(tag),
        max_age_days=age,
        validity_judge=judge_name,
        validity_below=below,
        validity_versions=(
            frozenset(flagged_version_ids(session, find_judge(session, judge_name), below))
            if judge_name
            else None
        ),
    )
    result = review_queue(session, wanted, page)
    return context.render(
        "queue.html",
        result=result,
        wanted=wanted,
        status=status if status in STATUSES else "draft",
        statuses=STATUSES,
        origins=[o.value for o in Origin],
        max_age_days=max_age_days or "",
        validity_below=validity_below or "",
        validity_judges=judges,
        errors=errors,
    )


def _enum(kind: type[E], value: str | None, default: E | None) -> E | None:
    """The member named ``value``; an unknown name (a hand-edited URL) is the default."""
    if value is None:
        return default
    try:
        return kind(value)
    except ValueError:
        return default
