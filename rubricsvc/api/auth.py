"""API keys, scopes and rate limits, checked from the request line and headers alone.

FastAPI reads and parses a JSON body before it runs a route's dependencies, so a key checked
only in a dependency comes after the server has read (up to the size limit) and parsed what
any client sent. ``KeyGate`` sits in front of the app: it finds the route a request is for
and, when that route needs a key, authenticates it (``Authorization: Bearer``, or
``?api_key=`` on the routes that accept it), counts it against its rate limit and checks the
route's scope before the app receives anything. A refused request's body is never read. The
admitted key is left in the ASGI scope, where the route's dependency finds it. An unknown or
revoked key counts against the client's address (``authfailures``): past the limit, that
address is refused with 429 before its key is even looked up.

Closed by default: every route declares either the scope a key needs (``deps.require``) or
that it is open and why (``deps.public``; the docs pages and the review pages' own sign-in
are marked open by ``create_app``). A route that declares neither, a plugin's added after
``create_app`` included, stops the server at start-up, naming it (``undeclared_routes``),
and until then the gate admits only an admin key to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fastapi.concurrency import run_in_threadpool
from fastapi.security.utils import get_authorization_scheme_param
from starlette.datastructures import Headers, QueryParams
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from rubricsvc.api.authfailures import FailedAuthThrottle, client_address
from rubricsvc.api.errors import send_error
from rubricsvc.api.ratelimit import MemoryRateLimiter, RateLimiter, retry_after
from rubricsvc.apikeys import Scope as KeyScope
from rubricsvc.apikeys import allows
from rubricsvc.models import ApiKey
from rubricsvc.routeaccess import Open, OpenCheck, declared_open, mark_open

__all__ = ["Open", "OpenCheck", "mark_open"]  # declared in rubricsvc.routeaccess

# Where KeyGate leaves the key it admitted, and the route it admitted it for (ASGI scope
# extensions).
ADMITTED_KEY = "rubricsvc.api_key"
ADMITTED_ROUTE = "rubricsvc.api_route"
NO_KEY = "an API key is required: send 'Authorization: Bearer <key>'"
BAD_KEY = "unknown or revoked API key"


@dataclass(frozen=True)
class KeyRule:
    """What a route asks of a key: a scope, and whether ``?api_key=`` may carry it."""

    scope: KeyScope
    query_key: bool = False


# What a route that declares nothing gets from the gate until start-up refuses it.
UNDECLARED = KeyRule(KeyScope.ADMIN)


class KeyCheck:
    """Base of the dependencies that declare a route's ``KeyRule`` (see ``deps.require``)."""

    def __init__(self, rule: KeyRule) -> None:
        self.rule = rule


def access_of(route: BaseRoute) -> KeyRule | Open | None:
    """What a route declares: its key rule or that it is open (declared on the route, its
    router or in its parameters), or None when it declares neither."""
    marked = declared_open(route)
    if marked is not None:
        return marked
    pending = list(getattr(getattr(route, "dependant", None), "dependencies", None) or [])
    while pending:
        dependant = pending.pop()
        if isinstance(dependant.call, KeyCheck):
            return dependant.call.rule
        if isinstance(dependant.call, OpenCheck):
            return dependant.call.open
        pending.extend(dependant.dependencies)
    return None


def rule_of(route: BaseRoute) -> KeyRule | None:
    """The key rule the gate applies to a route: its own, none when it is open, and
    ``UNDECLARED`` (an admin key) when it declares neither."""
    access = access_of(route)
    if isinstance(access, Open):
        return None
    return access if access is not None else UNDECLARED


def route_name(route: BaseRoute) -> str:
    methods = ",".join(sorted(getattr(route, "methods", None) or [])) or "ANY"
    return f"{methods} {getattr(route, 'path', repr(route))}"


def undeclared_routes(routes: Sequence[BaseRoute]) -> list[str]:
    """The routes that declare neither a key scope nor that they are open."""
    return [route_name(route) for route in routes if access_of(route) is None]


class UndeclaredRoutes(RuntimeError):
    def __init__(self, names: Sequence[str]) -> None:
        super().__init__(
            "closed by default: these routes declare neither the scope a key needs "
            "(dependencies=[Depends(require(Scope.READ))], rubricsvc.api.deps) nor that they "
            "are open (dependencies=[Depends(public('who may use it and why'))]): "
            + "; ".join(names)
        )
        self.names = list(names)


def presented_secret(scope: Scope, rule: KeyRule) -> str | None:
    """The key a request presents: the bearer credentials (as ``HTTPBearer`` reads them), else
    ``?api_key=`` where the route accepts it."""
    header = Headers(scope=scope).get("authorization")
    scheme, credentials = get_authorization_scheme_param(header)
    if header and credentials and scheme.lower() == "bearer":
        return credentials
    if rule.query_key:
        return QueryParams(scope.get("query_string", b"")).get("api_key") or None
    return None


def scope_error(key: ApiKey, needed: KeyScope) -> str | None:
    if allows(key.scopes, needed):
        return None
    held = ", ".join(key.scopes) or "none"
    return f"this key's scopes ({held}) do not include {needed.value}"


