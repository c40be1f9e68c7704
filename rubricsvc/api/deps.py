"""Dependencies of the routes: the app state, a database session, the caller's API key."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from fastapi import Depends, Query, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from rubricsvc.api.errors import ApiError
from rubricsvc.api.state import AppState
from rubricsvc.apikeys import Scope, allows, authenticate
from rubricsvc.db import session_scope
from rubricsvc.models import ApiKey

_bearer = HTTPBearer(auto_error=False, description="An API key: `rubricsvc keys create`.")


def app_state(request: Request) -> AppState:
    state: AppState = request.app.state.rubricsvc
    return state


def db(state: AppState = Depends(app_state)) -> Iterator[Session]:
    """A session in one transaction: committed when the route returns, else rolled back."""
    with session_scope(state.engine) as session:
        yield session


def _key_from(state: AppState, secret: str | None) -> ApiKey:
    if not secret:
        raise ApiError(401, "an API key is required: send 'Authorization: Bearer <key>'")
    with session_scope(state.engine) as session:
        key = authenticate(session, secret)
        if key is None:
            raise ApiError(401, "unknown or revoked API key")
        session.expunge(key)
    return key


def _check(key: ApiKey, scope: Scope) -> ApiKey:
    if not allows(key.scopes, scope):
        held = ", ".join(key.scopes) or "none"
        raise ApiError(403, f"this key's scopes ({held}) do not include {scope.value}")
    return key


def require(scope: Scope) -> Callable[..., ApiKey]:
    """A dependency that admits a live key holding ``scope`` (401 without one, 403 short of it)."""

    def check(
        state: AppState = Depends(app_state),
        credentials: HTTPAuthorizationCredentials | None = Security(_bearer),
    ) -> ApiKey:
        return _check(_key_from(state, credentials.credentials if credentials else None), scope)

    return check


def require_with_query_key(scope: Scope) -> Callable[..., ApiKey]:
    """As ``require``, also accepting ``?api_key=``: for clients that cannot send headers."""

    def check(
        state: AppState = Depends(app_state),
        credentials: HTTPAuthorizationCredentials | None = Security(_bearer),
        api_key: str | None = Query(
            None,
            description="The API key, for clients that cannot set headers (query strings "
            "end up in logs: give such a client a key of its own, scope score only).",
        ),
    ) -> ApiKey:
        secret = credentials.credentials if credentials else api_key
        return _check(_key_from(state, secret), scope)

    return check
