"""A judge name may have several configs: a new one each time rubricsvc changes what the same
settings make the judge see (a new neutralizing step, say), the newest answering to the name.

Revision ID: 0006
Revises: 0005
"""

from collections.abc import Sequence

from alembic import op

from migrations.immutability import create_immutability_triggers, drop_immutability_triggers

revision, down_revision = "0006", "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    bind = op.get_bind()
    # SQLite rebuilds the table to drop a constraint, which drops its trigger too.
    drop_immutability_triggers(bind)
    with op.batch_alter_table("judge_configs") as batch:
        batch.drop_constraint("uq_judge_configs_name", type_="unique")
        batch.create_index("ix_judge_configs_name", ["name"], unique=False)
    create_immutability_triggers(bind)


def downgrade() -> None:
    bind = op.get_bind()
    drop_immutability_triggers(bind)
    # Fails while a name has several configs: keep the newest ones' data before going back.
    with op.batch_alter_table("judge_configs") as batch:
        batch.drop_index("ix_judge_configs_name")
        batch.create_unique_constraint("uq_judge_configs_name", ["name"])
    create_immutability_triggers(bind)
