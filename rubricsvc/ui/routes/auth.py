"""Sign in (an API key for a session cookie) and sign out (the session ends on the server).

A wrong key counts against the client's address (the API's count, ``api.authfailures``): past
the limit, the address's sign-ins are refused with 429 before any key is looked up."""

from __future__ import annotations

import hmac
import math

from fastapi import Depends, Form, Request
from starlette.responses import RedirectResponse, Response

from rubricsvc.apikeys import authenticate
from rubricsvc.db import session_scope
from rubricsvc.ui.deps import (
    PageRefused,
    Reviewer,
    UiState,
    checked_form,
    current_reviewer,
    signer,
    ui_state,
)
from rubricsvc.ui.routes.common import page_router, redirect, safe_next, set_page_cookie
from rubricsvc.ui.session import (
    SESSION_COOKIE,
    SIGN_IN_COOKIE,
    SIGN_IN_SECONDS,
    end_session,
    start_session,
)
from rubricsvc.ui.templating import render

router = page_router("/ui")


@router.get("/")
def home() -> RedirectResponse:
    return RedirectResponse("/ui/queue", status_code=303)


def _sign_in_page(
    request: Request, next_url: str, error: str | None = None, status_code: int = 200
) -> Response:
    cookie, nonce = signer(request).sign_in_cookie()
    response = render(
        request,
        "login.html",
        None,
        status_code=status_code,
        csrf_token=signer(request).csrf_token(nonce),
        next_url=safe_next(next_url),
        error=error,
    )
    set_page_cookie(request, response, SIGN_IN_COOKIE, cookie, SIGN_IN_SECONDS, samesite="strict")
    return response


@router.get("/login")
def sign_in_form(request: Request, next: str | None = None) -> Response:
    return _sign_in_page(request, next or "/ui/queue")


@router.post("/login")
def sign_in(
    request: Request,
    api_key: str = Form(""),
    csrf_token: str = Form(""),
    next: str = Form("/ui/queue"),
    state: UiState = Depends(ui_state),
) -> Response:
    sessions = signer(request)
    failures = state.failures
    address = (
        failures.address_of(request.client.host if request.client else None) if failures else ""
    )
    if failures is not None:
        wait = failures.waiting(address, "the review pages' sign-in")
        if wait > 0:
            return _throttled_page(request, wait, failures.per_minute)
    nonce = sessions.read_sign_in(request.cookies.get(SIGN_IN_COOKIE))
    if nonce is None or not hmac.compare_digest(sessions.csrf_token(nonce), csrf_token):
        raise PageRefused(403, "The sign-in form expired or was not ours: reload it.")
    with session_scope(state.engine) as session:
        key = authenticate(session, api_key.strip()) if api_key.strip() else None
        if key is None:
            if failures is not None:
                wait = failures.failed(address, "wrong key at the review pages' sign-in")
                if wait > 0:
                    return _throttled_page(request, wait, failures.per_minute)
            return _sign_in_page(request, next, "Unknown or revoked API key.", 401)
        session_id = start_session(session, key, sessions.max_age)
        cookie = sessions.session_cookie(key.id, key.key_hash, session_id)
    response = redirect(request, safe_next(next))
    set_page_cookie(request, response, SESSION_COOKIE, cookie, sessions.max_age)
    response.delete_cookie(SIGN_IN_COOKIE, path="/ui")
    return response


def _throttled_page(request: Request, wait: float, per_minute: int) -> Response:
    seconds = max(1, math.ceil(wait))
    response = render(
        request,
        "error.html",
        None,
        status_code=429,
        status=429,
        message=(
            f"Too many failed sign-ins from your address (more than {per_minute} a minute): "
            f"try again in {seconds} s."
        ),
    )
    response.headers["retry-after"] = str(seconds)
    return response


@router.post("/logout", dependencies=[Depends(checked_form)])
def sign_out(
    request: Request,
    reviewer: Reviewer = Depends(current_reviewer),
    state: UiState = Depends(ui_state),
) -> Response:
    # Ended on the server: the cookie, kept or copied, is refused by every process from now.
    data = signer(request).read_session(request.cookies.get(SESSION_COOKIE))
    if data is not None:
        with session_scope(state.engine) as session:
            end_session(session, data)
    response = redirect(request, "/ui/login", f"Signed out {reviewer.name}.")
    response.delete_cookie(SESSION_COOKIE, path="/ui")
    return response
