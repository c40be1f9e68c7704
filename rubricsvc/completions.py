"""Completions: the JSON Lines ingestion format and its service.

One record per line::

    {"prompt_external_id": "sleep-1", "text": "Keep a regular schedule...", "source": "policy-a",
     "external_id": "sleep-1/a", "metadata": {"step": 10}}

The prompt is named by ``prompt_external_id``, ``prompt_id`` or given in full as
``prompt`` (text) / ``prompt_messages``; a new prompt given in full is created (with
``prompt_external_id`` as its id when both are given). Records of one prompt (pairs, groups)
are completions of that one prompt. ``rubric`` (a name or a list) assigns shared rubrics to
the completion (``rubricsvc.assignments``). An agent's completion may carry its
``trajectory``: the OpenAI-style messages (assistant turns with ``tool_calls``, ``tool``
results, the final answer) that trajectory criteria and checks read (``messages`` is its older
name).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.assignments import CompletionAssignment, assign_to_completions, assignable_rubric
from rubricsvc.batching import batches
from rubricsvc.completion_rows import insert_completions
from rubricsvc.documents import (
    DocumentRecord,
    attach_documents,
    labelled,
    listed_documents,
    resolve_documents,
)
from rubricsvc.errors import NotFoundError, RubricsvcError, ValidationFailed
from rubricsvc.fileformats import describe_validation_error, read_items
from rubricsvc.hashing import content_hash
from rubricsvc.models import Completion, CompletionDocument, Document, Prompt, Rubric
from rubricsvc.prompts import find_prompt, near_duplicate_warnings, prompt_hash, store_prompt
from rubricsvc.rubrics.schemas import Message, TrajectoryMessage


class CompletionRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_id: int | None = None
    prompt_external_id: str | None = None
    prompt: str | None = Field(default=None, min_length=1)
    prompt_messages: list[Message] | None = None
    text: str
    # The turns that led to the answer (tool calls, tool results); ``messages``: its older name.
    trajectory: list[TrajectoryMessage] | None = Field(default=None, min_length=1)
    messages: list[TrajectoryMessage] | None = Field(default=None, min_length=1)
    external_id: str | None = Field(default=None, min_length=1, max_length=200)
    source: str | None = Field(default=None, max_length=200)
    metadata: dict[str, Any] = Field(default_factory=dict)
    # The evidence it used (search results, cited pages): ``rubricsvc.documents``.
    documents: list[DocumentRecord] | None = None
    # Shared rubrics this completion is scored against (names; besides its prompt's own).
    rubric: str | list[str] | None = None

    @model_validator(mode="after")
    def _one_prompt_reference(self) -> CompletionRecord:
        given = [
            name
            for name in ("prompt_id", "prompt_external_id", "prompt", "prompt_messages")
            if getattr(self, name) is not None
        ]
        # The prompt's id may come with its text: the first record creates it, the rest find it.
        with_id = {"prompt_external_id", "prompt"} == set(given) or {
            "prompt_external_id",
            "prompt_messages",
        } == set(given)
        if len(given) != 1 and not with_id:
            raise ValueError(
                "give exactly one of prompt_id, prompt_external_id, prompt, prompt_messages "
                "(prompt_external_id may come with prompt or prompt_messages)"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.documents is not None:
            self.documents = labelled(self.documents)
        if self.trajectory is not None and self.messages is not None:
            raise ValueError("give trajectory or its older name messages, not both")
        for name in self.rubric_names():
            if not name.strip():
                raise ValueError("rubric: a rubric name must not be empty")
        return self

    def stored_trajectory(self) -> list[dict[str, Any]] | None:
        """The trajectory as it is stored: each message without its unset fields."""
        given = self.trajectory if self.trajectory is not None else self.messages
        return [m.model_dump(exclude_none=True) for m in given] if given else None

    def rubric_names(self) -> list[str]:
        if self.rubric is None:
            return []
        return [self.rubric] if isinstance(self.rubric, str) else list(self.rubric)


@dataclass(frozen=True)
class IngestResult:
    added: int
    unchanged: int
    assigned: int = 0  # rubric assignments stored
    # Near-duplicate prompts created (differ from a stored one by case, spaces or a character).
    warnings: list[str] = field(default_factory=list)
    prompt_ids: list[int] = field(default_factory=list)  # each record's prompt, in order


_TRAJECTORY = TypeAdapter(list[TrajectoryMessage])


def normalized_trajectory(messages: Sequence[Any], where: str) -> list[dict[str, Any]]:
    """``messages`` checked as a trajectory and in its stored form (``stored_trajectory``), so
    one trajectory is stored and keyed alike however it arrived; ValidationFailed, one line
    naming ``where``, if it is not an OpenAI-style message list."""
    try:
        checked = _TRAJECTORY.validate_python(messages)
    except ValidationError as err:
        raise ValidationFailed(f"{where}: trajectory: {describe_validation_error(err)}") from None
    if not checked:
        raise ValidationFailed(f"{where}: trajectory: an empty message list")
    return [m.model_dump(exclude_none=True) for m in checked]


def load_completion_file(path: Path) -> list[tuple[str, CompletionRecord]]:
    records = []
    for location, data in read_items(path, "completion"):
        try:
            records.append((location, CompletionRecord.model_validate(data)))
        except ValidationError as err:
            raise ValidationFailed(f"{location}: {describe_validation_error(err)}") from None
    return records


def _resolve_prompt(session: Session, record: CompletionRecord) -> tuple[Prompt, bool]:
    """The record's prompt, and whether it was created."""
    if record.prompt_id is not None:
        return find_prompt(session, prompt_id=record.prompt_id), False
    if not _gives_prompt(record):
        return find_prompt(session, external_id=record.prompt_external_id), False
    return store_prompt(session, _given_messages(record), external_id=record.prompt_external_id)


