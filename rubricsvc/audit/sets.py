"""The items an audit attacks: the bundled demo set, or stored rubrics with two honest answers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc import demo
from rubricsvc.audit.runner import AuditCriterion, AuditItem
from rubricsvc.errors import NotFoundError, ValidationFailed
from rubricsvc.judging.modes import CriterionView
from rubricsvc.models import Completion, CriterionKind
from rubricsvc.rubrics.files import load_rubric_files
from rubricsvc.rubrics.repository import resolve_version

DEMO_SET = "demo"
DEMO_WEAK, DEMO_STRONG = "demo-weak", "demo-strong"


def demo_items() -> list[AuditItem]:
    """The demo's three prompts, rubrics, and weak and strong answers (package data)."""
    specs = load_rubric_files([demo.RUBRICS])
    answers: dict[tuple[str, str], str] = {}
    for line in demo.COMPLETIONS.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            answers[(record["prompt_external_id"], record["source"])] = record["text"]
    items = []
    for position, spec in enumerate(specs):
        prompt = spec.prompt
        assert prompt is not None  # every demo rubric is a per-prompt rubric
        prompt_id = prompt.external_id or ""
        criteria = [
            AuditCriterion(
                CriterionView(
                    position * 1000 + number,
                    c.text,
                    c.explanation,
                    c.weight,
                    c.scale.model_dump(),
                    c.theme,
                ),
                c.check.model_dump() if c.check is not None else None,
                c.required,
            )
            for number, c in enumerate(spec.criteria)
        ]
        items.append(
            AuditItem(
                name=spec.name,
                messages=prompt.chat(),
                criteria=criteria,
                weak=answers[(prompt_id, DEMO_WEAK)],
                strong=answers[(prompt_id, DEMO_STRONG)],
                reference=prompt.reference_answer,
                dimension_weights=spec.dimension_weights,
            )
        )
    return items


def stored_items(
    session: Session, refs: Sequence[str], weak_source: str, strong_source: str
) -> list[AuditItem]:
    """Rubric versions from the database, each with its prompt's first completion from
    ``weak_source`` and from ``strong_source`` as the honest answers."""
    items = []
    for ref in refs:
        version = resolve_version(session, ref)
        prompt = version.rubric.prompt
        if prompt is None:
            raise ValidationFailed(f"{version.ref} is a shared rubric: audit a per-prompt one")
        honest = {}
        for source in (weak_source, strong_source):
            completion = session.scalars(
                select(Completion)
                .where(Completion.prompt_id == prompt.id, Completion.source == source)
                .order_by(Completion.id)
                .limit(1)
            ).first()
            if completion is None:
                raise NotFoundError(
                    f"{version.ref}: the prompt has no completion from source {source!r} "
                    "(--weak-source and --strong-source name the honest answers)"
                )
            honest[source] = completion.text
        items.append(
            AuditItem(
                name=version.ref,
                messages=list(prompt.messages),
                criteria=[_criterion(c) for c in version.criteria],
                weak=honest[weak_source],
                strong=honest[strong_source],
                reference=prompt.reference_answer,
                dimension_weights=version.dimension_weights,
            )
        )
    return items


def _criterion(criterion: Any) -> AuditCriterion:
    check = criterion.check if criterion.kind == CriterionKind.CHECK else None
    return AuditCriterion(CriterionView.of(criterion), check, criterion.required)
