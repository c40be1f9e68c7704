"""Routes about the server itself: health, metrics, the judges it can score with."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from rubricsvc.api.boundary import CheckedRoute
from rubricsvc.api.deps import DB_SESSION, app_state, public, require
from rubricsvc.api.metrics import CONTENT_TYPE
from rubricsvc.api.schemas import JudgeOut
from rubricsvc.api.state import AppState
from rubricsvc.apikeys import Scope
from rubricsvc.db import current_revision, head_revision
from rubricsvc.errors import first_line
from rubricsvc.judging.config import BUILTIN_JUDGES
from rubricsvc.scoring.judge_configs import current_judge_configs

router = APIRouter(tags=["operations"], route_class=CheckedRoute)


@router.get(
    "/healthz",
    responses={503: {"description": "The database is unreachable or behind."}},
    dependencies=[Depends(public("liveness and readiness probes, which hold no key"))],
)
async def healthz(state: AppState = Depends(app_state)) -> JSONResponse:
    """Alive, and the database reachable at the newest migration (no key needed)."""

    def revision() -> str | None:
        return current_revision(state.engine)

    try:
        current = await run_in_threadpool(revision)
    except Exception as err:  # any database failure means not ready
        return JSONResponse({"status": "unavailable", "database": first_line(err)}, 503)
    head = head_revision()
    if current != head:
        detail = f"at revision {current}, not {head}: run `rubricsvc db upgrade`"
        return JSONResponse({"status": "unavailable", "database": detail}, 503)
    return JSONResponse({"status": "ok", "database": "ok", "revision": current})


@router.get(
    "/metrics",
    dependencies=[Depends(require(Scope.READ))],
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format."}},
)
def metrics(state: AppState = Depends(app_state)) -> Response:
    """Request counts and latency by route, judgments (computed, cached, failed), rewards."""
    return Response(state.metrics.exposition(), media_type=CONTENT_TYPE)


@router.get(
    "/v1/judges", response_model=list[JudgeOut], dependencies=[Depends(require(Scope.READ))]
)
def judges(session: Session = DB_SESSION) -> list[JudgeOut]:
    """The judge configs a score job or reward can name: built in, and stored."""
    stored = current_judge_configs(session)
    names = {row.name for row in stored}
    found = [
        JudgeOut(
            name=name,
            backend=spec.backend,
            model=spec.model,
            mode=spec.mode,
            stored=False,
            config_hash=None,
        )
        for name, spec in BUILTIN_JUDGES.items()
        if name not in names
    ]
    found += [
        JudgeOut(
            name=row.name,
            backend=row.backend,
            model=row.model,
            mode=row.verdict_mode,
            stored=True,
            config_hash=row.config_hash,
        )
        for row in stored
    ]
    return found