def add_completions(session: Session, records: list[tuple[str, CompletionRecord]]) -> IngestResult:
    """Store the records; one with a known ``external_id`` is skipped if identical, refused if
    not. A record's ``rubric`` names are assigned to its completion (unknown names refused).

    The prompts the records name and the completions their external ids name are read a few
    hundred at a time, and new completions go in together (``insert_completions``): a lookup
    and a flush per record made a file of 10,000 records take 16 s. A completion listing
    documents is flushed as it comes (its documents need its id), after the rows before it.
    The records are still checked in order (the first at fault is the one an error names),
    and new completions take their ids in the records' order, which decides the groups a
    comparing judge forms."""
    # On PostgreSQL the lookups are planned with their values (``db.POSTGRES_PLANNING_SETTINGS``):
    # adding the same file again at once, 10,000 records took 4.4 s to find unchanged with a
    # plan made for any values, 0.6 s with theirs.
    prompts = _PromptsOf(session, records)
    known = _KnownCompletions(session, records)
    rubrics: dict[str, Rubric] = {}
    created: list[tuple[str, Prompt]] = []
    stored: list[tuple[str, CompletionRecord, _Stored, int]] = []
    plain: list[_NewRow] = []  # rows not inserted yet
    added = 0
    for location, record in records:
        try:
            prompt, prompt_created = prompts.resolve(record)
        except RubricsvcError as err:
            raise type(err)(f"{location}: {err}") from None
        if prompt_created:
            created.append((location, prompt))
        completion = known.same(location, record, prompt.id)
        if completion is None:
            resolved = resolve_documents(session, record.documents or (), location)
            row = _new_row(record, prompt.id)
            if resolved:
                _insert_rows(session, plain)
                instance = Completion(**row)
                session.add(instance)
                session.flush()
                attach_documents(session, instance, resolved)
                completion = instance
            else:
                new_row = _NewRow(row)
                plain.append(new_row)
                completion = new_row
            known.add(record, completion, row)
            added += 1
        for name in record.rubric_names():
            if name not in rubrics:
                try:
                    rubrics[name] = assignable_rubric(session, name)
                except RubricsvcError as err:
                    raise type(err)(f"{location}: rubric: {err}") from None
        stored.append((location, record, completion, prompt.id))
    _insert_rows(session, plain)
    assigned = assign_to_completions(
        session,
        [
            CompletionAssignment(location, rubrics[name], _completion_id(ref), prompt_id)
            for location, record, ref, prompt_id in stored
            for name in record.rubric_names()
        ],
    )
    warnings = near_duplicate_warnings(session, created)
    prompt_ids = [prompt_id for _, _, _, prompt_id in stored]
    return IngestResult(added, len(records) - added, assigned, warnings, prompt_ids)


