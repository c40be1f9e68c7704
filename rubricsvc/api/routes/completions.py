"""/v1/completions: bulk ingest (a JSON array, or JSON Lines) and reading them back.

Ingestion is all or nothing, as from the command line: every record is checked first and
one bad record stores none. A completion with an external id already stored with the same
text is left as it is (ingesting twice adds nothing).
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Body, Depends, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.api.boundary import CheckedRoute
from rubricsvc.api.deps import DB_SESSION, app_state, require
from rubricsvc.api.errors import ApiError, field_path
from rubricsvc.api.routes.common import Paging, completion_out, paged_rows
from rubricsvc.api.schemas import MAX_ID, CompletionOut, IngestOut, Page
from rubricsvc.api.state import AppState
from rubricsvc.apikeys import Scope
from rubricsvc.completions import CompletionRecord, add_completions
from rubricsvc.errors import NotFoundError
from rubricsvc.inputpolicy import MAX_DEPTH, find_refusal, loads_json
from rubricsvc.models import Completion, Prompt

router = APIRouter(prefix="/v1/completions", tags=["completions"], route_class=CheckedRoute)

JSONL_TYPES = ("application/x-ndjson", "application/jsonl", "text/plain")


def _check_count(count: int, state: AppState, field: str) -> None:
    limit = state.settings.api.max_completions
    if count > limit:
        raise ApiError(413, f"{count} completions: at most {limit} per request", field)


def _ingest(session: Session, records: list[tuple[str, CompletionRecord]]) -> IngestOut:
    for where, record in records:  # a prompt id the database cannot hold is no prompt's
        if record.prompt_id is not None and not 1 <= record.prompt_id <= MAX_ID:
            field = f"{where}.prompt_id"
            raise ApiError(422, f"{field}: must be between 1 and {MAX_ID}", field)
    result = add_completions(session, records)
    return IngestOut(added=result.added, unchanged=result.unchanged)


@router.post("", response_model=IngestOut, dependencies=[Depends(require(Scope.AUTHOR))])
def ingest(
    records: list[CompletionRecord] = Body(
        min_length=1,
        description="Completions; each names its prompt by prompt_external_id, prompt_id, "
        "or gives it in full (prompt / prompt_messages).",
    ),
    session: Session = DB_SESSION,
    state: AppState = Depends(app_state),
) -> IngestOut:
    _check_count(len(records), state, "body")
    return _ingest(session, [(f"body.{i}", r) for i, r in enumerate(records)])


@router.post(
    "/jsonl",
    response_model=IngestOut,
    dependencies=[Depends(require(Scope.AUTHOR))],
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "One completion record (as in POST /v1/completions) per line.",
            "content": {t: {"schema": {"type": "string"}} for t in JSONL_TYPES},
        }
    },
)
async def ingest_jsonl(
    request: Request, state: AppState = Depends(app_state), session: Session = DB_SESSION
) -> IngestOut:
    body = await request.body()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        newlines = body.count(b"\n", 0, err.start)
        where = f"line.{newlines + 1}"
        raise ApiError(422, f"{where}: not UTF-8 text: {err.reason}", where) from None
    records: list[tuple[str, CompletionRecord]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line.{number}"
        try:
            data = loads_json(line)
        except json.JSONDecodeError as err:
            raise ApiError(422, f"{where}: invalid JSON: {err.msg}", where) from None
        except RecursionError:
            message = f"holds values nested more than {MAX_DEPTH} levels deep"
            raise ApiError(422, f"{where}: {message}", where) from None
        refusal = find_refusal(data)
        if refusal is not None:
            field = field_path([where, *refusal.where])
            raise ApiError(422, f"{field}: {refusal.message}", field)
        try:
            records.append((where, CompletionRecord.model_validate(data)))
        except ValidationError as err:
            first = err.errors()[0]
            field = field_path([where, *first["loc"]])
            raise ApiError(422, f"{field}: {first['msg']}", field) from None
    if not records:
        raise ApiError(422, "body: no completion records (one JSON object per line)", "body")
    _check_count(len(records), state, "body")
    return await run_in_threadpool(_ingest, session, records)


@router.get("", response_model=Page, dependencies=[Depends(require(Scope.READ))])
def list_completions(
    prompt_id: str | None = Query(
        None, description="Only completions of this prompt (external id)."
    ),
    source: str | None = Query(None, description="Only completions from this source."),
    paging: Paging = Depends(),
    session: Session = DB_SESSION,
) -> Page:
    query = select(Completion).order_by(Completion.id)
    if prompt_id is not None:
        query = query.join(Prompt).where(Prompt.external_id == prompt_id)
    if source is not None:
        query = query.where(Completion.source == source)
    rows, total = paged_rows(session, query, paging)
    return paging.page([completion_out(c) for c in rows], total)


@router.get(
    "/{completion_id}", response_model=CompletionOut, dependencies=[Depends(require(Scope.READ))]
)
def get_completion(
    completion_id: int = Path(ge=1, le=2**31 - 1), session: Session = DB_SESSION
) -> CompletionOut:
    completion = session.get(Completion, completion_id)
    if completion is None:
        raise NotFoundError(f"no completion with id {completion_id}")
    return completion_out(completion)
