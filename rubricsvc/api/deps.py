"""Dependencies of the routes: the app state, a database session, the caller's API key.

A route's key dependency declares what it needs (``require(scope)``), or ``public(reason)``
that it needs no key; a route with neither is refused (``rubricsvc.api.auth``). ``KeyGate``
enforces it before the body is read and leaves the admitted key in the request, where the
dependency finds it. Without the gate in front (an app assembled otherwise), the dependency checks the
key itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator

from fastapi import Depends, Query, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from rubricsvc.api.auth import (
    ADMITTED_KEY,
    BAD_KEY,
    NO_KEY,
    KeyCheck,
    KeyRule,
    OpenCheck,
    scope_error,
)
from rubricsvc.api.errors import ApiError
from rubricsvc.api.state import AppState
from rubricsvc.apikeys import Scope
from rubricsvc.db import session_scope
from rubricsvc.models import ApiKey

_bearer = HTTPBearer(auto_error=False, description="An API key: `rubricsvc keys create`.")


# The dependencies below that do no I/O are ``async``: FastAPI runs a plain function
# dependency on a worker thread, a hop that cost each request more than its own work.
async def app_state(request: Request) -> AppState:
    state: AppState = request.app.state.rubricsvc
    return state


def db(state: AppState = Depends(app_state)) -> Iterator[Session]:
    """A session in one transaction: committed when the route returns, else rolled back.
    Routes take it as ``DB_SESSION``, never as ``Depends(db)`` (see there)."""
    with session_scope(state.engine) as session:
        yield session


# Every route's session (``session: Session = DB_SESSION``): the one place a route's writes
# are committed. Scoped to the route's function, FastAPI closes it (commits) once the route
# has returned and its answer is built, before a byte of the answer is sent. A yield
# dependency's default scope ("request") closes it after the answer has been sent: a client
# told 201 could read a 404 at once, and a commit that failed had been answered as a
# success. A failed commit reaches the app's error handlers as any error of the route does
# (``errors.install_error_handlers``: 409 for a conflict, 503 for a busy database).
DB_SESSION = Depends(db, scope="function")


def _key_from(state: AppState, secret: str | None) -> ApiKey:
    if not secret:
        raise ApiError(401, NO_KEY)
    key = state.authenticate(secret)
    if key is None:
        raise ApiError(401, BAD_KEY)
    return key


class _Require(KeyCheck):
    async def admit(self, request: Request, state: AppState, secret: str | None) -> ApiKey:
        admitted = request.scope.get(ADMITTED_KEY)
        if isinstance(admitted, ApiKey):
            key = admitted
        else:  # no gate in front: looked up here, on a worker thread (the database)
            key = await run_in_threadpool(_key_from, state, secret)
        refused = scope_error(key, self.rule.scope)
        if refused is not None:
            raise ApiError(403, refused)
        return key


class _HeaderKey(_Require):
    async def __call__(
        self,
        request: Request,
        state: AppState = Depends(app_state),
        credentials: HTTPAuthorizationCredentials | None = Security(_bearer),
    ) -> ApiKey:
        return await self.admit(request, state, credentials.credentials if credentials else None)


class _HeaderOrQueryKey(_Require):
    async def __call__(
        self,
        request: Request,
        state: AppState = Depends(app_state),
        credentials: HTTPAuthorizationCredentials | None = Security(_bearer),
        api_key: str | None = Query(
            None,
            description="The API key, for clients that cannot set headers (query strings "
            "end up in logs: give such a client a key of its own, scope score only; the "
            "server's access log shows it redacted).",
        ),
    ) -> ApiKey:
        secret = credentials.credentials if credentials else api_key
        return await self.admit(request, state, secret)


def require(scope: Scope) -> Callable[..., Awaitable[ApiKey]]:
    """A dependency that admits a live key holding ``scope`` (401 without one, 403 short of it)."""
    return _HeaderKey(KeyRule(scope))


def require_with_query_key(scope: Scope) -> Callable[..., Awaitable[ApiKey]]:
    """As ``require``, also accepting ``?api_key=``: for clients that cannot send headers."""
    return _HeaderOrQueryKey(KeyRule(scope, query_key=True))


def public(reason: str) -> Callable[[], Awaitable[None]]:
    """A dependency that declares a route open to requests without a key, saying why
    (``dependencies=[Depends(public("liveness probes"))]``)."""
    return OpenCheck(reason)
