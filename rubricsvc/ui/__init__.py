"""The review workbench: server-rendered pages under ``/ui/`` of the API's own app.

Pages share the API's services and transactions; a reviewer signs in with an API key, whose
scopes decide what the pages allow (``review`` to approve or retire). See docs/review.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exception_handlers import (
    http_exception_handler,
    request_validation_exception_handler,
)
from fastapi.exceptions import RequestValidationError
from fastapi.staticfiles import StaticFiles
from sqlalchemy import Engine
from starlette.exceptions import HTTPException
from starlette.responses import RedirectResponse, Response

from rubricsvc.config import Settings
from rubricsvc.inputpolicy import printable
from rubricsvc.routeaccess import mark_open
from rubricsvc.ui.deps import (
    PageRefused,
    SignInRequired,
    SignInThrottle,
    UiState,
    current_reviewer,
    sign_in_url,
    ui_state,
)
from rubricsvc.ui.routes import auth, completions, judges, queue, versions
from rubricsvc.ui.session import SessionSigner
from rubricsvc.ui.templating import render

# What a validation error's location names, on a page.
_PARTS = {"path": "path parameter", "query": "query parameter", "body": "form field"}


def install_ui(
    app: FastAPI,
    settings: Settings,
    engine: Engine,
    *,
    failures: SignInThrottle | None = None,
) -> None:
    """Add the review pages to ``app``, on ``engine`` (the API's own); ``failures`` counts
    failed sign-ins per client address (the API's count of failed keys). Call it after the
    API's error handlers are installed: the pages' errors take theirs over under ``/ui``."""
    secret = settings.api.session_secret
    signer = SessionSigner(
        secret.get_secret_value() if secret else None, settings.api.session_hours * 3600
    )
    app.state.rubricsvc_ui = UiState(settings, engine, signer, failures)
    for module in (auth, queue, versions, completions, judges):
        app.include_router(module.router)
    app.mount(
        "/ui/static",
        StaticFiles(directory=str(Path(__file__).parent / "static")),
        name="ui-static",
    )
    mark_open(app.routes[-1], "the review pages' style sheet and scripts")

    @app.exception_handler(SignInRequired)
    async def _sign_in(request: Request, _exc: SignInRequired) -> Response:
        return _sign_in_required(request)

    # Errors met before a page runs (an address no page has, a method it does not take, a
    # parameter of the wrong type) are error pages too, with the pages' headers, and only
    # after the session check: a visitor without a session is sent to sign in, told nothing
    # about the address. Elsewhere the API's handlers answer, in its JSON shape.
    api_invalid: Any = app.exception_handlers.get(
        RequestValidationError, request_validation_exception_handler
    )
    api_http: Any = app.exception_handlers.get(HTTPException, http_exception_handler)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        if not _is_page(request):
            response: Response = await api_invalid(request, exc)
            return response
        return await _error_page(request, 422, _invalid_message(exc))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Response:
        if not _is_page(request):
            response: Response = await api_http(request, exc)
            return response
        return await _error_page(request, exc.status_code, _http_message(request, exc), exc.headers)

    @app.exception_handler(PageRefused)
    async def _refused(request: Request, exc: PageRefused) -> Response:
        return render(
            request,
            "error.html",
            None,
            status_code=exc.status,
            message=exc.message,
            status=exc.status,
        )


def _is_page(request: Request) -> bool:
    path: str = request.scope["path"]
    root = request.scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    return path == "/ui" or path.startswith("/ui/")


def _sign_in_required(request: Request) -> Response:
    """No valid session: a GET goes to the sign-in page, anything else is refused."""
    if request.method in ("GET", "HEAD"):
        return RedirectResponse(sign_in_url(request), status_code=303)
    return render(
        request,
        "error.html",
        None,
        status_code=403,
        message="Your session is missing or has ended: sign in again.",
        status=403,
    )


async def _error_page(
    request: Request, status: int, message: str, headers: Mapping[str, str] | None = None
) -> Response:
    """The error page of a signed-in reviewer; without a session, ``_sign_in_required``."""
    try:
        reviewer = await run_in_threadpool(current_reviewer, request, ui_state(request))
    except SignInRequired:
        return _sign_in_required(request)
    response = render(
        request, "error.html", reviewer, status_code=status, message=message, status=status
    )
    for name, value in (headers or {}).items():  # a 405's Allow
        response.headers[name] = value
    return response


def _invalid_message(exc: RequestValidationError) -> str:
    errors = list(exc.errors())
    if not errors:
        return "The request is not valid."
    where = tuple(errors[0].get("loc", ()))
    part = _PARTS.get(str(where[0]), "field") if where else "field"
    name = ".".join(str(p) for p in where[1:]) or "?"
    detail = str(errors[0].get("msg", "not valid")).rstrip(".")
    return f"The {part} {printable(name)!r} is not valid: {detail}."


def _http_message(request: Request, exc: HTTPException) -> str:
    if exc.status_code == 404:
        return "No page at this address."
    if exc.status_code == 405:
        return f"This page does not take a {printable(request.method)[:20]} request."
    return str(exc.detail)
