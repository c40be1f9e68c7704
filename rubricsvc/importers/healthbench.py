"""HealthBench judged data (a ``judge_responses.jsonl`` of m42-health/healthbench) imported whole.

A record holds ``prompt`` (chat messages), ``prompt_id``, ``rubrics`` [{criterion, points,
tags}], ``prompt_response`` (the graded completion), ``responses`` (a Python-repr string with one
{response_dict{explanation, criteria_met}, points, tags} per rubric item, in the same order) and
``score`` = points met / positive points, not clipped. Each record becomes:

- a prompt, external id ``prompt_id`` (else ``healthbench/<first 12 hex of its content hash>``),
  tagged with ``example_tags``; ``ideal_completions_data.ideal_completion`` is its reference answer;
- a rubric ``healthbench/<that id>`` (origin imported, a draft) with one criterion per item, in
  order: weight = points, category pitfall when negative, else important (HealthBench grades
  importance by points, not by category), theme = the item's ``axis:`` tag, tags kept;
- a completion (source ``healthbench-graded``, or the record's ``model``), external id
  ``healthbench/<id>/<source>``, its metadata holding the source's score and location;
- one judgment per criterion by the judge config ``imported`` (value 1 or 0, verdict yes or no,
  reasoning = the grader's explanation), keyed as the scorer keys them; then scores
  with the ``healthbench`` aggregation, all read from those judgments.

Items the rubric schema refuses are kept, never dropped (see ``common.plan_criteria``):
- a repeated criterion text (one sample record repeats three items verbatim) becomes its own
  criterion named ``<text> [repeat N of item M]``, with its own verdict: HealthBench counts
  both in the score, and so do we;
- a 0-point item (it changes no score) is listed in the version's
  ``origin_detail.zero_weight_items`` and its verdict in the completion's metadata;
- a rubric without a positive item has no HealthBench score and is refused with its location.
Not imported: ``metrics`` (recomputed from the verdicts), ``canary``, and the group and reference
completions of ``ideal_completions_data``. The files do not name the grader model: ``unknown``.

``read_healthbench_rubrics`` reads the rubrics alone with the same mapping (``rubricsvc rubrics
import --format healthbench``), so either import recognises the other's rubric versions.

``import_healthbench_labels`` (``rubricsvc labels import healthbench``) imports the same way,
then stores the grader's verdicts as the pointwise label set ``healthbench-grader``.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator
from sqlalchemy.orm import Session

from rubricsvc.importers.common import (
    CriteriaPlan,
    ImportReport,
    RubricBatch,
    SourceItem,
    ensure_completion,
    ensure_prompt,
    located,
    parse,
    plan_criteria,
    read_jsonl,
    save_imported_rubric,
)
from rubricsvc.importers.labelled import LabelImport
from rubricsvc.importers.verdicts import (
    IMPORTED_JUDGE,
    score_from_verdicts,
    store_verdicts,
    verdict_row,
)
from rubricsvc.models import Completion, JudgeConfig, LabelKind, Prompt, RubricVersion
from rubricsvc.prompts import prompt_hash
from rubricsvc.rubrics.schemas import Message, PromptSpec, RubricSpec
from rubricsvc.scoring.judge_configs import ensure_judge_config
from rubricsvc.validation.labelsets import MET, NOT_MET, LabelInput, save_label_set

FILE_NAME = "judge_responses.jsonl"
DEFAULT_SOURCE = "healthbench-graded"
LABEL_SET = "healthbench-grader"  # the grader's verdicts as a label set (labels import healthbench)
LABELLER = "healthbench-grader"


class _Item(BaseModel):
    model_config = ConfigDict(extra="forbid")

    criterion: str = Field(min_length=1)
    points: float
    tags: list[str] = Field(default_factory=list)


class _Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    criteria_met: StrictBool
    explanation: str | None = None


class _Judged(BaseModel):
    response_dict: _Verdict
    points: float | None = None
    tags: list[str] | None = None


class _Turn(BaseModel):
    # Unlike a prompt message, the graded text is kept byte for byte: it is what was judged.
    role: str
    content: str


class _Ideal(BaseModel):
    ideal_completion: str | None = None


class _Rubric(BaseModel):
    """The rubric part of a record (all that ``rubrics import --format healthbench`` reads)."""

    prompt: list[Message] = Field(min_length=1)
    prompt_id: str | None = Field(default=None, min_length=1, max_length=150)
    rubrics: list[_Item] = Field(min_length=1)
    example_tags: list[str] = Field(default_factory=list)
    ideal_completions_data: _Ideal | None = None


class _Record(_Rubric):
    prompt_response: list[_Turn] | str
    responses: list[_Judged]
    score: float | None = None
    model: str | None = Field(default=None, min_length=1, max_length=150)

    @field_validator("responses", mode="before")
    @classmethod
    def _python_literal(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ValueError("not a Python literal (expected a list of verdicts)") from None

    @field_validator("prompt_response")
    @classmethod
    def _has_turn(cls, value: list[_Turn] | str) -> list[_Turn] | str:
        if isinstance(value, list) and not value:
            raise ValueError("the graded response holds no message")
        return value

    @model_validator(mode="after")
    def _verdicts_match_items(self) -> _Record:
        if len(self.responses) != len(self.rubrics):
            raise ValueError(
                f"responses holds {len(self.responses)} verdicts for {len(self.rubrics)} rubric items"
            )
        for number, (item, judged) in enumerate(
            zip(self.rubrics, self.responses, strict=True), start=1
        ):
            points_differ = judged.points is not None and judged.points != item.points
            if points_differ or (judged.tags is not None and judged.tags != item.tags):
                raise ValueError(f"verdict {number} does not match rubric item {number}")
        return self


@dataclass
class _Imported:
    completion_id: int
    source_score: float | None
    judgments: list[dict[str, Any]]
    prompt: Prompt
    completion: Completion
    version: RubricVersion
    location: str


def import_healthbench(session: Session, path: Path, source: str | None = None) -> ImportReport:
    """Import a judge_responses.jsonl (or its folder); the caller owns the transaction."""
    return _import_file(session, path, source)[0]


def _import_file(
    session: Session, path: Path, source: str | None
) -> tuple[ImportReport, list[_Imported]]:
    file = path / FILE_NAME if path.is_dir() else path
    records = [(location, parse(_Record, location, data)) for location, data in read_jsonl(file)]
    report = ImportReport(source="healthbench", path=str(file))
    judge = ensure_judge_config(session, IMPORTED_JUDGE)
    imported = []
    for location, record in records:
        with located(location):
            imported.append(_import_record(session, judge, file, location, record, source, report))
    store_verdicts(session, [row for item in imported for row in item.judgments], report)
    stated = {item.completion_id: item.source_score for item in imported}
    score_from_verdicts(session, stated, "healthbench", report)
    return report, imported


def import_healthbench_labels(
    session: Session, path: Path, source: str | None = None, name: str = LABEL_SET
) -> LabelImport:
    """``import_healthbench``, then the grader's verdicts as the pointwise label set ``name``
    (labeller ``healthbench-grader``): one label per (completion, criterion), exactly the
    verdicts stored as the judge ``imported``'s judgments, so any judge can be measured
    against the grader. Item: ``<completion external id>#<criterion number, from 1>``; tags:
    the criterion's tags. The caller owns the transaction."""
    report, imported = _import_file(session, path, source)
    labels = []
    for item in imported:
        criteria = {criterion.id: criterion for criterion in item.version.criteria}
        for row in item.judgments:
            criterion = criteria[row["criterion_id"]]
            met = row["value"] == 1.0
            labels.append(
                LabelInput(
                    kind=LabelKind.POINTWISE,
                    item=f"{item.completion.external_id}#{criterion.position + 1}",
                    prompt=item.prompt,
                    completion=item.completion,
                    criterion=criterion,
                    labeller=LABELLER,
                    value=row["value"],
                    verdict=MET if met else NOT_MET,
                    tags=tuple(criterion.tags),
                    location=item.location,
                )
            )
    description = (
        "HealthBench grader verdicts (criteria_met per rubric item), as imported for the judge "
        "'imported'"
    )
    saved = save_label_set(session, name, report.path, description, labels)
    return LabelImport(report=report, label_set=saved)


