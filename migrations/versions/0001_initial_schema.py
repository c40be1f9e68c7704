"""Initial schema: prompts, rubrics and versions, criteria, completions, judging, scores.

Revision ID: 0001
Revises:
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from migrations.immutability import create_immutability_triggers, drop_immutability_triggers

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "judge_configs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("config_hash", sa.String(length=64), nullable=False),
        sa.Column("backend", sa.String(length=50), nullable=False),
        sa.Column("model", sa.String(length=300), nullable=False),
        sa.Column("revision", sa.String(length=100), nullable=True),
        sa.Column("template_hash", sa.String(length=64), nullable=True),
        sa.Column("verdict_mode", sa.String(length=50), nullable=False),
        sa.Column(
            "sampling",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "settings",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_judge_configs")),
        sa.UniqueConstraint("config_hash", name=op.f("uq_judge_configs_config_hash")),
        sa.UniqueConstraint("name", name=op.f("uq_judge_configs_name")),
    )
    op.create_table(
        "prompts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("external_id", sa.String(length=200), nullable=True),
        sa.Column(
            "messages",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("reference_answer", sa.Text(), nullable=True),
        sa.Column(
            "tags",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_prompts")),
        sa.UniqueConstraint("content_hash", name=op.f("uq_prompts_content_hash")),
        sa.UniqueConstraint("external_id", name=op.f("uq_prompts_external_id")),
    )
    op.create_table(
        "completions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("prompt_id", sa.Integer(), nullable=False),
        sa.Column("external_id", sa.String(length=200), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column(
            "messages",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("source", sa.String(length=200), nullable=True),
        sa.Column(
            "metadata",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["prompt_id"], ["prompts.id"], name=op.f("fk_completions_prompt_id_prompts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_completions")),
        sa.UniqueConstraint("external_id", name=op.f("uq_completions_external_id")),
    )
    with op.batch_alter_table("completions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_completions_content_hash"), ["content_hash"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_completions_prompt_id"), ["prompt_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_completions_source"), ["source"], unique=False)

    op.create_table(
        "rubrics",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("prompt_id", sa.Integer(), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["prompt_id"], ["prompts.id"], name=op.f("fk_rubrics_prompt_id_prompts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rubrics")),
        sa.UniqueConstraint("name", name=op.f("uq_rubrics_name")),
    )
    with op.batch_alter_table("rubrics", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_rubrics_prompt_id"), ["prompt_id"], unique=False)

    op.create_table(
        "score_jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "pending",
                "running",
                "done",
                "failed",
                "cancelled",
                name="job_status",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("judge_config_id", sa.Integer(), nullable=False),
        sa.Column("aggregation", sa.String(length=50), nullable=False),
        sa.Column(
            "params",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.Column("cached", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["judge_config_id"],
            ["judge_configs.id"],
            name=op.f("fk_score_jobs_judge_config_id_judge_configs"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_score_jobs")),
    )
    with op.batch_alter_table("score_jobs", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_score_jobs_judge_config_id"), ["judge_config_id"], unique=False
        )

    op.create_table(
        "rubric_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("rubric_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column(
            "dimension_weights",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column(
            "origin",
            sa.Enum(
                "human",
                "llm",
                "imported",
                name="origin",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column(
            "origin_detail",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column(
            "status",
            sa.Enum(
                "draft",
                "approved",
                "retired",
                name="version_status",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("reviewed_by", sa.String(length=200), nullable=True),
        sa.Column("reviewed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["parent_id"],
            ["rubric_versions.id"],
            name=op.f("fk_rubric_versions_parent_id_rubric_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["rubric_id"], ["rubrics.id"], name=op.f("fk_rubric_versions_rubric_id_rubrics")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rubric_versions")),
        sa.UniqueConstraint(
            "rubric_id", "number", name=op.f("uq_rubric_versions_rubric_id_number")
        ),
    )
    with op.batch_alter_table("rubric_versions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_rubric_versions_content_hash"), ["content_hash"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_rubric_versions_rubric_id"), ["rubric_id"], unique=False
        )

    op.create_table(
        "criteria",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("explanation", sa.Text(), nullable=True),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column(
            "category",
            sa.Enum(
                "essential",
                "important",
                "optional",
                "pitfall",
                name="category",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("theme", sa.String(length=100), nullable=True),
        sa.Column(
            "kind",
            sa.Enum(
                "judge",
                "check",
                name="criterion_kind",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column(
            "scale",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "check",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("required", sa.Boolean(), nullable=False),
        sa.Column(
            "tags",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["rubric_versions.id"],
            name=op.f("fk_criteria_version_id_rubric_versions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_criteria")),
        sa.UniqueConstraint("version_id", "position", name=op.f("uq_criteria_version_id_position")),
    )
    with op.batch_alter_table("criteria", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_criteria_content_hash"), ["content_hash"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_criteria_version_id"), ["version_id"], unique=False)

    op.create_table(
        "scores",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("completion_id", sa.Integer(), nullable=False),
        sa.Column("rubric_version_id", sa.Integer(), nullable=False),
        sa.Column("judge_config_id", sa.Integer(), nullable=False),
        sa.Column("aggregation", sa.String(length=50), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("coverage", sa.Float(), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "ok",
                "partial",
                "masked",
                name="score_status",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column(
            "details",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["completion_id"], ["completions.id"], name=op.f("fk_scores_completion_id_completions")
        ),
        sa.ForeignKeyConstraint(
            ["judge_config_id"],
            ["judge_configs.id"],
            name=op.f("fk_scores_judge_config_id_judge_configs"),
        ),
        sa.ForeignKeyConstraint(
            ["rubric_version_id"],
            ["rubric_versions.id"],
            name=op.f("fk_scores_rubric_version_id_rubric_versions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_scores")),
        sa.UniqueConstraint(
            "completion_id",
            "rubric_version_id",
            "judge_config_id",
            "aggregation",
            name=op.f("uq_scores_completion_id_rubric_version_id_judge_config_id_aggregation"),
        ),
    )
    with op.batch_alter_table("scores", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_scores_completion_id"), ["completion_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_scores_judge_config_id"), ["judge_config_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_scores_rubric_version_id"), ["rubric_version_id"], unique=False
        )

    op.create_table(
        "judgments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cache_key", sa.String(length=64), nullable=False),
        sa.Column("judge_config_id", sa.Integer(), nullable=False),
        sa.Column("completion_id", sa.Integer(), nullable=True),
        sa.Column("criterion_id", sa.Integer(), nullable=True),
        sa.Column(
            "status",
            sa.Enum(
                "ok",
                "failed",
                name="judgment_status",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("verdict", sa.String(length=100), nullable=True),
        sa.Column("reasoning", sa.Text(), nullable=True),
        sa.Column("raw_output", sa.Text(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column(
            "detail",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["completion_id"],
            ["completions.id"],
            name=op.f("fk_judgments_completion_id_completions"),
        ),
        sa.ForeignKeyConstraint(
            ["criterion_id"], ["criteria.id"], name=op.f("fk_judgments_criterion_id_criteria")
        ),
        sa.ForeignKeyConstraint(
            ["judge_config_id"],
            ["judge_configs.id"],
            name=op.f("fk_judgments_judge_config_id_judge_configs"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_judgments")),
        sa.UniqueConstraint("cache_key", name=op.f("uq_judgments_cache_key")),
    )
    with op.batch_alter_table("judgments", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_judgments_completion_id"), ["completion_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_judgments_criterion_id"), ["criterion_id"], unique=False
        )
        batch_op.create_index(
            batch_op.f("ix_judgments_judge_config_id"), ["judge_config_id"], unique=False
        )

    create_immutability_triggers(op.get_bind())


def downgrade() -> None:
    drop_immutability_triggers(op.get_bind())
    with op.batch_alter_table("judgments", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_judgments_judge_config_id"))
        batch_op.drop_index(batch_op.f("ix_judgments_criterion_id"))
        batch_op.drop_index(batch_op.f("ix_judgments_completion_id"))

    op.drop_table("judgments")
    with op.batch_alter_table("scores", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_scores_rubric_version_id"))
        batch_op.drop_index(batch_op.f("ix_scores_judge_config_id"))
        batch_op.drop_index(batch_op.f("ix_scores_completion_id"))

    op.drop_table("scores")
    with op.batch_alter_table("criteria", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_criteria_version_id"))
        batch_op.drop_index(batch_op.f("ix_criteria_content_hash"))

    op.drop_table("criteria")
    with op.batch_alter_table("rubric_versions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_rubric_versions_rubric_id"))
        batch_op.drop_index(batch_op.f("ix_rubric_versions_content_hash"))

    op.drop_table("rubric_versions")
    with op.batch_alter_table("score_jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_score_jobs_judge_config_id"))

    op.drop_table("score_jobs")
    with op.batch_alter_table("rubrics", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_rubrics_prompt_id"))

    op.drop_table("rubrics")
    with op.batch_alter_table("completions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_completions_source"))
        batch_op.drop_index(batch_op.f("ix_completions_prompt_id"))
        batch_op.drop_index(batch_op.f("ix_completions_content_hash"))

    op.drop_table("completions")
    op.drop_table("prompts")
    op.drop_table("judge_configs")
