"""What every PostgreSQL session of rubricsvc's is given (``db.make_engine``): probes of a
client that went quiet, so that a host cut off inside a transaction does not keep its row
locks for hours (tests/integration/test_multihost.py cuts one), and statements planned with
their values. Only where nobody set them otherwise: a URL's own ``options``, the database's
or the server's settings win.

Each test reads who set each setting (``pg_settings.source``), and over TCP its value too:
on a Unix socket PostgreSQL shows 0 for every TCP setting, whoever set it."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from sqlalchemy import JSON, cast, literal, select, text
from sqlalchemy.engine import make_url

from rubricsvc import db


def _check(url: str, expected: dict[str, tuple[str, str]]) -> None:
    """Each setting's (value, source) in a new session of ``url`` is as ``expected``; its
    value only over TCP."""
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            over_tcp = conn.execute(text("SELECT inet_server_addr() IS NOT NULL")).scalar()
            found = {
                name: (
                    str(conn.execute(text(f"SHOW {name}")).scalar()),
                    conn.execute(
                        text("SELECT source FROM pg_settings WHERE name = :name"), {"name": name}
                    ).scalar(),
                )
                for name in expected
            }
    finally:
        engine.dispose()
    assert {name: source for name, (_, source) in found.items()} == {
        name: source for name, (_, source) in expected.items()
    }
    if over_tcp:
        assert found == expected


def test_every_session_probes_a_client_that_went_quiet(postgres_server: str) -> None:
    _check(
        postgres_server,
        {
            "tcp_keepalives_idle": ("4", "session"),
            "tcp_keepalives_interval": ("1", "session"),
            "tcp_keepalives_count": ("3", "session"),
            "tcp_user_timeout": ("10000", "session"),
        },
    )


def test_every_session_plans_statements_with_their_values(postgres_server: str) -> None:
    """A batched lookup's statement, prepared by psycopg, is planned with its values each
    time: a plan made once for any values cannot hash a long IN list."""
    _check(postgres_server, {"plan_cache_mode": ("force_custom_plan", "session")})


def test_a_urls_own_options_win(postgres_server: str) -> None:
    own = "-c tcp_keepalives_idle=9 -c statement_timeout=5000 -c plan_cache_mode=auto"
    url = make_url(postgres_server).update_query_dict({"options": own})
    _check(
        url.render_as_string(hide_password=False),
        {
            "tcp_keepalives_idle": ("9", "client"),
            "tcp_keepalives_interval": ("1", "session"),
            "tcp_keepalives_count": ("3", "session"),
            "statement_timeout": ("5s", "client"),
            "plan_cache_mode": ("auto", "client"),
        },
    )


def test_the_databases_own_settings_win(make_postgres_database: Callable[[], str]) -> None:
    url = make_postgres_database()
    name = make_url(url).database
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" SET tcp_keepalives_count = 7'))
            conn.commit()
    finally:
        engine.dispose()
    _check(
        url,
        {
            "tcp_keepalives_idle": ("4", "session"),
            "tcp_keepalives_interval": ("1", "session"),
            "tcp_keepalives_count": ("7", "database"),
        },
    )


def test_an_engine_writes_json_without_a_warning(
    postgres_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    """psycopg warns of a possible leak, once per engine, when the JSON encoder it is given is
    a closure: every worker's and server's log would carry it."""
    engine = db.make_engine(postgres_server)
    try:
        with caplog.at_level(logging.WARNING), engine.connect() as conn:
            value = conn.execute(
                select(cast(literal({"Yes": 0.9}, JSON), JSON)),
            ).scalar()
    finally:
        engine.dispose()
    assert value == {"Yes": 0.9}
    assert [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")] == []


def _client_parameters(url: str) -> dict[str, str]:
    """The connection parameters a new connection of ``url`` was made with (libpq's)."""
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            return dict(conn.connection.dbapi_connection.info.get_parameters())  # type: ignore[union-attr]
    finally:
        engine.dispose()


def test_every_connection_gives_up_on_a_server_that_stopped_answering(
    postgres_server: str,
) -> None:
    """The client's side: a connect bounded, and probes and a user timeout that end a session
    whose server went quiet (a worker host cut off from its data host), not TCP's limits."""
    found = _client_parameters(postgres_server)
    assert {name: found.get(name) for name in db.POSTGRES_CLIENT_TIMEOUTS} == (
        db.POSTGRES_CLIENT_TIMEOUTS
    )
    assert int(found["connect_timeout"]) > 0 and int(found["tcp_user_timeout"]) > 0


def test_a_urls_own_client_timeouts_win(postgres_server: str) -> None:
    own = {"connect_timeout": "60", "tcp_user_timeout": "0"}
    url = make_url(postgres_server).update_query_dict(own)
    found = _client_parameters(url.render_as_string(hide_password=False))
    assert (found["connect_timeout"], found["tcp_user_timeout"]) == ("60", "0")
    # the ones it does not name are still ours
    assert found["keepalives_idle"] == db.POSTGRES_CLIENT_TIMEOUTS["keepalives_idle"]