class _PromptsOf:
    """The prompts records name, those named by id or external id read together up front;
    a prompt given in full is stored (or found) once per batch, as its first record comes."""

    def __init__(self, session: Session, records: Sequence[tuple[str, CompletionRecord]]) -> None:
        self.session = session
        ids = sorted({r.prompt_id for _, r in records if r.prompt_id is not None})
        names = sorted(
            {
                r.prompt_external_id
                for _, r in records
                if r.prompt_external_id is not None and not _gives_prompt(r)
            }
        )
        self.by_id: dict[int, Prompt] = {}
        self.by_name: dict[str, Prompt] = {}
        for part in batches(ids):
            self.by_id.update(
                (p.id, p) for p in session.scalars(select(Prompt).where(Prompt.id.in_(part)))
            )
        for some in batches(names):
            for prompt in session.scalars(select(Prompt).where(Prompt.external_id.in_(some))):
                self.by_name[prompt.external_id or ""] = prompt
        self.given: dict[tuple[str, str | None], Prompt] = {}

    def resolve(self, record: CompletionRecord) -> tuple[Prompt, bool]:
        """The record's prompt, and whether it was created."""
        if record.prompt_id is not None:
            prompt = self.by_id.get(record.prompt_id)
            if prompt is None:
                raise NotFoundError(f"no prompt with id {record.prompt_id}")
            return prompt, False
        if not _gives_prompt(record):
            name = record.prompt_external_id
            found = self.by_name.get(name or "")
            if found is None:
                raise NotFoundError(f"no prompt with external id {name!r}")
            return found, False
        messages = _given_messages(record)
        key = (prompt_hash(messages), record.prompt_external_id)
        if key in self.given:
            return self.given[key], False
        prompt, created = store_prompt(
            self.session, messages, external_id=record.prompt_external_id
        )
        # Later records may name it by its id or external id, as they could once it was stored.
        self.given[key] = self.by_id[prompt.id] = prompt
        if prompt.external_id is not None:
            self.by_name[prompt.external_id] = prompt
        return prompt, created


def _gives_prompt(record: CompletionRecord) -> bool:
    return record.prompt is not None or record.prompt_messages is not None


def _given_messages(record: CompletionRecord) -> list[dict[str, Any]]:
    if record.prompt_messages:
        return [m.model_dump() for m in record.prompt_messages]
    return [{"role": "user", "content": record.prompt}]


@dataclass
class _NewRow:
    """A completion this batch inserts as a row (``insert_completions``), its id once it has."""

    row: dict[str, Any]
    id: int | None = None


# A record's completion: stored before (its id), or new (an instance, or a row to insert).
_Stored = Completion | int | _NewRow


def _insert_rows(session: Session, pending: list[_NewRow]) -> None:
    """Insert the pending rows, giving each its id; ``pending`` is emptied."""
    for new, id_ in zip(
        pending, insert_completions(session, [n.row for n in pending]), strict=True
    ):
        new.id = id_
    pending.clear()


def _completion_id(ref: _Stored) -> int:
    if isinstance(ref, Completion):
        return ref.id
    if isinstance(ref, int):
        return ref
    assert ref.id is not None, "a new row's id is known once it is inserted"
    return ref.id


class _Known(NamedTuple):
    """What a record with the same external id must match: the completion's prompt, text,
    trajectory and documents, and the completion (read as an instance only where a rubric is
    assigned to it)."""

    completion: _Stored
    prompt_id: int
    content_hash: str
    messages: list[dict[str, Any]] | None
    documents: list[list[str]]


