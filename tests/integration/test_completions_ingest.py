"""Adding completions in bulk (``completions.add_completions``: `completions add`,
``POST /v1/completions``): prompts and known completions are read together and new
completions inserted together, yet every record is handled as if alone and in order: each
record's completion holds its own fields, ids follow the records (they decide a comparing
judge's groups), a record repeating an external id is unchanged when identical and refused,
naming it, when not, and a prompt a record stores is found by the records after it."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from rubricsvc.completions import CompletionRecord, add_completions
from rubricsvc.db import make_engine, session_scope
from rubricsvc.documents import DocumentRecord, listed_documents
from rubricsvc.errors import NotFoundError, ValidationFailed
from rubricsvc.models import Completion, Prompt, Rubric, RubricAssignment
from rubricsvc.prompts import store_prompt
from rubricsvc.rubrics.versions import save_rubric
from tests.helpers import read_database, rubric_spec

DOCUMENT = {"label": "1", "url": "https://example.org/lyon", "text": "Lyon: 522,250 people."}
TRAJECTORY = [
    {"role": "assistant", "content": "Searching."},
    {"role": "tool", "content": "522,250"},
]


def _records(items: list[dict[str, Any]]) -> list[tuple[str, CompletionRecord]]:
    return [(f"line {n}", CompletionRecord.model_validate(item)) for n, item in enumerate(items, 1)]


def _add(url: str, items: list[dict[str, Any]]) -> Any:
    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            return add_completions(session, _records(items))
    finally:
        engine.dispose()


def _stored(url: str) -> list[dict[str, Any]]:
    def read(session: Any) -> list[dict[str, Any]]:
        return [
            {
                "id": c.id,
                "external_id": c.external_id,
                "prompt": c.prompt.external_id,
                "text": c.text,
                "messages": c.messages,
                "source": c.source,
                "documents": listed_documents(c),
            }
            for c in session.scalars(select(Completion).order_by(Completion.id))
        ]

    return read_database(url, read)


@pytest.fixture
def prompts(database_url: str) -> str:
    engine = make_engine(database_url)
    with session_scope(engine) as session:
        for name in ("lyon", "paris"):
            store_prompt(session, [{"role": "user", "content": f"About {name}?"}], external_id=name)
    engine.dispose()
    return database_url


def test_each_record_gets_its_own_completion_in_order(prompts: str) -> None:
    url = prompts
    items: list[dict[str, Any]] = [
        {"prompt_external_id": "lyon", "text": f"Answer {n}", "external_id": f"a{n}"}
        for n in range(30)
    ]
    items[10] = {**items[10], "documents": [DOCUMENT]}  # flushed in its place
    items[20] = {**items[20], "trajectory": TRAJECTORY, "source": "agent"}
    # The same prompt and text without external ids: two rows, not told apart by content.
    items += [{"prompt_external_id": "paris", "text": "Same."}] * 2
    items += [{"prompt_external_id": "paris", "text": "Other.", "external_id": "a3-twin"}]
    items += [items[5]]  # repeated identically: unchanged
    result = _add(url, items)
    assert (result.added, result.unchanged) == (33, 1)

    stored = _stored(url)
    expected = items[:33]  # in id order: the records' order
    assert [s["text"] for s in stored] == [i["text"] for i in expected]
    assert [s["external_id"] for s in stored] == [i.get("external_id") for i in expected]
    assert [s["prompt"] for s in stored] == [i["prompt_external_id"] for i in expected]
    assert stored[10]["documents"] == [["1", DocumentRecord.model_validate(DOCUMENT).digest()]]
    assert stored[20]["messages"] == TRAJECTORY and stored[20]["source"] == "agent"
    assert all(s["documents"] == [] for n, s in enumerate(stored) if n != 10)
    names = read_database(
        url, lambda s: dict(s.execute(select(Prompt.id, Prompt.external_id)).all())
    )
    assert [names[p] for p in result.prompt_ids] == [i["prompt_external_id"] for i in items]


def test_adding_the_same_file_again_changes_nothing(prompts: str) -> None:
    items = [
        {"prompt_external_id": "lyon", "text": "With a source.", "external_id": "d1",
         "documents": [DOCUMENT]},
        {"prompt_external_id": "lyon", "text": "With turns.", "external_id": "t1",
         "trajectory": TRAJECTORY},
        {"prompt_external_id": "paris", "text": "Plain.", "external_id": "p1"},
    ]  # fmt: skip
    assert _add(prompts, items).added == 3
    before = _stored(prompts)
    again = _add(prompts, items)
    assert (again.added, again.unchanged) == (0, 3)
    assert _stored(prompts) == before


@pytest.mark.parametrize(
    "change",
    [
        {"text": "Another text."},
        {"prompt_external_id": "paris"},
        {"trajectory": TRAJECTORY},
        {"documents": [{**DOCUMENT, "text": "Lyon: 500,000 people."}]},
    ],
)
def test_a_known_external_id_with_other_content_is_refused_naming_its_record(
    prompts: str, change: dict[str, Any]
) -> None:
    first = {"prompt_external_id": "lyon", "text": "An answer.", "external_id": "x1",
             "documents": [DOCUMENT]}  # fmt: skip
    _add(prompts, [first])
    before = _stored(prompts)
    # Stored before, or earlier in the same file: refused alike, naming the changed record.
    for items in (
        [{**first, **change}],
        [{**first, "external_id": "x2"}, {**first, "external_id": "x2", **change}],
    ):
        with pytest.raises(
            ValidationFailed, match=rf"^line {len(items)}: completion 'x\d' is already stored"
        ):
            _add(prompts, items)
        assert _stored(prompts) == before


def test_the_first_record_at_fault_is_the_one_named(prompts: str) -> None:
    items = [
        {"prompt_external_id": "lyon", "text": "Fine."},
        {"prompt_external_id": "nowhere", "text": "Its prompt is unknown."},
        {"prompt_id": 10_000, "text": "So is this one's."},
    ]
    with pytest.raises(NotFoundError, match=r"^line 2: no prompt with external id 'nowhere'"):
        _add(prompts, items)
    with pytest.raises(NotFoundError, match=r"^line 1: no prompt with id 10000"):
        _add(prompts, items[2:])
    assert _stored(prompts) == []


def test_a_prompt_given_in_full_is_found_by_the_records_after_it(database_url: str) -> None:
    items = [
        {"prompt_external_id": "new", "prompt": "A new question?", "text": "One."},
        {"prompt_external_id": "new", "text": "Two."},
        {"prompt_external_id": "new", "prompt": "A new question?", "text": "Three."},
    ]
    result = _add(database_url, items)
    assert result.added == 3 and len(set(result.prompt_ids)) == 1
    assert read_database(database_url, lambda s: s.scalar(select(func.count(Prompt.id)))) == 1
    # Named before the record that gives it: not known yet, as when records came one by one.
    with pytest.raises(NotFoundError, match=r"^line 1: no prompt with external id 'later'"):
        _add(database_url, [{"prompt_external_id": "later", "text": "x"},
                            {"prompt_external_id": "later", "prompt": "Later?", "text": "y"}])  # fmt: skip


def test_rubrics_named_by_records_are_assigned_once_each(prompts: str) -> None:
    """A record's ``rubric`` names: a shared rubric is assigned to the record's completion
    (new, or stored before under its external id) once however often it is named; its own
    prompt's rubric needs no assignment; the same file again assigns nothing."""
    engine = make_engine(prompts)
    with session_scope(engine) as session:
        for spec in (
            rubric_spec("shared/tone", prompt=None),
            rubric_spec("shared/facts", prompt=None),
            rubric_spec("own/lyon", prompt={"external_id": "lyon", "text": "About lyon?"}),
        ):
            save_rubric(session, spec)
    engine.dispose()
    _add(prompts, [{"prompt_external_id": "paris", "text": "old", "external_id": "old"}])
    items = [
        {"prompt_external_id": "lyon", "text": "a", "external_id": "a",
         "rubric": ["shared/tone", "own/lyon", "shared/tone"]},
        {"prompt_external_id": "paris", "text": "b", "external_id": "b",
         "rubric": ["shared/facts", "shared/tone"]},
        {"prompt_external_id": "paris", "text": "old", "external_id": "old",
         "rubric": "shared/facts"},
        {"prompt_external_id": "lyon", "text": "c", "external_id": "c"},
    ]  # fmt: skip
    assert _add(prompts, items).assigned == 4
    assert _add(prompts, items).assigned == 0

    def assignments(session: Any) -> list[tuple[str, str]]:
        query = (
            select(Completion.text, Rubric.name)
            .join(RubricAssignment, RubricAssignment.completion_id == Completion.id)
            .join(Rubric, Rubric.id == RubricAssignment.rubric_id)
        )
        return sorted((text, name) for text, name in session.execute(query))

    assert read_database(prompts, assignments) == [
        ("a", "shared/tone"),
        ("b", "shared/facts"),
        ("b", "shared/tone"),
        ("old", "shared/facts"),
    ]
