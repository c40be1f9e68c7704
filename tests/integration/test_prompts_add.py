"""`prompts add`, prompts named twice in a completions file, near-duplicate prompts, and the
selection errors and hints of `score` about prompts."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc import db
from rubricsvc.models import Completion, Prompt
from tests.cli_runner import add_examples, cli_error, cli_ok, run_cli


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _prompts(url: str) -> list[Prompt]:
    engine = db.make_engine(url)
    try:
        with Session(engine) as session:
            return list(session.scalars(select(Prompt).order_by(Prompt.id)))
    finally:
        engine.dispose()


def _completions(url: str) -> int:
    engine = db.make_engine(url)
    try:
        with Session(engine) as session:
            return int(session.scalar(select(func.count()).select_from(Completion)) or 0)
    finally:
        engine.dispose()


def test_prompts_add_stores_ids_references_and_tags(database_url: str, tmp_path: Path) -> None:
    url = database_url
    records = [
        {
            "external_id": "p1",
            "text": "Name a prime number.",
            "reference_answer": "7",
            "tags": {"scenario": "math_reasoning"},
        },
        {
            "external_id": "p2",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Say hello."},
            ],
        },
    ]
    path = _jsonl(tmp_path / "prompts.jsonl", records)
    first = cli_ok("prompts", "add", str(path), database_url=url)
    assert "2 prompt(s) added, 0 already stored" in first.stdout
    again = cli_ok("prompts", "add", str(path), database_url=url)
    assert "0 prompt(s) added, 2 already stored" in again.stdout
    stored = _prompts(url)
    assert [(p.external_id, p.reference_answer, p.tags) for p in stored] == [
        ("p1", "7", {"scenario": "math_reasoning"}),
        ("p2", None, {}),
    ]
    assert stored[1].messages[0] == {"role": "system", "content": "Be brief."}

    # A stored prompt gains tags it lacks; contradicting one is refused, nothing stored.
    cli_ok(
        "prompts",
        "add",
        str(_jsonl(tmp_path / "t.jsonl", [{"text": "Name a prime number.", "tags": {"n": 1}}])),
        database_url=url,
    )
    assert _prompts(url)[0].tags == {"scenario": "math_reasoning", "n": 1}
    cases = [
        ({"text": "Name a prime number.", "reference_answer": "11"}, "different reference answer"),
        ({"text": "Name a prime number.", "tags": {"scenario": "other"}}, "tag 'scenario'"),
        ({"external_id": "p2", "text": "Something else."}, "already names a different prompt"),
        ({"text": ""}, "text"),
    ]
    for record, message in cases:
        path = _jsonl(tmp_path / "bad.jsonl", [{"text": "A new prompt."}, record])
        error = cli_error("prompts", "add", str(path), database_url=url)
        assert error.startswith(f"error: {path}:2: ") and message in error, error
        assert len(error.splitlines()) == 1
        assert len(_prompts(url)) == 2  # the valid first record was not stored either


def test_records_of_one_prompt_are_one_prompt_with_several_completions(
    database_url: str, tmp_path: Path
) -> None:
    url = database_url
    pair = [
        {"prompt_external_id": "q1", "prompt": "Which is larger, 2 or 3?", "text": t}
        for t in ("3", "3 is larger than 2.")
    ]
    pair += [{"prompt": "Name a colour.", "text": t} for t in ("Red", "Blue", "Green")]
    added = cli_ok("completions", "add", str(_jsonl(tmp_path / "p.jsonl", pair)), database_url=url)
    assert "5 completion(s) added, 0 already stored" in added.stdout
    listed = cli_ok("prompts", "list", "--json", database_url=url).json()
    assert [(p["external_id"], p["completions"]) for p in listed] == [("q1", 2), (None, 3)]
    # The id alone now finds it; the id with other text is refused.
    more = [{"prompt_external_id": "q1", "text": "Three."}]
    cli_ok("completions", "add", str(_jsonl(tmp_path / "m.jsonl", more)), database_url=url)
    clash = [{"prompt_external_id": "q1", "prompt": "Which is smaller?", "text": "2"}]
    error = cli_error(
        "completions", "add", str(_jsonl(tmp_path / "c.jsonl", clash)), database_url=url
    )
    assert "external id 'q1' already names a different prompt" in error
    assert _completions(url) == 6


def test_a_near_duplicate_prompt_is_reported(database_url: str, tmp_path: Path) -> None:
    url = database_url
    stored = [{"external_id": "sleep", "text": "How can I sleep better?"}]
    cli_ok("prompts", "add", str(_jsonl(tmp_path / "s.jsonl", stored)), database_url=url)
    completions = [
        {"prompt": "how can i  sleep better?", "text": "Go to bed early."},
        {"prompt": "How can I sleep beter?", "text": "Keep a schedule."},
        {"prompt": "What is a haiku?", "text": "A short poem."},
    ]
    path = _jsonl(tmp_path / "c.jsonl", completions)
    result = run_cli("completions", "add", str(path), database_url=url)
    assert result.code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning")]
    assert warnings == [
        f"warning: {path}:1: new prompt 2 differs from stored prompt 1 ('sleep') only by case "
        "or spacing; name that one (prompt_id or prompt_external_id) if it is meant",
        f"warning: {path}:2: new prompt 3 differs from stored prompt 1 ('sleep') only by one "
        "character; name that one (prompt_id or prompt_external_id) if it is meant",
    ]
    assert len(_prompts(url)) == 4  # reported, not merged: the text is what the judge sees


def test_score_names_unknown_prompts_and_the_real_reason_nothing_is_scored(
    database_url: str, tmp_path: Path
) -> None:
    url = database_url
    add_examples(url)
    for option, value, message in [
        ("--prompt", "no-such-prompt", "error: no prompt with external id 'no-such-prompt'"),
        ("--source", "no-such-source", "error: no completion has source 'no-such-source'"),
    ]:
        error = cli_error("score", option, value, database_url=url)
        assert error == message
    # A completion of a prompt with no rubric: the hint is about the rubric, not drafts.
    orphan = [{"prompt": "How can I sleep beter?", "text": "Sleep.", "source": "orphans"}]
    cli_ok("completions", "add", str(_jsonl(tmp_path / "o.jsonl", orphan)), database_url=url)
    out = " ".join(
        cli_ok("score", "--source", "orphans", "--dry-run", database_url=url).stdout.split()
    )
    assert "1 completion(s) have no rubric: their prompt has none and none is assigned" in out
    assert "approve" not in out and "--include-drafts" not in out