class _KnownCompletions:
    """The completions the records' external ids name: stored ones read together up front
    (their columns, not instances), and those this batch adds."""

    def __init__(self, session: Session, records: Sequence[tuple[str, CompletionRecord]]) -> None:
        names = sorted({r.external_id for _, r in records if r.external_id is not None})
        self.known: dict[str, _Known] = {}
        columns = (
            Completion.id,
            Completion.external_id,
            Completion.prompt_id,
            Completion.content_hash,
            Completion.messages,
        )
        for part in batches(names):
            rows = session.execute(select(*columns).where(Completion.external_id.in_(part)))
            found = {
                id_: (name, prompt_id, digest, messages)
                for id_, name, prompt_id, digest, messages in rows
            }
            documents = _listed_documents(session, list(found))
            for id_, (name, prompt_id, digest, messages) in found.items():
                self.known[name] = _Known(id_, prompt_id, digest, messages, documents.get(id_, []))

    def same(self, location: str, record: CompletionRecord, prompt_id: int) -> _Stored | None:
        """The completion already stored under the record's external id (None if none is);
        ValidationFailed if it differs from the record."""
        known = self.known.get(record.external_id or "") if record.external_id else None
        if known is None:
            return None
        if (
            known.content_hash != content_hash(record.text)
            or known.prompt_id != prompt_id
            or known.messages != record.stored_trajectory()
            or known.documents != _documents_of(record)
        ):
            raise ValidationFailed(
                f"{location}: completion {record.external_id!r} is already stored "
                "with a different prompt, text, trajectory or documents"
            )
        return known.completion

    def add(self, record: CompletionRecord, completion: _Stored, row: dict[str, Any]) -> None:
        """A completion this batch adds (``row``: its columns), for the records after it."""
        if record.external_id is not None:
            self.known[record.external_id] = _Known(
                completion,
                row["prompt_id"],
                row["content_hash"],
                row["messages"],
                _documents_of(record),
            )


def _listed_documents(
    session: Session, completion_ids: Sequence[int]
) -> dict[int, list[list[str]]]:
    """``listed_documents`` of each of these stored completions that lists any."""
    listed: dict[int, list[list[str]]] = {}
    if not completion_ids:
        return listed
    rows = session.execute(
        select(CompletionDocument.completion_id, CompletionDocument.label, Document.content_hash)
        .join(Document, CompletionDocument.document_id == Document.id)
        .where(CompletionDocument.completion_id.in_(completion_ids))
        .order_by(CompletionDocument.completion_id, CompletionDocument.position)
    )
    for completion_id, label, digest in rows:
        listed.setdefault(completion_id, []).append([str(label), digest])
    return listed


def _documents_of(record: CompletionRecord) -> list[list[str]]:
    return [[str(r.label), r.digest()] for r in record.documents or ()]


def _new_row(record: CompletionRecord, prompt_id: int) -> dict[str, Any]:
    """The record's completion as the columns (by attribute name) it is stored with."""
    return {
        "prompt_id": prompt_id,
        "external_id": record.external_id,
        "text": record.text,
        "messages": record.stored_trajectory(),
        "content_hash": content_hash(record.text),
        "source": record.source,
        "meta": record.metadata,
    }


def store_completion(
    session: Session, location: str, record: CompletionRecord
) -> tuple[Completion, bool]:
    """The completion of ``record``, stored if new, and whether it was (see ``add_completions``)."""
    completion, new, _ = _store(session, location, record)
    return completion, new


def _store(
    session: Session, location: str, record: CompletionRecord
) -> tuple[Completion, bool, bool]:
    """``store_completion``, and whether the record's prompt was created."""
    try:
        prompt, prompt_created = _resolve_prompt(session, record)
    except RubricsvcError as err:
        raise type(err)(f"{location}: {err}") from None
    digest = content_hash(record.text)
    if record.external_id is not None:
        existing = session.scalar(
            select(Completion).where(Completion.external_id == record.external_id)
        )
        if existing is not None:
            if (
                existing.content_hash != digest
                or existing.prompt_id != prompt.id
                or existing.messages != record.stored_trajectory()
                or listed_documents(existing) != _documents_of(record)
            ):
                raise ValidationFailed(
                    f"{location}: completion {record.external_id!r} is already stored "
                    "with a different prompt, text, trajectory or documents"
                )
            return existing, False, prompt_created
    resolved = resolve_documents(session, record.documents or (), location)
    completion = Completion(**_new_row(record, prompt.id))
    session.add(completion)
    session.flush()
    attach_documents(session, completion, resolved)
    return completion, True, prompt_created
