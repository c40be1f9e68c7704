"""The review workbench: server-rendered pages under ``/ui/`` of the API's own app.

Pages share the API's services and transactions; a reviewer signs in with an API key, whose
scopes decide what the pages allow (``review`` to approve or retire). See docs/review.md.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.staticfiles import StaticFiles
from sqlalchemy import Engine
from starlette.responses import RedirectResponse, Response

from rubricsvc.config import Settings
from rubricsvc.routeaccess import mark_open
from rubricsvc.ui.deps import PageRefused, SignInRequired, UiState, sign_in_url
from rubricsvc.ui.routes import auth, completions, judges, queue, versions
from rubricsvc.ui.session import SessionSigner
from rubricsvc.ui.templating import render


def install_ui(app: FastAPI, settings: Settings, engine: Engine) -> None:
    """Add the review pages to ``app``, on ``engine`` (the API's own)."""
    secret = settings.api.session_secret
    signer = SessionSigner(
        secret.get_secret_value() if secret else None, settings.api.session_hours * 3600
    )
    app.state.rubricsvc_ui = UiState(settings, engine, signer)
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
