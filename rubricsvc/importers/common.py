"""What the importers share: located errors, the policy for refused items, counted writes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session

from rubricsvc.completions import CompletionRecord, store_completion
from rubricsvc.errors import RubricsvcError, ValidationFailed
from rubricsvc.fileformats import describe_validation_error, read_records
from rubricsvc.models import Completion, Prompt, RubricVersion
from rubricsvc.rubrics.schemas import CriterionSpec, PromptSpec, RubricSpec, normalized_text
from rubricsvc.rubrics.versions import save_rubric, store_prompt_spec

Record = TypeVar("Record", bound=BaseModel)


@dataclass
class Tally:
    """Rows written by an import, and rows it found already stored."""

    added: int = 0
    unchanged: int = 0

    def count(self, added: bool) -> None:
        if added:
            self.added += 1
        else:
            self.unchanged += 1


@dataclass
class ImportReport:
    """What one import did, for the CLI to print."""

    source: str
    path: str
    prompts: Tally = field(default_factory=Tally)
    rubrics: Counter[str] = field(default_factory=Counter)  # save outcome -> rubrics
    criteria: int = 0
    completions: Tally = field(default_factory=Tally)
    judgments: Tally = field(default_factory=Tally)
    scores: int = 0
    scores_checked: int = 0  # scores the source also states
    scores_matching: int = 0  # of those, equal to the source's value within SCORE_TOLERANCE
    backend_requests: int = 0
    notes: list[str] = field(default_factory=list)


@contextmanager
def located(location: str) -> Iterator[None]:
    """Prefix errors raised inside with ``location`` (file:line), keeping them one line."""
    try:
        yield
    except ValidationError as err:
        raise ValidationFailed(f"{location}: {describe_validation_error(err)}") from None
    except RubricsvcError as err:
        raise type(err)(f"{location}: {err}") from None


def read_jsonl(path: Path) -> list[tuple[str, Any]]:
    """The records of a JSON Lines file, each with its ``file:line`` location."""
    if path.suffix.lower() != ".jsonl":
        raise ValidationFailed(f"{path}: expected a .jsonl file")
    return read_records(path)


def parse(model: type[Record], location: str, data: Any) -> Record:
    """``data``, a JSON object, validated as ``model``; or one line naming the location and
    the field."""
    if not isinstance(data, dict):
        raise ValidationFailed(f"{location}: expected a JSON object, got {type(data).__name__}")
    with located(location):
        return model.model_validate(data)


@dataclass(frozen=True)
class SourceItem:
    """One rubric item as the source gives it; ``number`` counts from 1 in the source's order."""

    number: int
    text: str
    weight: float
    explanation: str | None = None
    theme: str | None = None
    tags: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # source fields a criterion has no room for


@dataclass
class CriteriaPlan:
    """The criteria to store, the source item behind each, and what went to ``origin_detail``."""

    criteria: list[CriterionSpec] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    detail: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def plan_criteria(items: Sequence[SourceItem]) -> CriteriaPlan:
    """Criteria for ``items``: repeats renamed, zero weights and extra fields kept aside."""
    plan = CriteriaPlan()
    first: dict[str, int] = {}  # text, normalized by the schema's own rule -> its first item
    repeats: Counter[str] = Counter()
    for item in items:
        if item.extra:
            plan.detail.setdefault("extra_fields", []).append({"item": item.number, **item.extra})
        if item.weight == 0:
            # A zero weight changes no score and the schema refuses it: kept, not a criterion.
            plan.detail.setdefault("zero_weight_items", []).append(_described(item))
            continue
        key = normalized_text(item.text)
        text = item.text
        if key in first:
            # The schema refuses repeated texts, but sources count each repeat in their scores.
            repeats[key] += 1
            text = f"{item.text} [repeat {repeats[key]} of item {first[key]}]"
            plan.detail.setdefault("repeated_items", []).append(
                {"item": item.number, "repeats_item": first[key]}
            )
        else:
            first[key] = item.number
        plan.criteria.append(_criterion(item, text))
        plan.numbers.append(item.number)
    return plan


def _described(item: SourceItem) -> dict[str, Any]:
    return {
        "item": item.number,
        "text": item.text,
        "weight": item.weight,
        "explanation": item.explanation,
        "theme": item.theme,
        "tags": item.tags,
    }


def _criterion(item: SourceItem, text: str) -> CriterionSpec:
    try:
        return CriterionSpec(
            text=text,
            explanation=item.explanation,
            weight=item.weight,
            theme=item.theme,
            tags=item.tags,
        )
    except ValidationError as err:
        raise ValidationFailed(
            f"rubric item {item.number}: {describe_validation_error(err)}"
        ) from None


def ensure_prompt(session: Session, spec: PromptSpec, report: ImportReport) -> Prompt:
    """The prompt of ``spec``, created if new, counted either way."""
    prompt, created = store_prompt_spec(session, spec)
    report.prompts.count(added=created)
    return prompt


def save_imported_rubric(session: Session, spec: RubricSpec, report: ImportReport) -> RubricVersion:
    """Save ``spec`` (a no-op for known content), counting the outcome and the criteria."""
    result = save_rubric(session, spec)
    report.rubrics[result.outcome] += 1
    report.criteria += len(spec.criteria)
    return result.version


def ensure_completion(
    session: Session, label: str, prompt: Prompt, record: dict[str, Any], report: ImportReport
) -> Completion:
    """The completion described by ``record`` (the completions format, with an external id)."""
    validated = CompletionRecord.model_validate({"prompt_id": prompt.id, **record})
    # The completions service refuses a known external id with other content; the caller
    # already names the file and line, so its errors only say which part of the record.
    completion, added = store_completion(session, label, validated)
    report.completions.count(added=added)
    return completion


@dataclass
class RubricBatch:
    """Rubrics read from one source (no completions, no verdicts), all validated before saving."""

    source: str
    path: str
    specs: list[RubricSpec]
    notes: list[str] = field(default_factory=list)


def save_rubric_batch(session: Session, batch: RubricBatch) -> ImportReport:
    """Save every rubric of ``batch`` (known content is a no-op), counting prompts and outcomes."""
    report = ImportReport(source=batch.source, path=batch.path, notes=list(batch.notes))
    for spec in batch.specs:
        with located(f"rubric {spec.name!r}"):
            if spec.prompt is not None:
                ensure_prompt(session, spec.prompt, report)
            save_imported_rubric(session, spec, report)
    return report
