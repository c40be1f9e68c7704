"""What every PostgreSQL session of rubricsvc's is given (``db.make_engine``): probes of a
client that went quiet, so that a host cut off inside a transaction does not keep its row
locks for hours (tests/integration/test_multihost.py cuts one). Only where nobody set them
otherwise: a URL's own ``options``, the database's or the server's settings win."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import text
from sqlalchemy.engine import make_url

from rubricsvc import db

PROBES = ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count")


def _show(url: str, names: tuple[str, ...]) -> list[str]:
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            return [str(conn.execute(text(f"SHOW {name}")).scalar()) for name in names]
    finally:
        engine.dispose()


def test_every_session_probes_a_client_that_went_quiet(postgres_server: str) -> None:
    assert _show(postgres_server, (*PROBES, "tcp_user_timeout")) == ["4", "1", "3", "10000"]


def test_a_urls_own_options_win(postgres_server: str) -> None:
    own = "-c tcp_keepalives_idle=9 -c statement_timeout=5000"
    url = make_url(postgres_server).update_query_dict({"options": own})
    shown = _show(url.render_as_string(hide_password=False), (*PROBES, "statement_timeout"))
    assert shown == ["9", "1", "3", "5s"]


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
    assert _show(url, PROBES) == ["4", "1", "7"]
