"""Small pieces shared by the review pages' routes."""

from __future__ import annotations

from fastapi import Request
from starlette.responses import RedirectResponse

from rubricsvc.ui.deps import signer
from rubricsvc.ui.session import FLASH_COOKIE, FLASH_SECONDS


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
