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

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.batching import batches
from rubricsvc.errors import NotFoundError
from rubricsvc.importers.common import ImportReport, located, read_jsonl
from rubricsvc.importers.labelled import LabelImport
from rubricsvc.importers.lines import Line, PairLine, PointwiseLine, ScalarLine, parse_line
from rubricsvc.models import Completion, Criterion, LabelKind, Prompt, RubricVersion
from rubricsvc.rubrics.repository import resolve_version
from rubricsvc.validation.labelsets import (
    MET,
    NOT_MET,
    PAIRWISE_VALUES,
    LabelInput,
    save_label_set,
)


class _Labelled(Line):
    labeller: str = Field(default="unknown", min_length=1, max_length=200)
    tags: list[str] = Field(default_factory=list)


class _Pointwise(PointwiseLine, _Labelled):
    pass


class _Pairwise(PairLine, _Labelled):
    label: Literal["first", "second", "tie"]


class _Scalar(ScalarLine, _Labelled):
    pass


MODELS: dict[str, type[_Labelled]] = {
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
    resolver = Resolver(session, [line for _, line in lines])
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


def _parse_line(location: str, data: Any) -> _Labelled:
    return parse_line(MODELS, location, data)


class Resolver:
    """Stored rows by the names a label or verdict file uses, each looked up once: the
    completions every line names, at once."""

    def __init__(self, session: Session, lines: Iterable[Line]) -> None:
        self.session = session
        self.completions: dict[str, Completion] = {}
        external_ids = {name for line in lines for name in line.completions()}
        for batch in batches(sorted(external_ids)):
            query = select(Completion).where(Completion.external_id.in_(batch))
            self.completions.update((c.external_id or "", c) for c in session.scalars(query))
        self.versions: dict[str, RubricVersion] = {}

    def label(self, location: str, line: _Labelled) -> LabelInput:
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
