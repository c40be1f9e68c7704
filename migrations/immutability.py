"""Database triggers that freeze saved rubric content, for both SQLite and PostgreSQL.

The ORM already refuses such edits (``rubricsvc.db``); the triggers also stop raw SQL
and any other client. Only the lifecycle columns of a version (status, reviewed_by,
reviewed_at) may change, and nothing of a saved version may be deleted.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Connection

MESSAGE = "saved rubric content is immutable: save an edit as a new version"

# Every column of rubric_versions except the lifecycle ones.
FROZEN_VERSION_COLUMNS = (
    "id, rubric_id, number, parent_id, content_hash, title, dimension_weights, origin, origin_detail, "
    "note, created_at"
)

_SQLITE_TRIGGERS = {
    "trg_criteria_no_update": f"BEFORE UPDATE ON criteria BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END",
    "trg_criteria_no_delete": f"BEFORE DELETE ON criteria BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END",
    "trg_rubric_versions_no_update": (
        f"BEFORE UPDATE OF {FROZEN_VERSION_COLUMNS} ON rubric_versions "
        f"BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"
    ),
    "trg_rubric_versions_no_delete": (
        f"BEFORE DELETE ON rubric_versions BEGIN SELECT RAISE(ABORT, '{MESSAGE}'); END"
    ),
    "trg_judge_configs_no_update": (
        "BEFORE UPDATE ON judge_configs "
        "BEGIN SELECT RAISE(ABORT, 'judge configs are immutable: create a new one'); END"
    ),
}

# Sent as ``text()``: SQLAlchemy escapes the ``%`` for the driver's placeholder style, if that
# style gives ``%`` a meaning (psycopg's ``%s``), and leaves it alone if not (``$1``).
_PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION rubricsvc_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '{MESSAGE} (table %)', TG_TABLE_NAME USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql
"""

_PG_TRIGGERS = {
    "trg_criteria_no_change": "BEFORE UPDATE OR DELETE ON criteria",
    "trg_rubric_versions_no_update": f"BEFORE UPDATE OF {FROZEN_VERSION_COLUMNS} ON rubric_versions",
    "trg_rubric_versions_no_delete": "BEFORE DELETE ON rubric_versions",
    "trg_judge_configs_no_update": "BEFORE UPDATE ON judge_configs",
}


def _table_of(spec: str) -> str:
    return spec.split(" ON ")[1].split()[0]


def create_immutability_triggers(conn: Connection) -> None:
    if conn.dialect.name == "sqlite":
        for name, body in _SQLITE_TRIGGERS.items():
            conn.exec_driver_sql(f"CREATE TRIGGER {name} {body}")
    elif conn.dialect.name == "postgresql":
        conn.execute(text(_PG_FUNCTION))
        for name, spec in _PG_TRIGGERS.items():
            conn.exec_driver_sql(
                f"CREATE TRIGGER {name} {spec} FOR EACH ROW EXECUTE FUNCTION rubricsvc_refuse_change()"
            )


def drop_immutability_triggers(conn: Connection) -> None:
    if conn.dialect.name == "sqlite":
        for name in _SQLITE_TRIGGERS:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
    elif conn.dialect.name == "postgresql":
        for name, spec in _PG_TRIGGERS.items():
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name} ON {_table_of(spec)}")
        conn.exec_driver_sql("DROP FUNCTION IF EXISTS rubricsvc_refuse_change()")
