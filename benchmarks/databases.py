"""Throwaway PostgreSQL databases for the benchmarks that measure on a database of their own."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from rubricsvc.db import upgrade


def create_database(admin: Engine, prefix: str = "rubricsvc_bench") -> str:
    """A new PostgreSQL database (``prefix`` and a random suffix), migrated with Alembic; its
    URL. ``admin`` is an autocommit engine on the server."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin.url).set(database=name).render_as_string(hide_password=False)
    upgrade(url)
    return url


def drop_databases(admin: Engine, urls: Iterable[str]) -> None:
    with admin.connect() as conn:
        for url in urls:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))
