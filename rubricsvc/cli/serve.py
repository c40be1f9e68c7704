"""``rubricsvc serve``: the HTTP API."""

from __future__ import annotations

import os
import secrets
from typing import Any

import typer

from rubricsvc.cli.context import CliExit, engine, err_console, require_migrated
from rubricsvc.config import Settings, get_settings
from rubricsvc.db import display_url

SESSION_SECRET_VARIABLE = "RUBRICSVC_API_SESSION_SECRET"
# uvicorn kills and restarts a process that does not answer its supervisor's ping within this
# many seconds (its default: 5). A process loading or running a judge model on a busy machine
# can keep the interpreter that long, and would be killed mid-request.
WORKER_HEALTHCHECK_SECONDS = 120
# Headers on every response the server writes (its own errors too), added by uvicorn with
# the date: a browser must take a JSON answer or a page as the type it says it is.
RESPONSE_HEADERS = [("X-Content-Type-Options", "nosniff")]


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
        from rubricsvc.api.transport import apply_limits, connection_cap
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
    options = server_options(settings, host=host, port=port, log_level=log_level)
    cap, open_files = connection_cap(settings.api.max_connections)
    if cap < settings.api.max_connections:
        err_console.print(
            f"connections: at most {cap} per process, not {settings.api.max_connections} "
            f"(RUBRICSVC_API_MAX_CONNECTIONS): the open-file limit is {open_files} "
            "(raise it: ulimit -n, systemd's LimitNOFILE)"
        )
    if workers == 1:
        apply_limits(settings.api)
        app = create_app(settings, engine(), settle_heap=True)
        uvicorn.run(app, **options)
        return
    share_session_secret(settings)
    warn_of_local_rate_limits(settings, workers)
    # Each process builds its own app and applies its connection limits (``create_served_app``)
    # from the environment, which it inherits from this one.
    uvicorn.run(
        "rubricsvc.api.app:create_served_app",
        factory=True,
        workers=workers,
        timeout_worker_healthcheck=WORKER_HEALTHCHECK_SECONDS,
        **options,
    )


def server_options(settings: Settings, *, host: str, port: int, log_level: str) -> dict[str, Any]:
    """uvicorn's options for ``settings``, the same for one process and for several.

    The protocol (``JoinedWritesProtocol``) holds each connection to the time-outs and the cap
    of open connections of ``settings.api`` (``apply_limits``, in each process); uvicorn's are the
    keep-alive time-out and the listening socket's backlog. uvicorn's ``limit_concurrency`` is
    left unset: it answers 503 only once a request's headers are in (the connection already
    holds its descriptor), and counts the connection asking, so at its cap every request on
    every open connection is refused; the protocol's cap refuses the connection itself."""
    from rubricsvc.api.transport import JoinedWritesProtocol

    return {
        "host": host,
        "port": port,
        "log_level": log_level,
        # uvicorn makes each request's access log line (the client's address, the path
        # quoted) before its logger drops it; below info the line is never written, so it
        # is not made.
        "access_log": log_level in {"trace", "debug", "info"},
        "http": JoinedWritesProtocol,
        "timeout_keep_alive": settings.api.keep_alive_timeout,
        "backlog": settings.api.backlog,
        "headers": RESPONSE_HEADERS,
    }


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