def read_healthbench_rubrics(path: Path) -> RubricBatch:
    """The rubrics of a judge_responses.jsonl (or its folder), without responses or verdicts."""
    file = path / FILE_NAME if path.is_dir() else path
    batch = RubricBatch(source="healthbench", path=str(file), specs=[])
    for location, data in read_jsonl(file):
        record = parse(_Rubric, location, data)
        with located(location):
            spec, _ = _rubric_spec(record, file, location, batch.notes)
        batch.specs.append(spec)
    return batch


def _rubric_spec(
    record: _Rubric, file: Path, location: str, notes: list[str]
) -> tuple[RubricSpec, CriteriaPlan]:
    """The rubric of one record, and the plan that maps its criteria to the source's items."""
    plan = plan_criteria([_source_item(n, item) for n, item in enumerate(record.rubrics, start=1)])
    if plan.detail.get("repeated_items"):
        notes.append(f"{location}: repeated rubric items renamed (see origin_detail)")
    spec = RubricSpec(
        name=f"healthbench/{_bare_id(record)}",
        prompt=_prompt_spec(record),
        criteria=plan.criteria,
        origin="imported",
        origin_detail={"source": "healthbench", "path": str(file), **plan.detail},
    )
    return spec, plan


def _import_record(
    session: Session,
    judge: JudgeConfig,
    file: Path,
    location: str,
    record: _Record,
    source: str | None,
    report: ImportReport,
) -> _Imported:
    spec, plan = _rubric_spec(record, file, location, report.notes)
    assert spec.prompt is not None  # a HealthBench rubric always belongs to its conversation
    prompt = ensure_prompt(session, spec.prompt, report)
    version = save_imported_rubric(session, spec, report)
    completion_record = _completion_record(record, spec, plan, location, source)
    completion = ensure_completion(session, "prompt_response", prompt, completion_record, report)
    rows = _judgment_rows(judge, prompt, completion, version, record, plan)
    return _Imported(completion.id, record.score, rows, prompt, completion, version, location)


