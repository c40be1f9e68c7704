"""Small pieces shared by the review pages' routes."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from starlette.responses import RedirectResponse

from rubricsvc.ui.deps import SESSION_PAGES, checked_parameters, signer
from rubricsvc.ui.session import FLASH_COOKIE, FLASH_SECONDS


def page_router(prefix: str) -> APIRouter:
    """A router of review pages under ``prefix``: kept out of the API's schema, let through
    the API's key gate (each page checks its session), its parameters held to the input policy."""
    return APIRouter(
        prefix=prefix,
        include_in_schema=False,
        dependencies=[Depends(SESSION_PAGES), Depends(checked_parameters)],
    )


def redirect(request: Request, url: str, flash: str | None = None) -> RedirectResponse:
    """303 to ``url`` (a page of ours), leaving a one-line message for it to show."""
    response = RedirectResponse(url, status_code=303)
    if flash:
        response.set_cookie(
            FLASH_COOKIE,
            signer(request).flash_cookie(flash),
            max_age=FLASH_SECONDS,
            path="/ui",
            httponly=True,
            samesite="lax",
            secure=request.url.scheme == "https",
        )
    return response


def safe_next(target: str | None) -> str:
    """Where to go after sign-in: a page of ours, never another site."""
    if target and target.startswith("/ui/") and not target.startswith("//"):
        return target
    return "/ui/queue"
