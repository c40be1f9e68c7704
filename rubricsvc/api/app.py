"""The FastAPI application: routers, one error shape, body limits, metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy import Engine

from rubricsvc import __version__
from rubricsvc.api.errors import install_error_handlers
from rubricsvc.api.limits import BodySizeLimit
from rubricsvc.api.metrics import MetricsMiddleware
from rubricsvc.api.routes import completions, jobs, prompts, rewards, rubrics, service
from rubricsvc.api.state import AppState
from rubricsvc.config import Settings, get_settings
from rubricsvc.db import make_engine

DESCRIPTION = """Rubrics, completions, score jobs and rewards.

Every route but `/healthz` needs an API key (`rubricsvc keys create NAME --scope ...`) sent as
`Authorization: Bearer <key>`. Scopes: `read` (every GET), `author` (write prompts, rubrics,
completions), `score` (submit score jobs, rewards), `admin` (everything). Errors have one shape:
`{"error": {"status", "code", "message", "field"}}`.
"""


def create_app(settings: Settings | None = None, engine: Engine | None = None) -> FastAPI:
    """The app for ``settings`` (default: the environment's) on ``engine`` (default: its URL)."""
    settings = settings or get_settings()
    engine = engine or make_engine(settings.db.url)
    state = AppState(settings=settings, engine=engine)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        state.close()

    app = FastAPI(
        title="rubricsvc",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.rubricsvc = state
    install_error_handlers(app)
    for module in (service, prompts, rubrics, completions, jobs, rewards):
        app.include_router(module.router)
    # Outermost last: sizes are checked before anything else, and refusals are counted.
    app.add_middleware(BodySizeLimit, max_bytes=settings.api.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    return app
