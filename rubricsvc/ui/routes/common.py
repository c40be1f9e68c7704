"""Small pieces shared by the review pages' routes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from sqlalchemy.orm import Session
from starlette.responses import HTMLResponse, RedirectResponse, Response

from rubricsvc.ui.deps import (
    PAGE_SESSION,
    SESSION_PAGES,
    Reviewer,
    checked_parameters,
    current_reviewer,
    signer,
)
from rubricsvc.ui.session import FLASH_COOKIE, FLASH_SECONDS
from rubricsvc.ui.templating import render


def page_router(prefix: str) -> APIRouter:
    """A router of review pages under ``prefix``: kept out of the API's schema, let through
    the API's key gate (each page checks its session), its parameters held to the input policy."""
    return APIRouter(
        prefix=prefix,
        include_in_schema=False,
        dependencies=[Depends(SESSION_PAGES), Depends(checked_parameters)],
    )


@dataclass(frozen=True)
class PageContext:
    """What every review page is built from: the request, the signed-in reviewer, and the
    page's database session (one transaction: committed when the page is built, before it
    is sent: ``deps.PAGE_SESSION``)."""

    request: Request
    reviewer: Reviewer
    session: Session

    def render(self, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        return render(self.request, template, self.reviewer, status_code, **context)

    def redirect(self, url: str, flash: str | None = None) -> RedirectResponse:
        return redirect(self.request, url, flash)


def page_context(
    request: Request,
    reviewer: Reviewer = Depends(current_reviewer),
    session: Session = PAGE_SESSION,
) -> PageContext:
    return PageContext(request, reviewer, session)


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
