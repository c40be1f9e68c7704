"""Completions: the JSON Lines ingestion format and its service.

One record per line::

    {"prompt_external_id": "sleep-1", "text": "Keep a regular schedule...", "source": "policy-a",
     "external_id": "sleep-1/a", "metadata": {"step": 10}}

The prompt is named by ``prompt_external_id``, ``prompt_id`` or given in full as
``prompt`` (text) / ``prompt_messages``; a new prompt given in full is created.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.errors import RubricsvcError, ValidationFailed
from rubricsvc.fileformats import describe_validation_error, read_items
from rubricsvc.hashing import content_hash
from rubricsvc.models import Completion, Prompt
from rubricsvc.prompts import find_prompt, get_or_create_prompt
from rubricsvc.rubrics.schemas import Message


class CompletionRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_id: int | None = None
    prompt_external_id: str | None = None
    prompt: str | None = Field(default=None, min_length=1)
    prompt_messages: list[Message] | None = None
    text: str
    messages: list[Message] | None = None
    external_id: str | None = Field(default=None, min_length=1, max_length=200)
    source: str | None = Field(default=None, max_length=200)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_prompt_reference(self) -> CompletionRecord:
        given = [
            name
            for name in ("prompt_id", "prompt_external_id", "prompt", "prompt_messages")
            if getattr(self, name) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of prompt_id, prompt_external_id, prompt, prompt_messages"
                + (f" (got {', '.join(given)})" if given else "")
            )
        return self


@dataclass(frozen=True)
class IngestResult:
    added: int
    unchanged: int


def load_completion_file(path: Path) -> list[tuple[str, CompletionRecord]]:
    records = []
    for location, data in read_items(path, "completion"):
        try:
            records.append((location, CompletionRecord.model_validate(data)))
        except ValidationError as err:
            raise ValidationFailed(f"{location}: {describe_validation_error(err)}") from None
    return records


def _resolve_prompt(session: Session, record: CompletionRecord) -> Prompt:
    if record.prompt_id is not None:
        return find_prompt(session, prompt_id=record.prompt_id)
    if record.prompt_external_id is not None:
        return find_prompt(session, external_id=record.prompt_external_id)
    messages = (
        [m.model_dump() for m in record.prompt_messages]
        if record.prompt_messages
        else [{"role": "user", "content": record.prompt}]
    )
    return get_or_create_prompt(session, messages)


def add_completions(session: Session, records: list[tuple[str, CompletionRecord]]) -> IngestResult:
    """Store the records; one with a known ``external_id`` is skipped if identical, refused if not."""
    added = 0
    for location, record in records:
        added += store_completion(session, location, record)[1]
    return IngestResult(added=added, unchanged=len(records) - added)


def store_completion(
    session: Session, location: str, record: CompletionRecord
) -> tuple[Completion, bool]:
    """The completion of ``record``, stored if new, and whether it was (see ``add_completions``)."""
    try:
        prompt = _resolve_prompt(session, record)
    except RubricsvcError as err:
        raise type(err)(f"{location}: {err}") from None
    digest = content_hash(record.text)
    if record.external_id is not None:
        existing = session.scalar(
            select(Completion).where(Completion.external_id == record.external_id)
        )
        if existing is not None:
            if existing.content_hash != digest or existing.prompt_id != prompt.id:
                raise ValidationFailed(
                    f"{location}: completion {record.external_id!r} is already stored "
                    "with a different prompt or text"
                )
            return existing, False
    completion = Completion(
        prompt_id=prompt.id,
        external_id=record.external_id,
        text=record.text,
        messages=[m.model_dump() for m in record.messages] if record.messages else None,
        content_hash=digest,
        source=record.source,
        meta=record.metadata,
    )
    session.add(completion)
    session.flush()
    return completion, True
