"""The reward routes served on the event loop without FastAPI's per-request layers.

RL frameworks send one rollout per request, dozens at once, and concurrent requests are
judged as one batch (``scoring.coalescing``). The batch waits for the last request of a
burst, and the requests are read one after another on the one event loop: what each costs
on its way to the batch, and back, adds up. Through FastAPI that way (routing the request
twice, solving dependencies, validating the body and the answer through its fields) was most
of a one-rollout request's own time (B8, docs/benchmarks.md).

``DirectRoutes`` sits behind ``KeyGate`` (which admitted the key and checked its scope) and
serves a well-formed request of ``POST /v1/rewards`` and ``POST /v1/openrlhf/reward``
itself: the same input policy and models, the same judging and answer (the routes'
``serve_*`` functions, which the routes call too), errors raised there answered by the app's
own exception handlers. Anything else goes on to the app unchanged, a request it would
refuse included (its body replayed as read), so every refusal is the route's own, written in
one place.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError, create_model
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rubricsvc.api.auth import ADMITTED_KEY, ADMITTED_ROUTE, KeyRule, rule_of
from rubricsvc.api.boundary import is_json
from rubricsvc.api.routes import rewards
from rubricsvc.api.routes.rewards import serve_openrlhf, serve_rewards
from rubricsvc.api.schemas import OpenRLHFIn, RewardsIn
from rubricsvc.api.state import AppState
from rubricsvc.inputpolicy import find_refusal, loads_json, text_problem
from rubricsvc.models import ApiKey

ExceptionHandlers = Mapping[Any, Callable[..., Any]]
JSON_CONTENT_TYPE = (b"content-type", b"application/json")
Model = TypeVar("Model", bound=BaseModel)


@dataclass(frozen=True)
class DirectRoute:
    """A route served directly: its JSON body read into ``body``, its own query parameters
    (as its signature declares them) into a model made from them, and answered by ``serve``
    (``serve(state, key, body, **query)``, the function the route calls too, with the key
    the gate admitted)."""

    route: APIRoute
    body: type[BaseModel]
    serve: Callable[..., Awaitable[BaseModel]]
    query: type[BaseModel] = field(init=False)
    answer: TypeAdapter[Any] = field(init=False)  # the route's response model, as FastAPI
    # The query parameters of a request without any (most are: RL clients send none), read
    # once; None where the route refuses an empty query.
    no_query: BaseModel | None = field(init=False)

    def __post_init__(self) -> None:
        # Only requests the gate admitted a key for are served here (``_direct``).
        if not isinstance(rule_of(self.route), KeyRule):
            raise ValueError(f"{self.route.path} must need a key to be served directly")
        object.__setattr__(self, "query", query_model(self.route))
        object.__setattr__(self, "answer", TypeAdapter(self.route.response_model))
        object.__setattr__(self, "no_query", parse_query({}, self.query))

    def read(self, scope: Scope, body: bytes) -> tuple[BaseModel, dict[str, Any]] | None:
        """The body and the query as the route would take them, or None where the route
        should answer (it refuses them: its own error, written in one place)."""
        given = scope.get("query_string")
        query = parse_query(scope, self.query) if given else self.no_query
        parsed = None if query is None else parse_body(body, self.body)
        if query is None or parsed is None:
            return None
        return parsed, dict(query)


class DirectRoutes:
    """Pure ASGI, in front of the app and behind the key gate (see the module's docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: Sequence[DirectRoute],
        state: AppState,
        exception_handlers: ExceptionHandlers,
    ) -> None:
        self.app = app
        # By the identity of the FastAPI route (routes compare by path and endpoint, unhashed).
        self.routes = {id(direct.route): direct for direct in routes}
        self.state = state
        self.exception_handlers = exception_handlers  # the app's (a live mapping)

    def _direct(self, scope: Scope) -> DirectRoute | None:
        # The gate found the route and admitted the key for it (its scope checked); without
        # the gate in front, the route's own dependency checks the key.
        if not isinstance(scope.get(ADMITTED_KEY), ApiKey):
            return None
        direct = self.routes.get(id(scope.get(ADMITTED_ROUTE)))
        return direct if direct and is_json(header(scope, b"content-type")) else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        direct = self._direct(scope)
        if direct is None:
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        if body is None:
            return  # the client hung up: nobody to answer
        request = direct.read(scope, body)
        if request is None:
            await self.app(scope, replay(body, receive), send)
            return
        scope["route"] = direct.route  # metrics label the request with its route's template
        parsed, query = request
        try:
            answer = await direct.serve(self.state, scope[ADMITTED_KEY], parsed, **query)
        except Exception as exc:
            response = await self._error_response(scope, receive, exc)
            if response is None:
                raise  # as from the route: the server's 500
            await response(scope, receive, send)
            return
        await send_json(send, direct.answer.dump_json(answer, by_alias=True))

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


def reward_routes(app: FastAPI) -> list[DirectRoute]:
    """The app's reward routes, served directly."""
    return [
        DirectRoute(route_of(app, rewards.rewards), RewardsIn, _serve_rewards),
        DirectRoute(route_of(app, rewards.openrlhf_reward), OpenRLHFIn, _serve_openrlhf),
    ]


def route_of(app: FastAPI, endpoint: Callable[..., Any]) -> APIRoute:
    """The app's route of ``endpoint``."""
    for route in app.router.routes:
        if isinstance(route, APIRoute) and route.endpoint is endpoint:
            return route
    raise LookupError(f"no route serves {endpoint.__qualname__}")


# Looked up when called, not when the table is made (tests count what was served directly).
async def _serve_rewards(state: AppState, key: ApiKey, body: RewardsIn) -> BaseModel:
    return await serve_rewards(state, body, key)


async def _serve_openrlhf(
    state: AppState, key: ApiKey, body: OpenRLHFIn, **query: Any
) -> BaseModel:
    return await serve_openrlhf(state, body, key, **query)


def query_model(route: APIRoute) -> type[BaseModel]:
    """A model of the route's own query parameters, made from its signature (the same types,
    defaults and constraints FastAPI validates them with); parameters of its dependencies,
    such as ``?api_key=``, are theirs."""
    fields: dict[str, Any] = {
        param.name: (param.field_info.annotation, param.field_info)
        for param in route.dependant.query_params
    }
    return create_model(f"{route.name}_query", **fields)


def parse_body(body: bytes, model: type[Model]) -> Model | None:
    """The JSON body as the route would see it, or None where the route would refuse it (and
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
        return model.model_validate(data)
    except ValidationError:
        return None


def parse_query(scope: Scope, model: type[Model]) -> Model | None:
    """The query parameters as ``model``, or None where the route should answer: a name
    given twice, text the input policy refuses (``boundary.check_parameters`` refuses both,
    before any work), a value the model refuses. Names the model does not know are ignored,
    as FastAPI does."""
    items = QueryParams(scope.get("query_string", b"")).multi_items()
    given = dict(items)
    if len(given) != len(items) or any(text_problem(value) for value in given.values()):
        return None
    try:
        return model.model_validate(given)
    except ValidationError:
        return None


async def send_json(send: Send, content: bytes) -> None:
    """A 200 answer of JSON ``content``, with the headers Starlette's ``Response`` would send
    for it (built here: that object's own set-up was a measurable part of a small answer)."""
    headers = [(b"content-length", str(len(content)).encode()), JSON_CONTENT_TYPE]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": content})


def header(scope: Scope, name: bytes) -> bytes | None:
    """A request header's first value (ASGI servers give names in lower case)."""
    return next((value for key, value in scope.get("headers", []) if key == name), None)


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
