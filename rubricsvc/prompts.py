"""Prompts: find or create by content, look up by id or external id."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from rubricsvc.errors import ConflictError, NotFoundError
from rubricsvc.hashing import content_hash
from rubricsvc.models import Prompt


def prompt_hash(messages: list[dict[str, Any]]) -> str:
    return content_hash([{"role": m["role"], "content": m["content"]} for m in messages])


def get_or_create_prompt(
    session: Session,
    messages: list[dict[str, Any]],
    *,
    external_id: str | None = None,
    reference_answer: str | None = None,
    tags: dict[str, Any] | None = None,
) -> Prompt:
    """The prompt with these messages, created if new (see ``store_prompt``)."""
    prompt, _ = store_prompt(
        session, messages, external_id=external_id, reference_answer=reference_answer, tags=tags
    )
    return prompt


def store_prompt(
    session: Session,
    messages: list[dict[str, Any]],
    *,
    external_id: str | None = None,
    reference_answer: str | None = None,
    tags: dict[str, Any] | None = None,
) -> tuple[Prompt, bool]:
    """The prompt with these messages, created if new, and whether it was created.

    An existing prompt keeps its stored fields; a conflicting external id is an error
    rather than a silent relabel. A prompt that a concurrent transaction stores between the
    lookup and the insert (PostgreSQL) is found as if it had been there all along.
    """
    digest = prompt_hash(messages)
    prompt = _stored(session, digest, external_id, reference_answer)
    if prompt is not None:
        return prompt, False
    if external_id:
        _ensure_external_id_free(session, external_id)
    prompt = Prompt(
        content_hash=digest,
        external_id=external_id,
        messages=messages,
        reference_answer=reference_answer,
        tags=tags or {},
    )
    if _inserted(session, prompt):
        return prompt, True
    # The concurrent transaction has committed: its prompt has these messages, or it took
    # the external id for other messages.
    found = _stored(session, digest, external_id, reference_answer)
    if found is None:
        raise ConflictError(f"external id {external_id!r} already names a different prompt")
    return found, False


def _stored(
    session: Session, digest: str, external_id: str | None, reference_answer: str | None
) -> Prompt | None:
    """The stored prompt with this content hash, given the external id and reference answer
    it lacks; None if there is none."""
    prompt = session.scalar(select(Prompt).where(Prompt.content_hash == digest))
    if prompt is None:
        return None
    if external_id and prompt.external_id and prompt.external_id != external_id:
        raise ConflictError(
            f"prompt {prompt.id} already has external id {prompt.external_id!r}, "
            f"not {external_id!r} (same messages)"
        )
    if external_id and prompt.external_id is None:
        _ensure_external_id_free(session, external_id)
        prompt.external_id = external_id
    if reference_answer and prompt.reference_answer is None:
        prompt.reference_answer = reference_answer
    return prompt


def _inserted(session: Session, prompt: Prompt) -> bool:
    """Insert ``prompt``; False if a concurrent transaction inserted the same key first.

    PostgreSQL makes the second insert wait for the first transaction and then refuses it; the
    savepoint keeps the caller's transaction usable. SQLite has one writer at a time.
    """
    if session.get_bind().dialect.name != "postgresql":
        session.add(prompt)
        session.flush()
        return True
    session.flush()  # other pending rows: their errors are not this insert's
    try:
        with session.begin_nested():
            session.add(prompt)
            session.flush()
    except IntegrityError:
        return False
    return True


def _ensure_external_id_free(session: Session, external_id: str) -> None:
    if session.scalar(select(Prompt.id).where(Prompt.external_id == external_id)) is not None:
        raise ConflictError(f"external id {external_id!r} already names a different prompt")


def find_prompt(
    session: Session, *, prompt_id: int | None = None, external_id: str | None = None
) -> Prompt:
    if prompt_id is not None:
        prompt = session.get(Prompt, prompt_id)
        if prompt is None:
            raise NotFoundError(f"no prompt with id {prompt_id}")
        return prompt
    if external_id is not None:
        found = session.scalar(select(Prompt).where(Prompt.external_id == external_id))
        if found is None:
            raise NotFoundError(f"no prompt with external id {external_id!r}")
        return found
    raise ValueError("give prompt_id or external_id")


# --- near duplicates ------------------------------------------------------------------------


def _normalized(messages: list[dict[str, Any]]) -> str:
    """A prompt's text without case or spacing differences."""
    text = "\n".join(str(m.get("content", "")) for m in messages)
    return " ".join(text.casefold().split())


def _one_edit_apart(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with one character inserted, deleted or replaced."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) > len(b):
        a, b = b, a
    start = 0
    while start < len(a) and a[start] == b[start]:
        start += 1
    if len(a) == len(b):
        return a[start + 1 :] == b[start + 1 :]
    return a[start:] == b[start + 1 :]


def near_duplicate_warnings(
    session: Session, created: list[tuple[str, Prompt]], *, limit: int = 20
) -> list[str]:
    """For each new prompt (with where it came from) whose text differs from another stored
    prompt's only by case, spacing or one character: a warning naming that prompt's id. At
    most ``limit`` warnings, then one saying how many more."""
    if not created:
        return []
    new_ids = {p.id for _, p in created}
    stored = [
        (row.id, row.external_id, _normalized(row.messages))
        for row in session.execute(select(Prompt.id, Prompt.external_id, Prompt.messages))
    ]
    by_length: dict[int, list[tuple[int, str | None, str]]] = {}
    for entry in stored:
        by_length.setdefault(len(entry[2]), []).append(entry)
    warnings: list[str] = []
    for location, prompt in created:
        text = _normalized(prompt.messages)
        for length in (len(text) - 1, len(text), len(text) + 1):
            found = next(
                (
                    e
                    for e in by_length.get(length, [])
                    if e[0] != prompt.id
                    and not (e[0] in new_ids and e[0] > prompt.id)  # each new pair once
                    and (e[2] == text or _one_edit_apart(e[2], text))
                ),
                None,
            )
            if found is None:
                continue
            how = "case or spacing" if found[2] == text else "one character"
            named = f"prompt {found[0]}" + (f" ({found[1]!r})" if found[1] else "")
            warnings.append(
                f"{location}: new prompt {prompt.id} differs from stored {named} only by "
                f"{how}; name that one (prompt_id or prompt_external_id) if it is meant"
            )
            break
    if len(warnings) > limit:
        warnings = [*warnings[:limit], f"... and {len(warnings) - limit} more near-duplicate(s)"]
    return warnings
