"""One JSON error shape for every failure the service reports.

    {"error": {"status": 422, "code": "validation_error", "message": "...", "field": "body.items.0.text",
               "details": [{"field": ..., "message": ...}]}}

``field`` names the first offending input where there is one; ``message`` is one line.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Sequence
from math import ceil
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Send

from rubricsvc.backends.base import BackendError
from rubricsvc.errors import (
    ConflictError,
    DependencyMissing,
    ForbiddenError,
    ImmutableError,
    NotFoundError,
    RubricsvcError,
    ValidationFailed,
    database_failure,
    first_line,
)
from rubricsvc.scoring.groups import GroupFailed, GroupGivenUp

log = logging.getLogger(__name__)

# Each error of the library maps to one status and code.
_STATUS: list[tuple[type[RubricsvcError], int, str]] = [
    (NotFoundError, 404, "not_found"),
    (ValidationFailed, 422, "invalid"),
    (ImmutableError, 409, "immutable"),
    (ConflictError, 409, "conflict"),
    (ForbiddenError, 403, "forbidden"),
    (DependencyMissing, 503, "unavailable"),
    # A reward group given up unjudged may be judged if sent again; any other failure of a
    # group's judging (its backend's aside, answered as a BackendError) is the server's own.
    (GroupGivenUp, 503, "group_given_up"),
    (GroupFailed, 500, "group_failed"),
]
_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 409: "conflict", 413: "too_large", 415: "unsupported_media_type",
          422: "invalid", 429: "too_many_requests", 500: "internal", 502: "bad_gateway",
          503: "unavailable"}  # fmt: skip
# Retry-After of a judge that failed in a way that may pass, when it named no delay itself.
DEFAULT_RETRY_AFTER = 10


class ApiError(Exception):
    """Raised by routes: becomes the error shape with this status."""

    def __init__(
        self,
        status: int,
        message: str,
        field: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.code = code or _CODES.get(status, "error")
        self.headers = headers or {}


def backend_unavailable(error: BackendError) -> ApiError:
    """The API's answer when the judge (or generator) behind a request failed: 503 with
    Retry-After when trying again may help (5xx, 429, time-outs, unreachable), else 502."""
    message = f"the judge backend failed: {error}"
    if not error.retryable:
        return ApiError(502, message, code="judge_failed")
    wait = error.retry_after if error.retry_after is not None else DEFAULT_RETRY_AFTER
    return ApiError(
        503, message, code="judge_unavailable", headers={"Retry-After": str(max(1, ceil(wait)))}
    )


def database_error(request: Request, exc: SQLAlchemyError) -> ApiError:
    """The answer to a database error of a request (its commit included, ``deps.DB_SESSION``):
    409 for a conflict, 503 with Retry-After for a busy or unreachable database, else 500
    ``internal``. Logged with the first line of the database's own error (and, for a 500,
    the stack's frames), never SQLAlchemy's message of it, which holds the statement's
    parameters."""
    status, message = database_failure(exc)
    where = f"{request.method} {request.url.path}"
    if status == 500:
        frames = "".join(traceback.format_tb(exc.__traceback__))
        log.error(
            "%s: database error %s: %s\n%s", where, type(exc).__name__, first_line(exc), frames
        )
    else:
        log.warning(
            "%s: %d, database error %s: %s", where, status, type(exc).__name__, first_line(exc)
        )
    headers = {"Retry-After": "1"} if status == 503 else None
    return ApiError(status, message, headers=headers)


def error_body(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    details: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    error: dict[str, Any] = {"status": status, "code": code, "message": message}
    if field is not None:
        error["field"] = field
    if details:
        error["details"] = details
    return {"error": error}


def error_response(
    status: int, code: str, message: str, field: str | None = None, **kwargs: Any
) -> JSONResponse:
    return JSONResponse(error_body(status, code, message, field, **kwargs), status_code=status)


async def send_error(
    send: Send,
    status: int,
    message: str,
    *,
    code: str | None = None,
    field: str | None = None,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """The error shape sent from ASGI middleware (before the app, or instead of it)."""
    error = error_body(status, code or _CODES.get(status, "error"), message, field)
    body = json.dumps(error).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def field_path(location: tuple[Any, ...] | list[Any]) -> str:
    """``("body", "items", 0, "text")`` -> ``body.items.0.text``."""
    return ".".join(str(part) for part in location)


def validation_details(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"field": field_path(e.get("loc", ())), "message": str(e.get("msg", ""))} for e in errors
    ]


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        details = validation_details(list(exc.errors()))
        first = details[0] if details else {"field": None, "message": "invalid request"}
        message = str(first["message"])
        if first["field"]:
            message = f"{first['field']}: {message}"
        return error_response(422, "validation_error", message, first["field"], details=details)

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        response = error_response(exc.status, exc.code, exc.message, exc.field)
        response.headers.update(exc.headers)
        return response

    @app.exception_handler(BackendError)
    async def _backend(request: Request, exc: BackendError) -> JSONResponse:
        return await _api_error(request, backend_unavailable(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        response = error_response(
            exc.status_code, _CODES.get(exc.status_code, "error"), str(exc.detail)
        )
        if exc.headers:
            response.headers.update(exc.headers)
        return response

    @app.exception_handler(SQLAlchemyError)
    async def _database(request: Request, exc: SQLAlchemyError) -> JSONResponse:
        return await _api_error(request, database_error(request, exc))

    @app.exception_handler(RubricsvcError)
    async def _library(request: Request, exc: RubricsvcError) -> JSONResponse:
        for kind, status, code in _STATUS:
            if isinstance(exc, kind):
                response = error_response(status, code, str(exc))
                if isinstance(exc, GroupGivenUp):  # sent again, it joins a fresh group
                    response.headers["Retry-After"] = "1"
                elif status == 500:
                    log.error("%s %s: %s", request.method, request.url.path, exc)
                return response
        return error_response(400, "bad_request", str(exc))
