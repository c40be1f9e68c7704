"""``rubricsvc serve`` (the HTTP API) and ``rubricsvc keys ...`` (its API keys)."""

from __future__ import annotations

import os
import secrets

import typer

from rubricsvc.apikeys import Scope, create_key, list_keys, revoke_key
from rubricsvc.cli.context import (
    CliExit,
    console,
    db_session,
    engine,
    err_console,
    require_migrated,
)
from rubricsvc.cli.render import build_table
from rubricsvc.config import Settings, get_settings
from rubricsvc.db import display_url

SESSION_SECRET_VARIABLE = "RUBRICSVC_API_SESSION_SECRET"
# uvicorn kills and restarts a process that does not answer its supervisor's ping within this
# many seconds (its default: 5). A process loading or running a judge model on a busy machine
# can keep the interpreter that long, and would be killed mid-request.
WORKER_HEALTHCHECK_SECONDS = 120

keys_app = typer.Typer(help="API keys of the HTTP service.", no_args_is_help=True)


@keys_app.command("create")
def keys_create(
    name: str = typer.Argument(..., help="A name for the key (who or what uses it)."),
    scope: list[Scope] = typer.Option(
        ..., "--scope", help="read, author, review, score or admin (repeatable)."
    ),
) -> None:
    """Create a key and print its secret: it is shown this once, only its hash is stored."""
    with db_session() as session:
        created = create_key(session, name, [s.value for s in scope])
    err_console.print(
        f"API key {name!r} ({', '.join(created.key.scopes)}); keep the secret, it is not shown again:"
    )
    print(created.secret)


@keys_app.command("list")
def keys_list() -> None:
    """Keys with their scopes (never their secrets)."""
    with db_session() as session:
        keys = list_keys(session)
    rows = [
        [
            k.name,
            k.prefix + "...",
            ", ".join(k.scopes),
            f"{k.created_at:%Y-%m-%d %H:%M}" if k.created_at else "",
            "revoked" if k.revoked_at else "active",
        ]
        for k in keys
    ]
    headers = ["name", "key", "scopes", "created", "state"]
    console.print(
        build_table(f"{len(rows)} key(s)", headers, rows, flexible="scopes", width=console.width)
    )


@keys_app.command("revoke")
def keys_revoke(name: str = typer.Argument(..., help="The key's name.")) -> None:
    """Revoke a key: requests with it get 401 from then on (a running server may still admit
    it for RUBRICSVC_API_KEY_CACHE_SECONDS, 10 s by default)."""
    with db_session() as session:
        revoke_key(session, name)
    console.print(f"API key {name!r} revoked")


def serve_command(
    host: str | None = typer.Option(None, help="Address to listen on (RUBRICSVC_API_HOST)."),
    port: int | None = typer.Option(None, help="Port (RUBRICSVC_API_PORT)."),
    workers: int = typer.Option(
        1,
        min=1,
        help="Server processes sharing the port (about one per core): each loads its own "
        "judges and counts its own rate limits unless RUBRICSVC_API_RATE_LIMIT_URL is set.",
    ),
    log_level: str = typer.Option("info", help="uvicorn's log level."),
) -> None:
    """Run the HTTP API (uvicorn; judges load on first use and stay loaded in each process)."""
    try:
        import uvicorn

        from rubricsvc.api import create_app
    except ImportError as err:
        raise CliExit(f"{err.name} is not installed: pip install 'rubricsvc[api]'", 6) from None
    settings = get_settings()
    require_migrated(engine())
    host = host or settings.api.host
    port = port or settings.api.port
    processes = f", {workers} processes" if workers > 1 else ""
    err_console.print(
        f"rubricsvc API on http://{host}:{port}{processes} (docs at /docs), "
        f"database {display_url(settings.db.url)}"
    )
    if workers == 1:
        app = create_app(settings, engine(), settle_heap=True)
        uvicorn.run(app, host=host, port=port, log_level=log_level)
        return
    share_session_secret(settings)
    warn_of_local_rate_limits(settings, workers)
    # Each process builds its own app from the environment, which it inherits from this one.
    uvicorn.run(
        "rubricsvc.api.app:create_served_app",
        factory=True,
        workers=workers,
        host=host,
        port=port,
        log_level=log_level,
        timeout_worker_healthcheck=WORKER_HEALTHCHECK_SECONDS,
    )


def share_session_secret(settings: Settings) -> None:
    """Give every server process one secret to sign review sessions with: a session or CSRF
    token made by one process must be valid in the others. Without a configured secret, one
    is made here and passed down in the environment (sessions end when the server stops)."""
    if settings.api.session_secret is not None:
        return
    err_console.print(
        "review pages: no RUBRICSVC_API_SESSION_SECRET, so sessions end when the server "
        "restarts (set it to keep them)"
    )
    os.environ[SESSION_SECRET_VARIABLE] = secrets.token_urlsafe(32)


def warn_of_local_rate_limits(settings: Settings, workers: int) -> None:
    if settings.api.rate_limit_per_minute and not settings.api.rate_limit_url:
        err_console.print(
            f"rate limits are counted in each of the {workers} processes: a key may send up to "
            f"{workers} x {settings.api.rate_limit_per_minute} requests per minute "
            "(set RUBRICSVC_API_RATE_LIMIT_URL to count them once, in Redis)"
        )
