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
from rubricsvc.models import Completion, CompletionDocument, Document, Prompt
from rubricsvc.prompts import find_prompt
from rubricsvc.rubrics.generation import DraftRequest, EvidenceDocument
from rubricsvc.rubrics.schemas import PromptSpec
from rubricsvc.rubrics.versions import store_prompt_spec


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
    session: Session,
    records: Sequence[PromptRecord],
    evidence: Sequence[str] = (),
    stored_evidence: bool = False,
) -> list[DraftRequest]:
    """Store the records' prompts (known ones are found by content) and request a draft each;
    ``stored_evidence``: with the documents stored for each prompt (``stored_documents``)."""
    requests = []
    for record in records:
        prompt, _ = store_prompt_spec(session, record)
        stored = stored_documents(session, prompt.id) if stored_evidence else []
        requests.append(DraftRequest(prompt.id, (*record.evidence, *evidence, *stored)))
    return requests


def requests_from_database(
    session: Session,
    external_ids: Sequence[str],
    all_prompts: bool = False,
    evidence: Sequence[str] = (),
    stored_evidence: bool = False,
) -> list[DraftRequest]:
    """A draft request for each named stored prompt, or for every stored prompt (with the
    documents stored for it, when ``stored_evidence``)."""
    if all_prompts:
        ids = list(session.scalars(select(Prompt.id).order_by(Prompt.id)))
    else:
        ids = [find_prompt(session, external_id=external_id).id for external_id in external_ids]
    return [
        DraftRequest(
            prompt_id,
            (*evidence, *(stored_documents(session, prompt_id) if stored_evidence else ())),
        )
        for prompt_id in dict.fromkeys(ids)
    ]


# The stored documents a draft reads at most (the generator's context is finite).
MAX_STORED_EVIDENCE = 8


def stored_documents(session: Session, prompt_id: int) -> list[EvidenceDocument]:
    """The documents the prompt's completions list (search results for the prompt, say), each
    once, in the order they were first listed, at most ``MAX_STORED_EVIDENCE``."""
    rows = session.scalars(
        select(Document)
        .join(CompletionDocument, CompletionDocument.document_id == Document.id)
        .join(Completion, Completion.id == CompletionDocument.completion_id)
        .where(Completion.prompt_id == prompt_id)
        .order_by(Completion.id, CompletionDocument.position)
    )
    unique = {document.id: document for document in rows}
    return [
        EvidenceDocument(d.text, d.url, d.title)
        for d in list(unique.values())[:MAX_STORED_EVIDENCE]
    ]
