"""``rubricsvc scores ...``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from sqlalchemy import ColumnElement, or_, select
from sqlalchemy.orm import Session, selectinload

from rubricsvc.cli.context import db_session, err_console
from rubricsvc.errors import NotFoundError
from rubricsvc.judging.failures import empty_counts
from rubricsvc.models import (
    Completion,
    CompletionDocument,
    Prompt,
    RubricVersion,
    Score,
)
from rubricsvc.rubrics.repository import get_rubric, resolve_version
from rubricsvc.scoring.judge_configs import latest_judge_config

scores_app = typer.Typer(help="Read and export stored scores.", no_args_is_help=True)


@scores_app.command("export")
def scores_export(
    judge: str = typer.Option(..., help="Judge config name."),
    aggregation: str = typer.Option(..., help="Aggregation name."),
    output_format: str = typer.Option("jsonl", "--format", help="Only jsonl for now."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write here instead of stdout."
    ),
    rubric: list[str] = typer.Option(
        [], help="Only scores under this rubric (NAME: any version; NAME@N: that version)."
    ),
    source: list[str] = typer.Option([], help="Only completions from this source."),
    prompt: list[str] = typer.Option(
        [], help="Only completions of the prompt with this external id."
    ),
    tag: list[str] = typer.Option(
        [], help="Only prompts tagged KEY=VALUE (a list-valued tag: VALUE among its items)."
    ),
    meta: list[str] = typer.Option(
        [], help="Only completions whose metadata has KEY=VALUE (compared as text)."
    ),
) -> None:
    """Write one line per scored completion: prompt id, completion id and external id, its
    source and metadata, rubric, score, coverage, status (a jury's score also its members'
    values, their spread and the confidence). Filters of one kind match any of their values,
    filters of different kinds all; a value that names nothing stored is an error."""
    if output_format != "jsonl":
        raise typer.BadParameter("only --format jsonl is supported", param_hint="--format")
    tags = [_key_value(item, "--tag") for item in tag]
    metas = [_key_value(item, "--meta") for item in meta]
    with db_session() as session:
        judge_id = _judge_id(session, judge)
        if judge_id is None:
            raise NotFoundError(f"no stored judge config named {judge!r}")
        query = (
            select(Score, Completion, Prompt, RubricVersion)
            .join(Completion, Score.completion_id == Completion.id)
            .join(Prompt, Completion.prompt_id == Prompt.id)
            .join(RubricVersion, Score.rubric_version_id == RubricVersion.id)
            .where(Score.judge_config_id == judge_id)
            .where(Score.aggregation == aggregation)
            .options(selectinload(Completion.documents).selectinload(CompletionDocument.document))
            .order_by(Score.completion_id, Score.rubric_version_id)
        )
        if rubric:
            query = query.where(_rubric_filter(session, rubric))
        if source:
            _known(session, Completion.source, source, "no completion has source")
            query = query.where(Completion.source.in_(source))
        if prompt:
            _known(session, Prompt.external_id, prompt, "no prompt with external id")
            query = query.where(Prompt.external_id.in_(prompt))
        if tags:
            _known_pairs(session, Prompt.tags, tags, "no prompt is tagged")
        if metas:
            _known_pairs(session, Completion.meta, metas, "no completion has metadata")
        rows = [
            row
            for row in session.execute(query).all()
            if (not tags or any(_has(row[2].tags, k, v) for k, v in tags))
            and (not metas or any(_has(row[1].meta, k, v) for k, v in metas))
        ]
        lines = [
            json.dumps(
                {
                    "prompt_external_id": prompt_row.external_id,
                    "completion_id": completion_row.id,
                    "completion_external_id": completion_row.external_id,
                    "source": completion_row.source,
                    "metadata": completion_row.meta or {},
                    **_evidence_fields(completion_row),
                    "rubric": version.ref,
                    "score": score_row.value,
                    "coverage": score_row.coverage,
                    "status": score_row.status.value,
                    "failures": {
                        **empty_counts(),
                        **(score_row.details or {}).get("failures", {}),
                    },
                    **_jury_fields(score_row.details or {}),
                },
                ensure_ascii=False,
            )
            for score_row, completion_row, prompt_row, version in rows
        ]
    text = "\n".join(lines) + ("\n" if lines else "")
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
        err_console.print(f"{len(lines)} score(s) written to {output}")


def _evidence_fields(completion: Completion) -> dict[str, Any]:
    """A completion's trajectory and documents (each by label, url, title and content hash),
    for the completions that carry them."""
    fields: dict[str, Any] = {}
    if completion.messages:
        fields["trajectory"] = completion.messages
    if completion.documents:
        fields["documents"] = [
            {
                "label": listed.label,
                "url": listed.document.url,
                "title": listed.document.title,
                "content_hash": listed.document.content_hash,
            }
            for listed in completion.documents
        ]
    return fields


def _key_value(item: str, option: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=option)
    return key.strip(), value.strip()


def _has(mapping: object, key: str, value: str) -> bool:
    """Whether ``mapping[key]`` is ``value`` (as text), or a list holding it."""
    if not isinstance(mapping, dict) or key not in mapping:
        return False
    found = mapping[key]
    items = found if isinstance(found, list) else [found]
    return any(_as_text(item) == value for item in items)


def _as_text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _rubric_filter(session: Session, refs: list[str]) -> ColumnElement[bool]:
    """Scores under these rubrics: NAME (every version) or NAME@N / a version id (that one)."""
    version_ids: list[int] = []
    rubric_ids: list[int] = []
    for ref in refs:
        if "@" in ref or ref.strip().isdigit():
            version_ids.append(resolve_version(session, ref).id)
            continue
        found = get_rubric(session, ref.strip())
        if found is None:
            raise NotFoundError(f"no rubric named {ref!r}")
        rubric_ids.append(found.id)
    return or_(RubricVersion.id.in_(version_ids), RubricVersion.rubric_id.in_(rubric_ids))


def _known(session: Session, column: Any, values: list[str], missing: str) -> None:
    """Every value is stored in ``column``, else a one-line error naming the first that is not."""
    stored = set(session.scalars(select(column).where(column.in_(values)).distinct()))
    for value in values:
        if value not in stored:
            raise NotFoundError(f"{missing} {value!r}")


def _known_pairs(session: Session, column: Any, pairs: list[tuple[str, str]], missing: str) -> None:
    """Every KEY=VALUE matches some stored row's JSON ``column``, else a one-line error."""
    left = set(pairs)
    for stored in session.scalars(select(column)):
        left = {(k, v) for k, v in left if not _has(stored, k, v)}
        if not left:
            return
    key, value = sorted(left)[0]
    raise NotFoundError(f"{missing} {key}={value}")


def _jury_fields(details: dict[str, object]) -> dict[str, object]:
    """A jury score's members, combination, spread and confidence (nothing for a judge's)."""
    if "members" not in details:
        return {}
    return {k: details.get(k) for k in ("members", "combine", "spread", "confidence")}


def _judge_id(session: Session, name: str) -> int | None:
    """The id of the config that answers to ``name`` (its newest), or None if none is stored."""
    row = latest_judge_config(session, name)
    return row.id if row is not None else None
