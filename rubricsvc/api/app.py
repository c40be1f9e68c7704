"""The FastAPI application: routers, one error shape, keys and limits checked before a body
is read, metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy import Engine

from rubricsvc import __version__, heap
from rubricsvc.api.auth import KeyGate, UndeclaredRoutes, mark_open, undeclared_routes
from rubricsvc.api.direct import DirectRoutes, reward_routes
from rubricsvc.api.errors import install_error_handlers
from rubricsvc.api.limits import BodySizeLimit
from rubricsvc.api.logs import install_redaction
from rubricsvc.api.metrics import MetricsMiddleware
from rubricsvc.api.routes import completions, jobs, operations, prompts, rewards, rubrics
from rubricsvc.api.state import AppState
from rubricsvc.backends import BackendChoice, JudgeBackend
from rubricsvc.config import Settings, get_settings
from rubricsvc.db import make_engine
from rubricsvc.plugins import load_plugins
from rubricsvc.ui import install_ui

DESCRIPTION = """Rubrics, completions, score jobs and rewards.

Every route but `/healthz` needs an API key (`rubricsvc keys create NAME --scope ...`) sent as
`Authorization: Bearer <key>`. Scopes: `read` (every GET), `author` (write prompts, rubrics,
completions), `review` (approve, retire), `score` (submit score jobs, rewards), `admin`
(everything). The review pages under `/ui/` (not in this schema) sign in with a key once and
then use a session cookie. Keys are checked
before a request's body is read; each key has a rate limit (429 with `Retry-After`). Errors
have one shape: `{"error": {"status", "code", "message", "field"}}`.
"""


def create_app(
    settings: Settings | None = None,
    engine: Engine | None = None,
    *,
    build_backend: Callable[[BackendChoice], JudgeBackend] | None = None,
    settle_heap: bool = False,
) -> FastAPI:
    """The app for ``settings`` (default: the environment's) on ``engine`` (default: its URL);
    ``build_backend`` (default: the real backends) loads each judge (or generator) model,
    once. ``settle_heap``: the process serves this app alone (``rubricsvc serve``), so its
    start-up objects are frozen out of the garbage collector's sight (``rubricsvc.heap``)."""
    settings = settings or get_settings()
    load_plugins(settings.plugins)
    engine = engine or make_engine(settings.db.url)
    state = AppState(settings=settings, engine=engine, build_backend=build_backend)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Closed by default, checked when the server starts, so that a route a plugin added
        # after create_app() is seen too (the gate admits only admin keys to it till then).
        undeclared = undeclared_routes(app.routes)
        if undeclared:
            raise UndeclaredRoutes(undeclared)
        # After the server configured its logging: keys in access log lines are redacted.
        install_redaction()
        if settle_heap:
            heap.settle()
        yield
        state.close()

    app = FastAPI(
        title="rubricsvc",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.rubricsvc = state
    # FastAPI's own pages (the schema and the docs that read it) describe the API to anyone.
    for route in app.routes:
        mark_open(route, "the API's schema and its documentation pages")
    install_error_handlers(app)
    for module in (operations, prompts, rubrics, completions, jobs, rewards):
        app.include_router(module.router)
    install_ui(
        app, settings, engine, failures=state.failed_auth
    )  # the review pages under /ui/ (sessions, not keys per request)
    # A well-formed reward request is served without FastAPI's per-request layers, after the
    # gate admitted its key (rubricsvc.api.direct).
    app.add_middleware(
        DirectRoutes,
        routes=reward_routes(app),
        state=state,
        exception_handlers=app.exception_handlers,
    )
    # Outermost last: keys and rate limits are checked before the app receives a byte of the
    # body, declared sizes before that, and every refusal is counted.
    app.add_middleware(
        KeyGate,
        routes=app.router.routes,
        authenticate=state.authenticate,
        limiter=state.rate_limiter,
        kept=state.kept_key,
        failures=state.failed_auth,
    )
    app.add_middleware(BodySizeLimit, max_bytes=settings.api.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    return app


def create_served_app() -> FastAPI:
    """The app of one ``rubricsvc serve --workers N`` process (uvicorn's factory), whose
    connections are held to the limits of the same settings (``api.transport``)."""
    from rubricsvc.api.transport import apply_limits

    settings = get_settings()
    apply_limits(settings.api)
    return create_app(settings, settle_heap=True)
