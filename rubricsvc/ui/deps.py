"""What every review page needs: the signed-in reviewer, a checked form, a database session.

A page without a valid session redirects to sign-in (a GET) or is refused (a POST); a form
post without its CSRF token is refused before its action touches anything, and so is a
parameter or form field whose text the input policy refuses (422, naming it). What a
reviewer may do is their key's scopes, as on the API.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from fastapi import Depends, Request
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session
from starlette.datastructures import FormData

from rubricsvc.apikeys import Scope, allows
from rubricsvc.config import Settings
from rubricsvc.db import session_scope
from rubricsvc.inputpolicy import printable, text_problem
from rubricsvc.models import ApiKey
from rubricsvc.routeaccess import OpenCheck
from rubricsvc.ui.session import SESSION_COOKIE, SessionSigner

# The API's key gate lets the pages through: each page checks its own session cookie (signed
# in with a key on /ui/login) through ``current_reviewer``.
SESSION_PAGES = OpenCheck("review pages: each checks its own signed-in session (a key's)")


class PageRefused(Exception):
    """Shown as an error page with this status (403: not allowed, 404: no such thing)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class SignInRequired(Exception):
    """No valid session: a GET goes to the sign-in page, anything else is refused."""


@dataclass(frozen=True)
class Reviewer:
    """The signed-in key: its name is the reviewer's name on everything they do."""

    key_id: int
    name: str
    scopes: tuple[str, ...]
    csrf_token: str

    def may(self, scope: Scope) -> bool:
        return allows(list(self.scopes), scope)


@dataclass(frozen=True)
class UiState:
    """What the pages share: the app's settings and engine, and the cookie signer."""

    settings: Settings
    engine: Engine
    signer: SessionSigner


def ui_state(request: Request) -> UiState:
    found: UiState = request.app.state.rubricsvc_ui
    return found


def signer(request: Request) -> SessionSigner:
    return ui_state(request).signer


def page_db(state: UiState = Depends(ui_state)) -> Iterator[Session]:
    """One transaction per page: committed when the page is built, else rolled back."""
    with session_scope(state.engine) as session:
        yield session


def current_reviewer(request: Request, state: UiState = Depends(ui_state)) -> Reviewer:
    sessions = signer(request)
    data = sessions.read_session(request.cookies.get(SESSION_COOKIE))
    if data is None:
        raise SignInRequired()
    with session_scope(state.engine) as session:
        key = session.scalar(select(ApiKey).where(ApiKey.id == data.key_id))
        if key is None or key.revoked_at is not None or key.key_hash[:16] != data.key_hash_head:
            raise SignInRequired()
        return Reviewer(key.id, key.name, tuple(key.scopes), sessions.csrf_token(data.nonce))


def require_scope(reviewer: Reviewer, scope: Scope, action: str) -> None:
    if not reviewer.may(scope):
        held = ", ".join(reviewer.scopes) or "none"
        raise PageRefused(
            403, f"Your key {reviewer.name!r} ({held}) lacks the {scope.value} scope: {action}."
        )


def _refuse_text(kind: str, items: Iterable[tuple[str, Any]]) -> None:
    """A 422 page naming the first field whose text the input policy refuses."""
    for name, value in items:
        problem = text_problem(value) if isinstance(value, str) else None
        if problem is not None:
            raise PageRefused(422, f"The {kind} {printable(name)!r} {problem}.")


def checked_parameters(request: Request) -> None:
    """Every page's path and query parameters, held to the input policy."""
    _refuse_text("path parameter", request.path_params.items())
    _refuse_text("query parameter", request.query_params.multi_items())


async def checked_form(
    request: Request, reviewer: Reviewer = Depends(current_reviewer)
) -> FormData:
    """The posted form, once its CSRF token matched the session's and its fields passed the
    input policy."""
    form = await request.form()
    token: Any = form.get("csrf_token")
    if not isinstance(token, str) or not hmac.compare_digest(reviewer.csrf_token, token):
        raise PageRefused(403, "The form's security token is missing or wrong: reload the page.")
    _refuse_text("form field", form.multi_items())
    return form


def sign_in_url(request: Request) -> str:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return f"/ui/login?next={quote(target, safe='')}"
