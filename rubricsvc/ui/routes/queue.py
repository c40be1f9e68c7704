"""The review queue."""

from __future__ import annotations

from typing import TypeVar

from fastapi import APIRouter, Depends, Query, Request
from sqlalchemy.orm import Session
from starlette.responses import Response

from rubricsvc.models import Origin, VersionStatus
from rubricsvc.rubrics.queue import QueueFilter, review_queue
from rubricsvc.ui.deps import SESSION_PAGES, Reviewer, checked_parameters, current_reviewer, page_db
from rubricsvc.ui.templating import render

E = TypeVar("E", VersionStatus, Origin)

router = APIRouter(
    prefix="/ui",
    include_in_schema=False,
    dependencies=[Depends(SESSION_PAGES), Depends(checked_parameters)],
)

STATUSES = ["draft", "approved", "retired", "any"]


def _blank(value: str | None) -> str | None:
    return value.strip() or None if value else None


@router.get("/queue")
def queue(
    request: Request,
    status: str = Query("draft"),
    origin: str | None = Query(None),
    generator: str | None = Query(None, max_length=300),
    tag: str | None = Query(None, max_length=200),
    max_age_days: str | None = Query(None),
    page: int = Query(1, ge=1, le=10**6),
    reviewer: Reviewer = Depends(current_reviewer),
    session: Session = Depends(page_db),
) -> Response:
    errors: dict[str, str] = {}
    age: float | None = None
    if _blank(max_age_days):
        try:
            age = float(str(max_age_days))
            if age <= 0:
                raise ValueError
        except ValueError:
            errors["max_age_days"] = "A positive number of days."
    wanted = QueueFilter(
        status=None if status == "any" else _enum(VersionStatus, status, VersionStatus.DRAFT),
        origin=_enum(Origin, _blank(origin), None),
        generator=_blank(generator),
        tag=_blank(tag),
        max_age_days=age,
    )
    result = review_queue(session, wanted, page)
    return render(
        request,
        "queue.html",
        reviewer,
        result=result,
        wanted=wanted,
        status=status if status in STATUSES else "draft",
        statuses=STATUSES,
        origins=[o.value for o in Origin],
        max_age_days=max_age_days or "",
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
