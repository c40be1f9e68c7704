"""The Jinja2 environment of the review pages and the one way a page is rendered."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.templating import Jinja2Templates
from jinja2 import pass_context
from jinja2.runtime import Context
from markupsafe import Markup
from starlette.responses import HTMLResponse

from rubricsvc.inputpolicy import INVISIBLE
from rubricsvc.ui.deps import Reviewer, signer
from rubricsvc.ui.session import FLASH_COOKIE

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _age(moment: datetime | None) -> str:
    """How long ago, in the largest whole unit: '3 d', '5 h', '12 min'."""
    if moment is None:
        return ""
    if moment.tzinfo is None:  # SQLite returns naive UTC
        moment = moment.replace(tzinfo=UTC)
    seconds = (datetime.now(UTC) - moment).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return "just now"


def _ago(moment: datetime | None) -> str:
    """'3 d ago', or 'just now'."""
    age = _age(moment)
    return age if age in ("", "just now") else f"{age} ago"


TEMPLATES.env.filters.update(number=_number, percent=_percent, age=_age, ago=_ago)

# Bidirectional controls (marks, embeddings, overrides, isolates) and zero-width and other
# invisible characters: kept in stored text (judges see them), but a page that let them act
# or vanish would show a reviewer other text than the judge reads (reordered, or with words
# that look alike but differ). Pages show each as a visible marker instead, except in the
# fields of a form that posts the text back (the edit page), where a marker would be saved in
# its place. The input policy's list (``rubricsvc.inputpolicy.INVISIBLE``), the one the
# judge's neutralizer uses.
RAW_TEXT_TEMPLATES = frozenset({"edit.html"})


class Unmarked(str):
    """Text a page sends back as it is (a filter's value in a form): ``{{ x|unmarked }}``."""


def invisible_marker(match: re.Match[str]) -> str:
    return f"\u27e8U+{ord(match.group()):04X}\u27e9"


@pass_context
def _finalize(context: Context, value: Any) -> Any:
    """Every ``{{ value }}`` of a page before it is escaped: invisible characters shown (in
    markup a macro made too: a marker holds no character that markup gives meaning to)."""
    if not isinstance(value, str) or value.isascii() or context.name in RAW_TEXT_TEMPLATES:
        return value
    if isinstance(value, Unmarked):
        return str(value)
    if INVISIBLE.search(value) is None:
        return value
    shown = INVISIBLE.sub(invisible_marker, value)
    return Markup(shown) if isinstance(value, Markup) else shown


TEMPLATES.env.finalize = _finalize
TEMPLATES.env.filters["unmarked"] = Unmarked


def render(
    request: Request,
    template: str,
    reviewer: Reviewer | None,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    """The page, with the reviewer, their CSRF token and a flash message left by a redirect."""
    flash = signer(request).read_flash(request.cookies.get(FLASH_COOKIE))
    response = TEMPLATES.TemplateResponse(
        request,
        template,
        {"reviewer": reviewer, "flash": flash, **context},
        status_code=status_code,
    )
    if flash is not None:
        response.delete_cookie(FLASH_COOKIE, path="/ui")
    # Pages show reviewers' data: never cached by a shared proxy, never framed elsewhere.
    response.headers["cache-control"] = "no-store"
    response.headers["x-frame-options"] = "DENY"
    response.headers["content-security-policy"] = (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "frame-ancestors 'none'; form-action 'self'"
    )
    return response