class KeyGate:
    """Pure ASGI: nothing of the body is received unless the key is admitted."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: Sequence[BaseRoute],
        authenticate: Callable[[str], ApiKey | None],
        limiter: RateLimiter | None,
        kept: Callable[[str], ApiKey | None] | None = None,
        failures: FailedAuthThrottle | None = None,
    ) -> None:
        self.app = app
        self.routes = routes  # the app's routes, in the order its router tries them
        self.authenticate = authenticate  # the live key with a secret (``AppState``'s)
        self.limiter = limiter
        # A key known without I/O (``AppState.kept_key``) is admitted on the event loop when
        # the rate limit is counted in memory too: a hop to a worker thread per request was
        # much of a small request's own time (RL frameworks send one rollout per request).
        self.kept = kept
        self._limit_in_memory = limiter is None or isinstance(limiter, MemoryRateLimiter)
        # Failed authentications per client address (None: not counted).
        self.failures = failures
        # Key lookups under way, by event loop and secret (``_lookup``).
        self._lookups: dict[tuple[int, str], asyncio.Task[ApiKey | None]] = {}
        self._rules: dict[int, KeyRule | None] = {}
        self._static: dict[tuple[str, str, str, int], tuple[BaseRoute, KeyRule] | None] = {}

    def _route(self, scope: Scope) -> tuple[BaseRoute, KeyRule] | None:
        # A path without parameters always finds the same route: remembered, so that the
        # requests RL frameworks send by the thousand skip a walk of every route before theirs.
        # (The count of routes is in the key: a route added later could come first.)
        static = (scope["method"], scope.get("root_path", ""), scope["path"], len(self.routes))
        if static in self._static:
            return self._static[static]
        for route in self.routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                if id(route) not in self._rules:
                    self._rules[id(route)] = rule_of(route)
                rule = self._rules[id(route)]
                found = (route, rule) if rule is not None else None
                if not getattr(route, "param_convertors", True):
                    self._static[static] = found
                return found
        return None  # no route (404), another method (405), or a route open to all

    async def _lookup(self, secret: str) -> ApiKey | None:
        """``authenticate`` on a worker thread, one lookup per secret at a time: requests
        that find their key's cache entry gone together (a trainer's dozens of concurrent
        reward requests, every ``key_cache_seconds``) wait for the first one's lookup instead
        of each reading the key from the database."""
        loop = asyncio.get_running_loop()
        flight = (id(loop), secret)
        pending = self._lookups.get(flight)
        if pending is None:
            pending = loop.create_task(run_in_threadpool(self.authenticate, secret))
            self._lookups[flight] = pending
            pending.add_done_callback(lambda done: self._landed(flight, done))
        # Shielded: a waiter whose client hung up takes the others' lookup with it otherwise.
        return await asyncio.shield(pending)

    def _landed(self, flight: tuple[int, str], done: asyncio.Task[ApiKey | None]) -> None:
        self._lookups.pop(flight, None)
        if not done.cancelled():
            done.exception()  # retrieved here too: every waiter may have gone

    async def _take(self, key: ApiKey) -> float:
        """Seconds ``key`` must wait under its rate limit (a shared limiter's I/O off the loop)."""
        if self.limiter is None:
            return 0.0
        if self._limit_in_memory:
            return self.limiter.take(key.id)
        return await run_in_threadpool(self.limiter.take, key.id)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self._route(scope) if scope["type"] == "http" else None
        if found is None:
            await self.app(scope, receive, send)
            return
        route, rule = found
        failures = self.failures
        if failures is not None and failures.refused:  # empty unless someone failed too often
            wait = failures.waiting(client_address(_host(scope)), "a key's request")
            if wait > 0:
                await self._throttled(scope, route, send, wait)
                return
        secret = presented_secret(scope, rule)
        if not secret:
            await self._refuse(scope, route, send, 401, NO_KEY)
            return
        key = self.kept(secret) if self.kept is not None else None
        if key is None:
            key = await self._lookup(secret)
        if key is None:
            wait = await self._failed(scope)
            if wait > 0:
                await self._throttled(scope, route, send, wait)
                return
            await self._refuse(scope, route, send, 401, BAD_KEY)
            return
        wait = await self._take(key)
        if wait > 0:
            seconds = retry_after(wait)
            assert self.limiter is not None
            message = (
                f"rate limit of {self.limiter.per_minute} requests per minute for this key: "
                f"retry in {seconds} s"
            )
            headers = [(b"retry-after", str(seconds).encode())]
            await self._refuse(scope, route, send, 429, message, headers)
            return
        refused = scope_error(key, rule.scope)
        if refused is not None:
            await self._refuse(scope, route, send, 403, refused)
            return
        scope[ADMITTED_KEY] = key
        scope[ADMITTED_ROUTE] = route
        await self.app(scope, receive, send)

    async def _failed(self, scope: Scope) -> float:
        """Count an unknown key against the client's address: 0, or the seconds it must wait
        (a shared count's I/O off the loop)."""
        if self.failures is None:
            return 0.0
        address = client_address(_host(scope))
        # Not the path: the access log has it (and a key in it, redacted there).
        what = "unknown or revoked API key"
        if self.failures.in_memory:
            return self.failures.failed(address, what)
        return await run_in_threadpool(self.failures.failed, address, what)

    async def _throttled(self, scope: Scope, route: BaseRoute, send: Send, wait: float) -> None:
        assert self.failures is not None
        seconds = retry_after(wait)
        message = (
            f"too many failed authentications from this address (more than "
            f"{self.failures.per_minute} a minute): retry in {seconds} s"
        )
        headers = [(b"retry-after", str(seconds).encode())]
        await self._refuse(scope, route, send, 429, message, headers)

    async def _refuse(
        self,
        scope: Scope,
        route: BaseRoute,
        send: Send,
        status: int,
        message: str,
        headers: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        scope["route"] = route  # metrics label the refusal with the route's template
        await send_error(send, status, message, headers=headers)


def _host(scope: Scope) -> str | None:
    client = scope.get("client")
    return str(client[0]) if client else None
