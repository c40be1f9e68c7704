"""What several routers share: pagination and converting rows to response bodies."""

from __future__ import annotations

from typing import Any

from fastapi import Query
from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from rubricsvc.api.schemas import MAX_OFFSET, MAX_PAGE, CompletionOut, Page, PromptOut, VersionOut
from rubricsvc.models import Completion, Prompt, RubricVersion
from rubricsvc.rubrics.versions import spec_of


class Paging:
    def __init__(
        self,
        limit: int = Query(50, ge=1, le=MAX_PAGE, description=f"Items per page (1-{MAX_PAGE})."),
        offset: int = Query(0, ge=0, le=MAX_OFFSET, description="Items to skip."),
    ) -> None:
        self.limit = limit
        self.offset = offset

    def page(self, items: list[Any], total: int) -> Page:
        following = self.offset + len(items)
        return Page(
            items=items,
            total=total,
            limit=self.limit,
            offset=self.offset,
            next_offset=following if following < total else None,
        )


def paged_rows(session: Session, query: Select[Any], paging: Paging) -> tuple[list[Any], int]:
    total = session.scalar(select(func.count()).select_from(query.order_by(None).subquery())) or 0
    rows = list(session.scalars(query.limit(paging.limit).offset(paging.offset)))
    return rows, total


def prompt_out(prompt: Prompt) -> PromptOut:
    return PromptOut.model_validate(prompt)


def completion_out(completion: Completion) -> CompletionOut:
    return CompletionOut.model_validate(completion)


def version_out(version: RubricVersion) -> VersionOut:
    return VersionOut(
        id=version.id,
        ref=version.ref,
        rubric=version.rubric.name,
        number=version.number,
        status=version.status.value,
        origin=version.origin.value,
        parent_id=version.parent_id,
        content_hash=version.content_hash,
        prompt_id=version.rubric.prompt_id,
        reviewed_by=version.reviewed_by,
        review_note=version.review_note,
        created_at=version.created_at,
        rubric_spec=spec_of(version).model_dump(mode="json", exclude_none=True),
    )
