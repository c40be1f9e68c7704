"""``rubricsvc prompts add``: a prompts file (JSON Lines, JSON or YAML), one prompt a record::

    {"external_id": "pandalm/565", "text": "Write a creative ad for ...",
     "reference_answer": "...", "tags": {"scenario": "writing_advertisement"},
     "rubric": "autoj/writing_advertisement"}

``text`` or ``messages`` as in a rubric file's prompt; ``rubric`` (a name or a list) assigns
shared rubrics to the prompt, so all its completions are scored against them. A prompt
already stored (same messages) is unchanged, gains a reference answer, tags or an external
id it lacks, and is refused if the record contradicts one it has. Every record is checked
before anything is stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError, model_validator
from sqlalchemy.orm import Session

from rubricsvc.assignments import assign, assignable_rubric
from rubricsvc.errors import ConflictError, RubricsvcError, ValidationFailed
from rubricsvc.fileformats import describe_validation_error, read_items
from rubricsvc.models import Prompt, Rubric
from rubricsvc.prompts import near_duplicate_warnings, store_prompt
from rubricsvc.rubrics.schemas import PromptSpec


class PromptFileRecord(PromptSpec):
    rubric: str | list[str] | None = None

    @model_validator(mode="after")
    def _rubric_names(self) -> PromptFileRecord:
        for name in self.rubric_names():
            if not name.strip():
                raise ValueError("rubric: a rubric name must not be empty")
        return self

    def rubric_names(self) -> list[str]:
        if self.rubric is None:
            return []
        return [self.rubric] if isinstance(self.rubric, str) else list(self.rubric)


@dataclass
class PromptsAdded:
    added: int = 0
    unchanged: int = 0
    assigned: int = 0
    prompts: list[Prompt] = field(default_factory=list)  # every record's, in order
    warnings: list[str] = field(default_factory=list)


def load_prompt_file(path: Path) -> list[tuple[str, PromptFileRecord]]:
    records = []
    for location, data in read_items(path, "prompt", key="prompts"):
        try:
            records.append((location, PromptFileRecord.model_validate(data)))
        except ValidationError as err:
            raise ValidationFailed(f"{location}: {describe_validation_error(err)}") from None
    return records


def add_prompts(session: Session, records: list[tuple[str, PromptFileRecord]]) -> PromptsAdded:
    """Store the records' prompts and their rubric assignments (see the module docstring)."""
    result = PromptsAdded()
    rubrics: dict[str, Rubric] = {}
    created: list[tuple[str, Prompt]] = []
    for location, record in records:
        try:
            prompt, new = store_prompt(
                session,
                record.chat(),
                external_id=record.external_id,
                reference_answer=record.reference_answer,
                tags=record.tags,
            )
            if not new:
                _check_agrees(prompt, record)
            for name in record.rubric_names():
                if name not in rubrics:
                    rubrics[name] = assignable_rubric(session, name)
                result.assigned += assign(session, rubrics[name], prompt=prompt)
        except RubricsvcError as err:
            raise type(err)(f"{location}: {err}") from None
        result.added += new
        result.unchanged += not new
        result.prompts.append(prompt)
        if new:
            created.append((location, prompt))
    result.warnings = near_duplicate_warnings(session, created)
    return result


def _check_agrees(prompt: Prompt, record: PromptFileRecord) -> None:
    """A stored prompt gains what it lacks; a contradiction is refused, not a silent edit."""
    if record.reference_answer and prompt.reference_answer != record.reference_answer:
        raise ConflictError(
            f"prompt {prompt.id} is stored with a different reference answer (same messages)"
        )
    if record.tags:
        stored = dict(prompt.tags or {})
        clash = sorted(k for k, v in record.tags.items() if k in stored and stored[k] != v)
        if clash:
            raise ConflictError(
                f"prompt {prompt.id} is stored with a different value of tag {clash[0]!r}"
            )
        if any(k not in stored for k in record.tags):
            prompt.tags = {**stored, **record.tags}
