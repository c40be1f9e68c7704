"""Which prompts to draft rubrics for: a prompts file, or prompts already in the database.

A prompts file (JSON Lines, JSON or YAML; one record, a list, or ``{prompts: [...]}``) holds
records in the rubric file's prompt format plus optional evidence documents::

    {"text": "How can I sleep better?", "external_id": "sleep-1",
     "reference_answer": "...", "evidence": ["A study of ...", "..."]}

Every record is validated before any prompt is stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import Field, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.errors import ValidationFailed
from rubricsvc.fileformats import describe_validation_error, read_items
from rubricsvc.models import Prompt
from rubricsvc.prompts import find_prompt
from rubricsvc.rubrics.generation import DraftRequest
from rubricsvc.rubrics.schemas import PromptSpec
from rubricsvc.rubrics.service import store_prompt_spec


class PromptRecord(PromptSpec):
    """A prompt to draft a rubric for, with the documents a good response may draw on."""

    evidence: list[str] = Field(default_factory=list)


def load_prompt_records(path: Path) -> list[PromptRecord]:
    """Every record of a prompts file, validated; one line naming the record if one is not."""
    records = []
    for location, data in read_items(path, "prompt", key="prompts"):
        try:
            records.append(PromptRecord.model_validate(data))
        except ValidationError as err:
            raise ValidationFailed(f"{location}: {describe_validation_error(err)}") from None
    return records


def requests_from_records(
    session: Session, records: Sequence[PromptRecord], evidence: Sequence[str] = ()
) -> list[DraftRequest]:
    """Store the records' prompts (known ones are found by content) and request a draft each."""
    requests = []
    for record in records:
        prompt, _ = store_prompt_spec(session, record)
        requests.append(DraftRequest(prompt.id, (*record.evidence, *evidence)))
    return requests


def requests_from_database(
    session: Session,
    external_ids: Sequence[str],
    all_prompts: bool = False,
    evidence: Sequence[str] = (),
) -> list[DraftRequest]:
    """A draft request for each named stored prompt, or for every stored prompt."""
    if all_prompts:
        ids = list(session.scalars(select(Prompt.id).order_by(Prompt.id)))
    else:
        ids = [find_prompt(session, external_id=external_id).id for external_id in external_ids]
    return [DraftRequest(prompt_id, tuple(evidence)) for prompt_id in dict.fromkeys(ids)]
