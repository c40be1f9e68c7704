"""Alembic environment: one code path for SQLite and PostgreSQL."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from rubricsvc.config import get_settings
from rubricsvc.db import make_engine
from rubricsvc.models import Base

config = context.config
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _database_url() -> str:
    return (
        context.get_x_argument(as_dictionary=True).get("url")
        or config.get_main_option("sqlalchemy.url")
        or get_settings().db.url
    )


def run_migrations_offline() -> None:
    context.configure(
        url=_database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:  # a caller that already holds a connection
        _run_with(connection)
        return
    engine = make_engine(_database_url())
    try:
        with engine.connect() as conn:
            _run_with(conn)
    finally:
        # Closing every pooled connection lets SQLite fold its WAL back into the file.
        engine.dispose()


def _run_with(connection: Connection) -> None:
    # Batch mode lets ALTER-style migrations run on SQLite (copy-and-move). Moving a table that
    # other tables refer to needs SQLite's foreign-key enforcement off while it runs (it is a
    # no-op inside a transaction, so before it); every reference is checked before the commit.
    sqlite = connection.dialect.name == "sqlite" and not connection.in_transaction()
    if sqlite:
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        connection.commit()  # end the transaction SQLAlchemy began, so Alembic's is its own
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    try:
        with context.begin_transaction():
            context.run_migrations()
            if sqlite:
                _check_foreign_keys(connection)
    finally:
        if sqlite:
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")
            connection.commit()


def _check_foreign_keys(connection: Connection) -> None:
    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        table, row, parent, _ = broken[0]
        raise RuntimeError(
            f"migration left {len(broken)} broken reference(s), e.g. {table} row {row} -> {parent}"
        )


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
