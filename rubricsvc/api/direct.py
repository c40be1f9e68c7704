"""``POST /v1/rewards`` served on the event loop without FastAPI's per-request layers.

RL frameworks send one rollout per request, dozens at once, and concurrent requests are
judged as one batch (``scoring.coalescing``). The batch waits for the last request of a
burst, and the requests are read one after another on the one event loop: what each costs
on its way to the batch, and back, adds up. Through FastAPI that way (routing the request
twice, solving dependencies, validating the body and the answer through its fields) was most
of a one-rollout request's own time (B8, docs/benchmarks.md).

``DirectRewards`` sits behind ``KeyGate`` (which admitted the key and checked its scope) and
serves a well-formed request of the route itself: the same input policy and schema, the same
judging and answer (``routes.rewards.serve_rewards``), errors raised there answered by the
app's own exception handlers. Anything else goes on to the app unchanged, a body it would
refuse included (replayed as read), so every refusal is the route's own, written in one
place.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from fastapi.routing import APIRoute
from pydantic import TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rubricsvc.api.auth import ADMITTED_KEY, KeyRule, rule_of, scope_error
from rubricsvc.api.boundary import is_json
from rubricsvc.api.routes.rewards import serve_rewards
from rubricsvc.api.schemas import RewardsIn, RewardsOut
from rubricsvc.api.state import AppState
from rubricsvc.inputpolicy import find_refusal, loads_json
from rubricsvc.models import ApiKey

# The answer as FastAPI writes a response model: JSON straight from pydantic, by alias.
_ANSWER = TypeAdapter(RewardsOut)

ExceptionHandlers = Mapping[Any, Callable[..., Any]]


class DirectRewards:
    """Pure ASGI, in front of the app and behind the key gate (see the module's docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        route: APIRoute,
        state: AppState,
        exception_handlers: ExceptionHandlers,
    ) -> None:
        self.app = app
        self.route = route  # the FastAPI route it serves: its path, its key rule, its label
        self.state = state
        self.exception_handlers = exception_handlers  # the app's (a live mapping)
        rule = rule_of(route)
        if not isinstance(rule, KeyRule):
            raise ValueError(f"{route.path} must need a key to be served directly")
        self.rule = rule

    def _serves(self, scope: Scope) -> bool:
        # Query parameters are the input policy's too (``boundary.check_parameters``): a
        # request with any is left to the route, which takes none.
        if scope["type"] != "http" or scope.get("query_string"):
            return False
        match, _ = self.route.matches(scope)
        if match != Match.FULL:
            return False
        key = scope.get(ADMITTED_KEY)
        if not isinstance(key, ApiKey) or scope_error(key, self.rule.scope) is not None:
            return False  # no gate in front: the route's own dependency checks the key
        return is_json(header(scope, b"content-type"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._serves(scope):
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        if body is None:
            return  # the client hung up: nobody to answer
        parsed = parse_rewards(body)
        if parsed is None:
            await self.app(scope, replay(body, receive), send)
            return
        scope["route"] = self.route  # metrics label the request with its route's template
        try:
            answer = await serve_rewards(self.state, parsed)
        except Exception as exc:
            response = await self._error_response(scope, receive, exc)
            if response is None:
                raise  # as from the route: the server's 500
            await response(scope, receive, send)
            return
        content = _ANSWER.dump_json(answer, by_alias=True)
        await Response(content, media_type="application/json")(scope, receive, send)

    async def _error_response(
        self, scope: Scope, receive: Receive, exc: Exception
    ) -> Response | None:
        """The app's answer to ``exc`` (its handler for the nearest class), or None when it
        has none."""
        handler = next(
            (self.exception_handlers[c] for c in type(exc).__mro__ if c in self.exception_handlers),
            None,
        )
        if handler is None:
            return None
        response = handler(Request(scope, receive), exc)  # a handler may be async or not
        if inspect.isawaitable(response):
            response = await response
        assert isinstance(response, Response)
        return response


def header(scope: Scope, name: bytes) -> bytes | None:
    """A request header's first value (ASGI servers give names in lower case)."""
    return next((value for key, value in scope.get("headers", []) if key == name), None)


def parse_rewards(body: bytes) -> RewardsIn | None:
    """The body, as the route would see it, or None where the route would refuse it (and
    should say why: its input policy, its schema)."""
    if not body:
        return None
    try:
        data = loads_json(body)
    except (ValueError, RecursionError):
        return None
    if find_refusal(data) is not None:
        return None
    try:
        return RewardsIn.model_validate(data)
    except ValidationError:
        return None


async def read_body(receive: Receive) -> bytes | None:
    """The request's body, or None if the client disconnected before sending it all."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` with the body already read given again first."""
    given = False

    async def again() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again
