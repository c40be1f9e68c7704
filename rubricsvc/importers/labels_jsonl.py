"""The project's own label format: JSON Lines, one label per line, on stored items.

Every line has ``kind`` (pointwise, pairwise or scalar), and may have ``item`` (the labelled
item's name; default: the line number, so several labellers of one item name it), ``labeller``
(default ``unknown``) and ``tags`` (a list of strings). Then, by kind::

    {"kind": "pointwise", "completion": "c-1", "rubric": "sleep@2", "criterion": 1, "met": true}
    {"kind": "pointwise", "completion": "c-2", "rubric": "sleep", "criterion": "Mentions caffeine",
     "value": 0.5, "labeller": "ann", "item": "c-2/caffeine"}
    {"kind": "pairwise", "first": "c-1", "second": "c-2", "label": "first"}
    {"kind": "scalar", "completion": "c-1", "score": 4, "scale": [1, 5]}

Completions are named by external id; a rubric by ``NAME@N`` or ``NAME`` (its newest
version); a criterion by its position in that version (from 1) or its exact text. Every label is
read, resolved and validated before anything is stored; the first bad one fails the import with
one line ``FILE:LINE: ...``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.batching import batches
from rubricsvc.errors import NotFoundError, ValidationFailed
from rubricsvc.importers.common import ImportReport, located, parse, read_jsonl
from rubricsvc.importers.labelled import LabelImport
from rubricsvc.models import Completion, Criterion, LabelKind, Prompt, RubricVersion
from rubricsvc.rubrics.repository import resolve_version
from rubricsvc.validation.labelsets import (
    MET,
    NOT_MET,
    PAIRWISE_VALUES,
    LabelInput,
    save_label_set,
)


class _Common(BaseModel):
    # Strict: a number is not read from a string, nor a flag from a number.
    model_config = ConfigDict(extra="forbid", strict=True)

    kind: str
    item: str | int | None = None
    labeller: str = Field(default="unknown", min_length=1, max_length=200)
    tags: list[str] = Field(default_factory=list)


class _Pointwise(_Common):
    completion: str = Field(min_length=1)
    rubric: str = Field(min_length=1)
    criterion: int | str
    met: bool | None = None
    value: float | None = None

    @model_validator(mode="after")
    def _met_or_value(self) -> _Pointwise:
        if (self.met is None) == (self.value is None):
            raise ValueError("give exactly one of 'met' (true/false) or 'value' (0 to 1)")
        return self


class _Pairwise(_Common):
    first: str = Field(min_length=1)
    second: str = Field(min_length=1)
    label: Literal["first", "second", "tie"]


class _Scalar(_Common):
    completion: str = Field(min_length=1)
    score: float
    scale: list[float] = Field(min_length=2, max_length=2)


MODELS: dict[str, type[_Common]] = {
    LabelKind.POINTWISE.value: _Pointwise,
    LabelKind.PAIRWISE.value: _Pairwise,
    LabelKind.SCALAR.value: _Scalar,
}


def import_labels_jsonl(
    session: Session, path: Path, name: str | None = None, rubric: str | None = None
) -> LabelImport:
    """Store the labels of ``path`` as the label set ``name`` (default: the file's stem), judged
    under the rubric version ``rubric`` (optional); the caller owns the transaction."""
    lines = [(location, _parse_line(location, data)) for location, data in read_jsonl(path)]
    version = resolve_version(session, rubric) if rubric is not None else None
    resolver = Resolver(session, _external_ids(lines))
    labels = []
    for location, line in lines:
        with located(location):
            labels.append(resolver.label(location, line))
    report = ImportReport(source="jsonl", path=str(path))
    saved = save_label_set(
        session,
        name or path.stem,
        str(path),
        None,
        labels,
        rubric_version_id=version.id if version is not None else None,
    )
    return LabelImport(report=report, label_set=saved)


def _parse_line(location: str, data: Any) -> _Common:
    if not isinstance(data, dict):
        raise ValidationFailed(f"{location}: expected a JSON object, got {type(data).__name__}")
    kind = data.get("kind")
    model = MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise ValidationFailed(
            f"{location}: kind: expected one of {', '.join(MODELS)}, got {kind!r}"
        )
    return parse(model, location, data)


def _external_ids(lines: list[tuple[str, _Common]]) -> set[str]:
    names: set[str] = set()
    for _, line in lines:
        if isinstance(line, _Pairwise):
            names |= {line.first, line.second}
        elif isinstance(line, _Pointwise | _Scalar):
            names.add(line.completion)
    return names


class Resolver:
    """Stored rows by the names a label file uses, each looked up once."""

    def __init__(self, session: Session, external_ids: set[str]) -> None:
        self.session = session
        self.completions: dict[str, Completion] = {}
        for batch in batches(sorted(external_ids)):
            query = select(Completion).where(Completion.external_id.in_(batch))
            self.completions.update((c.external_id or "", c) for c in session.scalars(query))
        self.versions: dict[str, RubricVersion] = {}

    def label(self, location: str, line: _Common) -> LabelInput:
        number = location.rsplit(":", 1)[-1]
        common: dict[str, Any] = {
            "item": str(line.item) if line.item is not None else number,
            "labeller": line.labeller,
            "tags": tuple(line.tags),
            "location": location,
        }
        if isinstance(line, _Pairwise):
            first, second = self.completion(line.first), self.completion(line.second)
            return LabelInput(
                kind=LabelKind.PAIRWISE,
                prompt=self.prompt(first),
                completion=first,
                other_completion=second,
                value=PAIRWISE_VALUES[line.label],
                verdict=line.label,
                **common,
            )
        if isinstance(line, _Scalar):
            completion = self.completion(line.completion)
            low, high = line.scale
            return LabelInput(
                kind=LabelKind.SCALAR,
                prompt=self.prompt(completion),
                completion=completion,
                value=line.score,
                scale_min=low,
                scale_max=high,
                **common,
            )
        assert isinstance(line, _Pointwise)
        completion = self.completion(line.completion)
        if line.met is not None:
            value, verdict = (1.0, MET) if line.met else (0.0, NOT_MET)
        else:
            value, verdict = float(line.value or 0.0), None
        return LabelInput(
            kind=LabelKind.POINTWISE,
            prompt=self.prompt(completion),
            completion=completion,
            criterion=self.criterion(line.rubric, line.criterion),
            value=value,
            verdict=verdict,
            **common,
        )

    def completion(self, external_id: str) -> Completion:
        found = self.completions.get(external_id)
        if found is None:
            raise NotFoundError(f"no stored completion with external id {external_id!r}")
        return found

    def prompt(self, completion: Completion) -> Prompt:
        prompt = self.session.get(Prompt, completion.prompt_id)
        assert prompt is not None  # a foreign key
        return prompt

    def criterion(self, ref: str, criterion: int | str) -> Criterion:
        if ref not in self.versions:
            self.versions[ref] = resolve_version(self.session, ref)
        version = self.versions[ref]
        name = f"{version.rubric.name}@{version.number}"
        criteria = version.criteria
        if isinstance(criterion, int):
            if not 1 <= criterion <= len(criteria):
                raise NotFoundError(
                    f"rubric {name} has no criterion {criterion} (it has {len(criteria)}, "
                    "numbered from 1)"
                )
            return criteria[criterion - 1]
        for candidate in criteria:
            if candidate.text == criterion.strip():
                return candidate
        raise NotFoundError(f"rubric {name} has no criterion with the text {criterion!r}")