def _bare_id(record: _Rubric) -> str:
    """The record's prompt id, else the first 12 hex of its prompt's content hash."""
    return record.prompt_id or prompt_hash([m.model_dump() for m in record.prompt])[:12]


def _prompt_spec(record: _Rubric) -> PromptSpec:
    ideal = (
        record.ideal_completions_data.ideal_completion if record.ideal_completions_data else None
    )
    return PromptSpec(
        messages=record.prompt,
        external_id=record.prompt_id or f"healthbench/{_bare_id(record)}",
        reference_answer=ideal,
        tags={"example_tags": record.example_tags} if record.example_tags else {},
    )


def _source_item(number: int, item: _Item) -> SourceItem:
    axes = [tag.removeprefix("axis:") for tag in item.tags if tag.startswith("axis:")]
    return SourceItem(
        number=number,
        text=item.criterion,
        weight=item.points,
        theme=axes[0] if len(axes) == 1 else None,
        tags=item.tags,
    )


def _completion_record(
    record: _Record, spec: RubricSpec, plan: CriteriaPlan, location: str, source: str | None
) -> dict[str, Any]:
    turns = record.prompt_response
    source = source or record.model or DEFAULT_SOURCE
    metadata: dict[str, Any] = {"imported_from": location, "source_score": record.score}
    zero = {item["item"] for item in plan.detail.get("zero_weight_items", [])}
    if zero:
        metadata["zero_weight_verdicts"] = [
            {"item": number, **record.responses[number - 1].response_dict.model_dump()}
            for number in sorted(zero)
        ]
    return {
        "text": turns if isinstance(turns, str) else turns[-1].content,
        # A response of several turns keeps them all; its text is the last one.
        "messages": [t.model_dump() for t in turns]
        if isinstance(turns, list) and len(turns) > 1
        else None,
        "source": source,
        "external_id": f"{spec.name}/{source}",
        "metadata": metadata,
    }


def _judgment_rows(
    judge: JudgeConfig,
    prompt: Prompt,
    completion: Completion,
    version: RubricVersion,
    record: _Record,
    plan: CriteriaPlan,
) -> list[dict[str, Any]]:
    rows = []
    for criterion, number in zip(version.criteria, plan.numbers, strict=True):
        verdict = record.responses[number - 1].response_dict
        rows.append(
            verdict_row(
                judge,
                (prompt, completion, criterion),
                met=verdict.criteria_met,
                reasoning=verdict.explanation,
                raw_output=json.dumps(verdict.model_dump(), ensure_ascii=False),
            )
        )
    return rows
