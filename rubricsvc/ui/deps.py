"""What every review page needs: the signed-in reviewer, a checked form, a database session.

A page without a valid session redirects to sign-in (a GET) or is refused (a POST); a form
post without its CSRF token is refused before its action touches anything, and so is a
parameter or form field whose text the input policy refuses (422, naming it). What a
reviewer may do is their key's scopes, as on the API.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from fastapi import Depends, Request
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.datastructures import FormData

from rubricsvc.apikeys import Scope, allows
from rubricsvc.config import Settings
from rubricsvc.db import session_scope
from rubricsvc.errors import database_failure, first_line
from rubricsvc.inputpolicy import GIVEN_TWICE, printable, repeated_name, text_problem
from rubricsvc.routeaccess import OpenCheck
from rubricsvc.ui.session import SESSION_COOKIE, SessionSigner, session_key

log = logging.getLogger(__name__)

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


class SignInThrottle(Protocol):
    """Failed sign-ins counted per client address: the API's count of failed keys
    (``rubricsvc.api.authfailures.FailedAuthThrottle``; the API package imports this one)."""

    per_minute: int

    def address_of(self, host: str | None) -> str: ...

    def waiting(self, address: str, what: str = "") -> float: ...

    def failed(self, address: str, what: str) -> float: ...


@dataclass(frozen=True)
class UiState:
    """What the pages share: the app's settings and engine, the cookie signer, and the count
    of failed sign-ins per client address (the API's, ``authfailures``; None: not counted)."""

    settings: Settings
    engine: Engine
    signer: SessionSigner
    failures: SignInThrottle | None = None


def ui_state(request: Request) -> UiState:
    found: UiState = request.app.state.rubricsvc_ui
    return found


def signer(request: Request) -> SessionSigner:
    return ui_state(request).signer


def page_db(request: Request, state: UiState = Depends(ui_state)) -> Iterator[Session]:
    """One transaction per page: committed when the page is built, else rolled back. Pages
    take it through ``PAGE_SESSION`` (see there). A database error, the commit's included,
    is an error page: 409 for a conflict, 503 for a busy database, else 500 (logged without
    the statement's parameters, as the API's are)."""
    try:
        with session_scope(state.engine) as session:
            yield session
    except SQLAlchemyError as err:
        status, message = database_failure(err)
        log.warning(
            "%s %s: %d, database error %s: %s",
            request.method,
            request.url.path,
            status,
            type(err).__name__,
            first_line(err),
        )
        raise PageRefused(status, f"{message[:1].upper()}{message[1:]}.") from None


# The page's session, scoped to the page's function: FastAPI closes it (commits) once the
# page is built, before it is sent, so the page a form redirects to (the browser asks for
# it at once) shows what the form saved, and a commit that fails is an error page, never a
# page that says it was saved.
PAGE_SESSION = Depends(page_db, scope="function")


def current_reviewer(request: Request, state: UiState = Depends(ui_state)) -> Reviewer:
    sessions = signer(request)
    data = sessions.read_session(request.cookies.get(SESSION_COOKIE))
    if data is None:
        raise SignInRequired()
    with session_scope(state.engine) as session:
        key = session_key(session, data)  # signed out, expired, or its key revoked: None
        if key is None:
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
    """Every page's path and query parameters, held to the input policy; a query parameter
    given twice is refused (which value would count is not for the page to guess)."""
    _refuse_text("path parameter", request.path_params.items())
    items = request.query_params.multi_items()
    _refuse_text("query parameter", items)
    repeated = repeated_name(items)
    if repeated is not None:
        raise PageRefused(422, f"The query parameter {printable(repeated)!r} {GIVEN_TWICE}.")


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
