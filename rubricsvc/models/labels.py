"""Labelled data a judge is measured against, and the evaluations made with it."""

from __future__ import annotations

import enum
from typing import Any

from sqlalchemy import Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from rubricsvc.models.base import HASH_LENGTH, Base, CreatedAtMixin, JSONType, str_enum
from rubricsvc.models.judging import JudgeConfig


class LabelKind(enum.StrEnum):
    POINTWISE = "pointwise"  # completion x criterion -> met / not met (1 / 0), or a value
    PAIRWISE = "pairwise"  # two completions of one prompt -> first / second / tie (1 / 0 / 0.5)
    SCALAR = "scalar"  # completion -> a score on the label's scale (scale_min..scale_max)


class LabelSet(CreatedAtMixin, Base):
    """A named set of labels from one source; never edited (an import into an existing name
    adds nothing new or is refused), so its content hash names what an evaluation used."""

    __tablename__ = "label_sets"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    source: Mapped[str | None] = mapped_column(Text)  # where the labels come from, as given
    description: Mapped[str | None] = mapped_column(Text)
    # The rubric version pairwise and scalar labels are judged under (None: each prompt's own).
    rubric_version_id: Mapped[int | None] = mapped_column(ForeignKey("rubric_versions.id"))
    content_hash: Mapped[str] = mapped_column(String(HASH_LENGTH))
    labels: Mapped[list[Label]] = relationship(
        back_populates="label_set", order_by="Label.id", cascade="all, delete-orphan"
    )


class Label(Base):
    """One labeller's label on one item; an item's several labellers are several rows."""

    __tablename__ = "labels"

    id: Mapped[int] = mapped_column(primary_key=True)
    label_set_id: Mapped[int] = mapped_column(ForeignKey("label_sets.id"), index=True)
    kind: Mapped[LabelKind] = mapped_column(str_enum(LabelKind, "label_kind"))
    # The item's name in its source (a record id), so results join back to it.
    item: Mapped[str] = mapped_column(String(200))
    prompt_id: Mapped[int] = mapped_column(ForeignKey("prompts.id"), index=True)
    completion_id: Mapped[int] = mapped_column(ForeignKey("completions.id"), index=True)
    other_completion_id: Mapped[int | None] = mapped_column(ForeignKey("completions.id"))
    criterion_id: Mapped[int | None] = mapped_column(ForeignKey("criteria.id"))
    labeller: Mapped[str] = mapped_column(String(200))
    value: Mapped[float] = mapped_column(Float)
    verdict: Mapped[str | None] = mapped_column(String(50))
    scale_min: Mapped[float | None] = mapped_column(Float)
    scale_max: Mapped[float | None] = mapped_column(Float)
    tags: Mapped[list[str]] = mapped_column(JSONType, default=list)

    label_set: Mapped[LabelSet] = relationship(back_populates="labels")


class JudgeEvaluation(CreatedAtMixin, Base):
    """How one judge config agreed with one label set (``rubricsvc judges evaluate``)."""

    __tablename__ = "judge_evaluations"

    id: Mapped[int] = mapped_column(primary_key=True)
    judge_config_id: Mapped[int] = mapped_column(ForeignKey("judge_configs.id"), index=True)
    label_set_id: Mapped[int] = mapped_column(ForeignKey("label_sets.id"), index=True)
    label_set_hash: Mapped[str] = mapped_column(String(HASH_LENGTH))
    n_labelled: Mapped[int] = mapped_column(Integer)
    n_judged: Mapped[int] = mapped_column(Integer)
    agreement: Mapped[float | None] = mapped_column(Float)
    report: Mapped[dict[str, Any]] = mapped_column(JSONType)

    judge_config: Mapped[JudgeConfig] = relationship()
    label_set: Mapped[LabelSet] = relationship()
