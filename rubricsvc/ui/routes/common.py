"""Small pieces shared by the review pages' routes."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Request
from starlette.responses import RedirectResponse, Response

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
        set_page_cookie(
            request, response, FLASH_COOKIE, signer(request).flash_cookie(flash), FLASH_SECONDS
        )
    return response


def set_page_cookie(
    request: Request,
    response: Response,
    name: str,
    value: str,
    max_age: int,
    samesite: Literal["lax", "strict"] = "lax",
) -> None:
    """Set a cookie of the review pages: sent to them only, never read by a script, and kept
    to HTTPS when the page was served over it."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/ui",
        httponly=True,
        samesite=samesite,
        secure=request.url.scheme == "https",
    )


def safe_next(target: str | None) -> str:
    """Where to go after sign-in: a page of ours, never another site."""
    if target and target.startswith("/ui/") and not target.startswith("//"):
        return target
    return "/ui/queue"
