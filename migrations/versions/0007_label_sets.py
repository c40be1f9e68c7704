"""Label sets, their labels and judge evaluations (``rubricsvc labels``, ``judges evaluate``);
a judgment may compare two completions (pairwise, group) and names the second one.

Revision ID: 0007
Revises: 0006
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision, down_revision = "0007", "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def _created_at() -> sa.Column:
    return sa.Column(
        "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
    )


def upgrade() -> None:
    op.create_table(
        "label_sets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("rubric_version_id", sa.Integer(), nullable=True),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        _created_at(),
        sa.ForeignKeyConstraint(
            ["rubric_version_id"],
            ["rubric_versions.id"],
            name=op.f("fk_label_sets_rubric_version_id_rubric_versions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_label_sets")),
        sa.UniqueConstraint("name", name=op.f("uq_label_sets_name")),
    )
    op.create_table(
        "labels",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("label_set_id", sa.Integer(), nullable=False),
        sa.Column(
            "kind",
            sa.Enum(
                "pointwise",
                "pairwise",
                "scalar",
                name="label_kind",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("item", sa.String(length=200), nullable=False),
        sa.Column("prompt_id", sa.Integer(), nullable=False),
        sa.Column("completion_id", sa.Integer(), nullable=False),
        sa.Column("other_completion_id", sa.Integer(), nullable=True),
        sa.Column("criterion_id", sa.Integer(), nullable=True),
        sa.Column("labeller", sa.String(length=200), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("verdict", sa.String(length=50), nullable=True),
        sa.Column("scale_min", sa.Float(), nullable=True),
        sa.Column("scale_max", sa.Float(), nullable=True),
        sa.Column("tags", JSON, nullable=False),
        sa.ForeignKeyConstraint(
            ["label_set_id"], ["label_sets.id"], name=op.f("fk_labels_label_set_id_label_sets")
        ),
        sa.ForeignKeyConstraint(
            ["prompt_id"], ["prompts.id"], name=op.f("fk_labels_prompt_id_prompts")
        ),
        sa.ForeignKeyConstraint(
            ["completion_id"], ["completions.id"], name=op.f("fk_labels_completion_id_completions")
        ),
        sa.ForeignKeyConstraint(
            ["other_completion_id"],
            ["completions.id"],
            name=op.f("fk_labels_other_completion_id_completions"),
        ),
        sa.ForeignKeyConstraint(
            ["criterion_id"], ["criteria.id"], name=op.f("fk_labels_criterion_id_criteria")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_labels")),
    )
    for column in ("label_set_id", "prompt_id", "completion_id"):
        op.create_index(op.f(f"ix_labels_{column}"), "labels", [column], unique=False)
    op.create_table(
        "judge_evaluations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("judge_config_id", sa.Integer(), nullable=False),
        sa.Column("label_set_id", sa.Integer(), nullable=False),
        sa.Column("label_set_hash", sa.String(length=64), nullable=False),
        sa.Column("n_labelled", sa.Integer(), nullable=False),
        sa.Column("n_judged", sa.Integer(), nullable=False),
        sa.Column("agreement", sa.Float(), nullable=True),
        sa.Column("report", JSON, nullable=False),
        _created_at(),
        sa.ForeignKeyConstraint(
            ["judge_config_id"],
            ["judge_configs.id"],
            name=op.f("fk_judge_evaluations_judge_config_id_judge_configs"),
        ),
        sa.ForeignKeyConstraint(
            ["label_set_id"],
            ["label_sets.id"],
            name=op.f("fk_judge_evaluations_label_set_id_label_sets"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_judge_evaluations")),
    )
    for column in ("judge_config_id", "label_set_id"):
        op.create_index(
            op.f(f"ix_judge_evaluations_{column}"), "judge_evaluations", [column], unique=False
        )
    with op.batch_alter_table("judgments") as batch:
        batch.add_column(sa.Column("other_completion_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_judgments_other_completion_id_completions"),
            "completions",
            ["other_completion_id"],
            ["id"],
        )


def downgrade() -> None:
    with op.batch_alter_table("judgments") as batch:
        batch.drop_constraint(
            op.f("fk_judgments_other_completion_id_completions"), type_="foreignkey"
        )
        batch.drop_column("other_completion_id")
    for column in ("judge_config_id", "label_set_id"):
        op.drop_index(op.f(f"ix_judge_evaluations_{column}"), table_name="judge_evaluations")
    op.drop_table("judge_evaluations")
    for column in ("label_set_id", "prompt_id", "completion_id"):
        op.drop_index(op.f(f"ix_labels_{column}"), table_name="labels")
    op.drop_table("labels")
    op.drop_table("label_sets")
