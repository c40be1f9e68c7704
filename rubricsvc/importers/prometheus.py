"""Prometheus (prometheus-eval): score rubrics, and evaluation records graded against them.

A score rubric is ``{criteria, score1_description, ..., score5_description}``, the shape of
prometheus-eval's ``SCORE_RUBRIC_TEMPLATE`` fields; the Feedback Collection's ``orig_criteria``,
``orig_score1_description``, ... are read the same way. A file is JSON (one record or a list)
or JSON Lines.

``rubrics import --format prometheus`` reads the rubrics alone: each distinct one becomes a
shared rubric (no prompt) ``prometheus/<first words of its criteria>-<first 12 hex of its
content hash>`` with one criterion: text = ``criteria``, weight 1, an ordinal scale 1..5 whose
levels carry the descriptions. The Feedback Collection repeats a rubric for every graded
response; a repeat is stored once and counted in the import's notes.

``import prometheus`` reads evaluation records (an instruction, a response, optionally a
reference answer, the score rubric; a record id, the source's score and feedback when given):
the instruction becomes a prompt (external id ``prometheus/<id>``, its reference answer kept),
the rubric that prompt's rubric ``prometheus/<id>`` (the first record's id that carries it), and
the response a completion with external id ``prometheus/<id>``, metadata ``record_id``,
``imported_from``, ``source_score`` and ``source_feedback``: every score joins back to its record.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy.orm import Session

from rubricsvc.errors import ValidationFailed
from rubricsvc.fileformats import read_items
from rubricsvc.hashing import content_hash
from rubricsvc.importers.common import (
    ImportReport,
    RubricBatch,
    ensure_completion,
    ensure_prompt,
    located,
    parse,
    save_imported_rubric,
)
from rubricsvc.rubrics.schemas import PromptSpec, RubricSpec

LEVELS = range(1, 6)
FEEDBACK_COLLECTION_PREFIX = "orig_"


class _ScoreRubric(BaseModel):
    # Records carry more than the rubric (instruction, response, feedback): not read.
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    criteria: str = Field(min_length=1)
    score1_description: str = Field(min_length=1)
    score2_description: str = Field(min_length=1)
    score3_description: str = Field(min_length=1)
    score4_description: str = Field(min_length=1)
    score5_description: str = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _feedback_collection_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        names = ["criteria", *(f"score{n}_description" for n in LEVELS)]
        renamed = {
            name: data[FEEDBACK_COLLECTION_PREFIX + name]
            for name in names
            if name not in data and FEEDBACK_COLLECTION_PREFIX + name in data
        }
        return {**data, **renamed}

    def descriptions(self) -> list[str]:
        return [getattr(self, f"score{n}_description") for n in LEVELS]


def read_prometheus_rubrics(path: Path) -> RubricBatch:
    """One one-criterion rubric per distinct score rubric in the JSON or JSON Lines ``path``."""
    if path.suffix.lower() not in {".json", ".jsonl"}:
        raise ValidationFailed(f"{path}: expected a .json or .jsonl file of score rubrics")
    batch = RubricBatch(source="prometheus", path=str(path), specs=[])
    seen: set[str] = set()
    repeats = 0
    for location, data in read_items(path, "score rubric"):
        rubric = parse(_ScoreRubric, location, data)
        with located(location):
            spec = _rubric_spec(rubric, path)
        if spec.name in seen:
            repeats += 1
            continue
        seen.add(spec.name)
        batch.specs.append(spec)
    if repeats:
        batch.notes.append(f"{repeats} repeated score rubric(s) stored once")
    return batch


def _slug(text: str, words: int = 6) -> str:
    """The first ``words`` words of ``text``, lower case, joined by ``-`` (a readable name)."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower())[:words]) or "rubric"


def _rubric_spec(
    rubric: _ScoreRubric,
    path: Path,
    name: str | None = None,
    prompt: PromptSpec | None = None,
    detail: dict[str, Any] | None = None,
) -> RubricSpec:
    descriptions = rubric.descriptions()
    digest = content_hash({"criteria": rubric.criteria, "descriptions": descriptions})
    levels = [
        {"score": score, "description": text}
        for score, text in zip(LEVELS, descriptions, strict=True)
    ]
    return RubricSpec.model_validate(
        {
            "name": name or f"prometheus/{_slug(rubric.criteria)}-{digest[:12]}",
            "prompt": prompt.model_dump() if prompt is not None else None,
            "criteria": [
                {
                    "text": rubric.criteria,
                    "weight": 1,
                    "scale": {"type": "ordinal", "levels": levels},
                }
            ],
            "origin": "imported",
            "origin_detail": {"source": "prometheus", "path": str(path), **(detail or {})},
        }
    )


