"""Evidence documents a completion used (search results, cited pages): the record format and
their storage, once per content and shared by every completion that lists them.

A completion lists its documents in order; each has a ``label``, how the completion cites it
(``"3"`` for ``[3]``; by default its position, from 1). A document is given in full (``text``,
optionally ``url``, ``title``, ``retrieved_at``) or, when it is already stored, by its
``content_hash`` alone, so a corpus shared by many rollouts is sent once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.errors import NotFoundError, ValidationFailed
from rubricsvc.fileformats import describe_validation_error
from rubricsvc.hashing import content_hash
from rubricsvc.models import Completion, CompletionDocument, Document

HASH_PATTERN = r"^[0-9a-f]{64}$"


class DocumentRecord(BaseModel):
    """One document as a completion lists it."""

    model_config = ConfigDict(extra="forbid")

    label: str | None = Field(default=None, min_length=1, max_length=200)
    url: str | None = Field(default=None, max_length=4000)
    title: str | None = Field(default=None, max_length=2000)
    text: str | None = Field(default=None, min_length=1)
    retrieved_at: datetime | None = None
    content_hash: str | None = Field(default=None, pattern=HASH_PATTERN)

    @model_validator(mode="after")
    def _text_or_hash(self) -> DocumentRecord:
        if (self.text is None) == (self.content_hash is None):
            raise ValueError(
                "give the document's text, or the content_hash of a stored document (not both)"
            )
        if self.content_hash is not None and (self.url or self.title or self.retrieved_at):
            raise ValueError("a document named by content_hash takes only a label besides")
        return self

    def digest(self) -> str:
        """The document's content hash: of its url, title and text (given, or the one named)."""
        if self.content_hash is not None:
            return self.content_hash
        return document_hash(self.url, self.title, self.text or "")


def document_hash(url: str | None, title: str | None, text: str) -> str:
    return content_hash({"url": url, "title": title, "text": text})


_DOCUMENTS = TypeAdapter(list[DocumentRecord])


def checked_documents(documents: Sequence[Any], where: str) -> list[DocumentRecord]:
    """``documents`` as records, each with its label (its position when it has none);
    ValidationFailed naming ``where`` for a malformed list or a label used twice."""
    try:
        records = _DOCUMENTS.validate_python(documents)
        return labelled(records)
    except ValidationError as err:
        raise ValidationFailed(f"{where}: documents: {describe_validation_error(err)}") from None
    except ValueError as err:
        raise ValidationFailed(f"{where}: documents: {err}") from None


def labelled(records: Sequence[DocumentRecord]) -> list[DocumentRecord]:
    """``records``, each with its label (its position, from 1, when it has none); ValueError
    for a label given twice."""
    out: list[DocumentRecord] = []
    seen: set[str] = set()
    for position, record in enumerate(records, start=1):
        label = record.label or str(position)
        if label in seen:
            raise ValueError(f"label {label!r} is given twice")
        seen.add(label)
        out.append(record.model_copy(update={"label": label}))
    return out


def documents_key(records: Sequence[DocumentRecord]) -> str | None:
    """What tells two completions' document lists apart (None: no documents)."""
    if not records:
        return None
    return content_hash([[r.label, r.digest()] for r in records])


@dataclass(frozen=True)
class ResolvedDocument:
    label: str
    document: Document


def resolve_documents(
    session: Session, records: Sequence[DocumentRecord], where: str
) -> list[ResolvedDocument]:
    """Each record's stored document, stored now if new; a ``content_hash`` naming no stored
    document is a NotFoundError naming ``where`` (nothing is stored by the caller then)."""
    if not records:
        return []
    digests = {r.digest() for r in records}
    stored = {
        d.content_hash: d
        for d in session.scalars(select(Document).where(Document.content_hash.in_(digests)))
    }
    resolved = []
    for index, record in enumerate(records):
        digest = record.digest()
        document = stored.get(digest)
        if document is None:
            if record.text is None:
                raise NotFoundError(
                    f"{where}: documents[{index}]: no stored document has content hash {digest}"
                )
            document = Document(
                content_hash=digest,
                url=record.url,
                title=record.title,
                text=record.text,
                retrieved_at=record.retrieved_at,
            )
            session.add(document)
            stored[digest] = document
        resolved.append(ResolvedDocument(str(record.label), document))
    return resolved


def attach_documents(
    session: Session, completion: Completion, resolved: Sequence[ResolvedDocument]
) -> None:
    """List ``resolved`` as ``completion``'s documents, in order."""
    for position, entry in enumerate(resolved, start=1):
        completion.documents.append(
            CompletionDocument(position=position, label=entry.label, document=entry.document)
        )
    session.flush()


def listed_documents(completion: Completion) -> list[list[str]]:
    """A stored completion's documents as ``documents_key`` reads them."""
    return [[str(cd.label), cd.document.content_hash] for cd in completion.documents]
