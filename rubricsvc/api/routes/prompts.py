"""/v1/prompts: the tasks that rubrics and completions belong to."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.api.boundary import CheckedRoute
from rubricsvc.api.deps import DB_SESSION, require
from rubricsvc.api.routes.common import Paging, paged_rows, prompt_out
from rubricsvc.api.schemas import CreatedPrompt, Page, PromptIn, PromptOut
from rubricsvc.apikeys import Scope
from rubricsvc.models import Prompt
from rubricsvc.prompts import find_prompt, store_prompt

router = APIRouter(prefix="/v1/prompts", tags=["prompts"], route_class=CheckedRoute)


@router.get("", response_model=Page, dependencies=[Depends(require(Scope.READ))])
def list_prompts(
    external_id: str | None = Query(None, description="Only the prompt with this external id."),
    paging: Paging = Depends(),
    session: Session = DB_SESSION,
) -> Page:
    query = select(Prompt).order_by(Prompt.id)
    if external_id is not None:
        query = query.where(Prompt.external_id == external_id)
    rows, total = paged_rows(session, query, paging)
    return paging.page([prompt_out(p) for p in rows], total)


@router.post(
    "",
    response_model=CreatedPrompt,
    status_code=201,
    dependencies=[Depends(require(Scope.AUTHOR))],
    responses={200: {"model": CreatedPrompt, "description": "Already stored: the same prompt."}},
)
def create_prompt(
    body: PromptIn, response: Response, session: Session = DB_SESSION
) -> CreatedPrompt:
    """Store a prompt; the same messages again return the stored one (200)."""
    messages = (
        [m.model_dump() for m in body.messages]
        if body.messages is not None
        else [{"role": "user", "content": body.text or ""}]
    )
    prompt, created = store_prompt(
        session,
        messages,
        external_id=body.external_id,
        reference_answer=body.reference_answer,
        tags=body.tags,
    )
    if not created:
        response.status_code = 200
    return CreatedPrompt(created=created, prompt=prompt_out(prompt))


@router.get("/{prompt_id}", response_model=PromptOut, dependencies=[Depends(require(Scope.READ))])
def get_prompt(
    prompt_id: int = Path(ge=1, le=2**31 - 1), session: Session = DB_SESSION
) -> PromptOut:
    return prompt_out(find_prompt(session, prompt_id=prompt_id))