DEFAULT_SOURCE = "prometheus"
_ALIASES = {
    "instruction": "orig_instruction",
    "response": "orig_response",
    "reference_answer": "orig_reference_answer",
    "score": "orig_score",
    "feedback": "orig_feedback",
}


class _Evaluation(_ScoreRubric):
    """An evaluation record: an instruction, a response, the score rubric, and optionally a
    reference answer, the record's id and the source's own score and feedback."""

    id: str | int | None = None
    instruction: str = Field(min_length=1)
    response: str = Field(min_length=1)
    reference_answer: str | None = None
    score: int | float | str | None = None
    feedback: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _orig_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        renamed = {
            name: data[orig] for name, orig in _ALIASES.items() if name not in data and orig in data
        }
        return {**data, **renamed}

    def record_id(self, number: int, path: Path) -> str:
        """The record's own id, else ``<file stem>-<its number in the file, from 1>``."""
        return str(self.id) if self.id is not None else f"{path.stem}-{number}"


def import_prometheus(session: Session, path: Path, source: str | None = None) -> ImportReport:
    """Import an evaluation file (see the module docstring); the caller owns the transaction.
    Every record is read and checked before anything is stored."""
    if path.suffix.lower() not in {".json", ".jsonl"}:
        raise ValidationFailed(f"{path}: expected a .json or .jsonl file of evaluation records")
    records = [
        (location, parse(_Evaluation, location, data))
        for location, data in read_items(path, "record")
    ]
    report = ImportReport(source="prometheus", path=str(path))
    prompts: dict[str, tuple[str, PromptSpec]] = {}  # instruction -> (first record id, spec)
    rubric_names: dict[tuple[str, str], str] = {}  # (instruction, rubric hash) -> name
    seen_ids: dict[str, str] = {}
    for number, (location, record) in enumerate(records, start=1):
        with located(location):
            record_id = record.record_id(number, path)
            if record_id in seen_ids:
                raise ValidationFailed(f"record id {record_id!r} repeats {seen_ids[record_id]}")
            seen_ids[record_id] = location
            first_id, prompt_spec = prompts.setdefault(
                record.instruction,
                (
                    record_id,
                    PromptSpec(
                        text=record.instruction,
                        external_id=f"prometheus/{record_id}",
                        reference_answer=record.reference_answer or None,
                    ),
                ),
            )
            if (record.reference_answer or None) != prompt_spec.reference_answer:
                raise ValidationFailed(
                    f"its reference answer differs from that of record {first_id!r}, which has "
                    "the same instruction"
                )
            prompt = ensure_prompt(session, prompt_spec, report)
            if (prompt.reference_answer or None) != prompt_spec.reference_answer:
                raise ValidationFailed(
                    f"prompt {prompt.external_id or prompt.id} is stored with another reference "
                    "answer"
                )
            rubric_hash = content_hash([record.criteria, record.descriptions()])
            name = rubric_names.setdefault(
                (record.instruction, rubric_hash), f"prometheus/{record_id}"
            )
            spec = _rubric_spec(
                record, path, name=name, prompt=prompt_spec, detail={"record_id": name[11:]}
            )
            save_imported_rubric(session, spec, report)
            metadata: dict[str, Any] = {
                "record_id": record_id,
                "imported_from": location,
                "rubric": name,
            }
            if record.score is not None:
                metadata["source_score"] = record.score
            if record.feedback:
                metadata["source_feedback"] = record.feedback
            completion = {
                "text": record.response,
                "source": source or DEFAULT_SOURCE,
                "external_id": f"prometheus/{record_id}",
                "metadata": metadata,
            }
            ensure_completion(session, "response", prompt, completion, report)
    without = sum(1 for _, spec in prompts.values() if spec.reference_answer is None)
    if without:
        report.notes.append(f"{without} prompt(s) without a reference answer")
    return report
