"""The input policy at every door, on SQLite and PostgreSQL: a lone surrogate (and NUL, which
PostgreSQL cannot store) in any text field of the API's bodies, query strings and paths, of the
files `completions add`, `prompts add`, `rubrics add` and `labels import jsonl` read, of the
review pages' forms and of the command line's arguments is refused naming the field, and
nothing is stored; text the policy keeps (controls, bidirectional overrides, non-NFC forms) is
stored exactly as sent.

tests/integration/test_fuzz_doors.py throws generated hostile input at the same doors.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc.db import make_engine, session_scope
from rubricsvc.hashing import content_hash
from rubricsvc.models import Base, Prompt, RubricVersion, VersionStatus
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.versions import save_rubric
from tests.api_harness import WORD_RUBRIC, api_client, bearer
from tests.cli_runner import run_cli
from tests.helpers import read_database
from tests.integration.test_ui import csrf_of, sign_in

SURROGATE = "a\ud800b"
SURROGATE_SAYS = "contains a lone surrogate (U+D800) at character 2; text must be valid Unicode"
NUL = "a\x00b"
NUL_SAYS = "contains a NUL character (U+0000) at character 2"


def row_counts(database_url: str) -> dict[str, int]:
    """Rows in every table (what a refused request must leave as it was)."""

    def read(session: Session) -> dict[str, int]:
        return {
            table.name: int(session.scalar(select(func.count()).select_from(table)) or 0)
            for table in Base.metadata.sorted_tables
        }

    counts: dict[str, int] = read_database(database_url, read)
    return counts


def with_value(body: Any, path: tuple[str | int, ...], value: Any) -> Any:
    """A deep copy of ``body`` with ``value`` at ``path``."""
    changed = copy.deepcopy(body)
    target = changed
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return changed


REWARD = {"items": [{"completion": "The sea is blue.", "prompt_id": "api-sea"}]}
TRAJECTORY = [{"role": "user", "content": "Write."}, {"role": "assistant", "content": "Blue."}]
# A reward item with every kind of text a reward request carries: prompt turns, a trajectory,
# documents.
FULL_REWARD_ITEM: dict[str, Any] = {
    "completion": "The sea is blue.",
    "prompt": [{"role": "user", "content": "Write one sentence about the sea."}],
    "trajectory": TRAJECTORY,
    "documents": [{"text": "The sea is blue.", "label": "S1"}],
}
# (method, path, a valid body, the text fields to poison: the path in the body)
BODIES: list[tuple[str, str, Any, list[tuple[str | int, ...]]]] = [
    (
        "POST",
        "/v1/rewards",
        {"items": [FULL_REWARD_ITEM], "source": "policy"},
        [
            ("items", 0, "completion"),
            ("items", 0, "prompt", 0, "content"),
            ("items", 0, "trajectory", 1, "content"),
            ("items", 0, "documents", 0, "text"),
            ("items", 0, "documents", 0, "label"),
            ("source",),
            ("judge",),
        ],
    ),
    ("POST", "/v1/rewards", REWARD, [("items", 0, "prompt_id"), ("items", 0, "rubric")]),
    (
        "POST",
        "/v1/rewards",
        {"items": [{"completion": "Blue.", "prompt": "Write one sentence about the sea."}]},
        [("items", 0, "prompt")],
    ),
    (
        "POST",
        "/v1/openrlhf/reward",
        {"query": ["Q: The sea is blue."], "prompts": ["Q: "], "labels": ["api-sea"]},
        [("query", 0), ("prompts", 0), ("labels", 0)],
    ),
    (
        "POST",
        "/v1/completions",
        [
            {
                "prompt_external_id": "api-sea",
                "text": "The sea is blue.",
                "external_id": "c-1",
                "source": "policy",
                "metadata": {"step": "1"},
                "trajectory": TRAJECTORY,
            }
        ],
        [
            (0, "text"),
            (0, "prompt_external_id"),
            (0, "external_id"),
            (0, "source"),
            (0, "metadata", "step"),
            (0, "trajectory", 0, "content"),
        ],
    ),
    (
        "POST",
        "/v1/prompts",
        {"text": "A prompt.", "external_id": "p-1", "reference_answer": "R", "tags": {"k": "v"}},
        [("text",), ("external_id",), ("reference_answer",), ("tags", "k")],
    ),
    (
        "POST",
        "/v1/rubrics",
        {**WORD_RUBRIC, "name": "api/other"},
        [("name",), ("criteria", 0, "text"), ("prompt", "text"), ("prompt", "external_id")],
    ),
    (
        "POST",
        "/v1/score-jobs",
        {"judge": "embedded", "prompt_ids": ["api-sea"], "sources": ["s"]},
        [("judge",), ("prompt_ids", 0), ("sources", 0)],
    ),
    ("POST", "/v1/rubrics/api/blue-sea/versions/1/retire", {"note": "Old."}, [("note",)]),
    ("POST", "/v1/rubrics/generate", {"prompt_ids": ["api-sea"]}, [("prompt_ids", 0)]),
]
POISONED = [
    (method, path, body, field) for method, path, body, fields in BODIES for field in fields
]


@pytest.fixture
def api(database_url: str) -> Iterator[tuple[TestClient, dict[str, str]]]:
    with api_client(database_url, max_body_bytes=200_000) as (client, keys):
        yield client, bearer(keys["admin"])


@pytest.mark.parametrize(
    ("bad", "says"), [(SURROGATE, SURROGATE_SAYS), (NUL, NUL_SAYS)], ids=["surrogate", "nul"]
)
def test_refused_text_in_any_body_field_is_422_naming_it_and_stores_nothing(
    api: tuple[TestClient, dict[str, str]], database_url: str, bad: str, says: str
) -> None:
    client, headers = api
    wrong = []
    for method, path, body, field in POISONED:
        before = row_counts(database_url)
        # Sent as a client would: JSON escapes, "\ud800" and "\u0000".
        content = json.dumps(with_value(body, field, bad))
        answer = client.request(
            method, path, content=content, headers={**headers, "content-type": "application/json"}
        )
        name = ".".join(("body", *map(str, field)))
        error = answer.json().get("error", {})
        if (
            answer.status_code != 422
            or error.get("field") != name
            or not error.get("message", "").startswith(f"{name}: {says}")
            or row_counts(database_url) != before
        ):
            wrong.append((path, name, answer.status_code, answer.text))
    assert wrong == []


def test_the_valid_bodies_are_accepted(api: tuple[TestClient, dict[str, str]]) -> None:
    """The bodies the test above poisons pass as they are (so its 422s come from the poison)."""
    client, headers = api
    for method, path, body, _ in BODIES:
        if path in ("/v1/score-jobs", "/v1/rubrics/generate"):
            continue  # they would run the bundled model; their schemas are checked elsewhere
        answer = client.request(method, path, json=body, headers=headers)
        assert answer.status_code < 300, (path, answer.text)


def test_json_lines_query_strings_and_paths_are_held_to_the_policy(
    api: tuple[TestClient, dict[str, str]], database_url: str
) -> None:
    client, headers = api
    before = row_counts(database_url)
    good = json.dumps({"prompt_external_id": "api-sea", "text": "Blue."})
    lines = f"{good}\n" + json.dumps({"prompt_external_id": "api-sea", "text": SURROGATE})
    answer = client.post(
        "/v1/completions/jsonl",
        content=lines.encode(),
        headers={**headers, "content-type": "application/x-ndjson"},
    )
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == "line.2.text"
    assert answer.json()["error"]["message"] == f"line.2.text: {SURROGATE_SAYS}"
    # Bytes that are not UTF-8 are refused, not replaced with U+FFFD.
    raw = f"{good}\n".encode() + b'{"prompt_external_id": "api-sea", "text": "\xff"}\n'
    answer = client.post(
        "/v1/completions/jsonl", content=raw, headers={**headers, "content-type": "text/plain"}
    )
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "line.2"
    assert "not UTF-8 text" in answer.json()["error"]["message"]
    for url, field in [
        ("/v1/prompts?external_id=a%00b", "query.external_id"),
        ("/v1/completions?source=a%00b", "query.source"),
        ("/v1/rubrics/api/blue%00sea", "path.name"),
        ("/v1/rubrics/api/blue-sea/diff?from=1&to=1&x=%00", "query.x"),
    ]:
        answer = client.get(url, headers=headers)
        assert answer.status_code == 422, (url, answer.text)
        assert answer.json()["error"]["field"] == field
        assert NUL_SAYS.replace("2", "") in answer.json()["error"]["message"]
    assert row_counts(database_url) == before


def test_repeated_keys_deep_nesting_and_an_oversized_body_name_their_field(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    client, headers = api
    headers = {**headers, "content-type": "application/json"}
    repeated = '{"text": "A prompt.", "tags": {"a": 1, "b": 2, "a": 3}}'
    answer = client.post("/v1/prompts", content=repeated, headers=headers)
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == "body.tags.a"
    assert "given more than once" in answer.json()["error"]["message"]
    deep = '{"text": "A prompt.", "tags": {"a": ' + "[" * 200 + "]" * 200 + "}}"
    answer = client.post("/v1/prompts", content=deep, headers=headers)
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == "body.tags.a.0.0"
    assert "nested more than 100 levels deep" in answer.json()["error"]["message"]
    # Too deep for the parser itself: the same words, for the body.
    deepest = '{"text": "A prompt.", "tags": {"a": ' + "[" * 100_000 + "}}"
    answer = client.post("/v1/prompts", content=deepest, headers=headers)
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "body"
    assert "nested more than 100 levels deep" in answer.json()["error"]["message"]
    answer = client.post("/v1/prompts", content=" " * 200_001, headers=headers)
    assert answer.status_code == 413 and answer.json()["error"]["field"] == "body"


def test_a_query_parameter_given_twice_is_refused_before_any_work(database_url: str) -> None:
    """Which value of a name given twice counts differs between servers, proxies and
    frameworks (Starlette: the last): every route refuses it, 422 naming it, before any work.
    The reward routes' fast path (``api.direct``) leaves such a request to the route."""
    built: list[Any] = []

    def build(choice: Any) -> Any:
        built.append(choice)
        raise AssertionError("no judge may be loaded for a refused request")

    with api_client(database_url, build_backend=build) as (client, keys):
        before = row_counts(database_url)
        prompt = "Write one sentence about the sea."
        openrlhf = {"query": [prompt + " Blue."], "prompts": [prompt], "labels": ["api-sea"]}
        score = {**bearer(keys["score"]), "content-type": "application/json"}
        item = {"prompt_id": "api-sea", "completion": "Blue."}
        for method, url, body, headers, name in [
            # The request: a judge checked under one name, scored under the other.
            ("POST", f"/v1/openrlhf/reward?api_key={keys['score']}&judge=fake&judge=embedded",
             openrlhf, {}, "judge"),
            ("POST", "/v1/openrlhf/reward?judge=embedded&judge=embedded", openrlhf, score,
             "judge"),
            ("POST", f"/v1/openrlhf/reward?api_key={keys['score']}&api_key={keys['score']}",
             openrlhf, {}, "api_key"),
            ("POST", "/v1/rewards?judge=x&judge=x", {"items": [item]}, score, "judge"),
            ("POST", "/v1/prompts?x=1&x=2", {"text": "Twice."}, bearer(keys["author"]), "x"),
            ("GET", "/v1/prompts?limit=1&limit=2", None, bearer(keys["read"]), "limit"),
        ]:  # fmt: skip
            answer = client.request(method, url, json=body, headers=headers)
            assert answer.status_code == 422, (url, answer.text)
            assert answer.json()["error"] == {
                "status": 422,
                "code": "validation_error",
                "message": f"query.{name}: is given more than once: give it once",
                "field": f"query.{name}",
                "details": [
                    {"field": f"query.{name}", "message": "is given more than once: give it once"}
                ],
            }, url
        assert built == []
        assert row_counts(database_url) == before
        # Once each, the same requests are served.
        once = client.post("/v1/openrlhf/reward?judge=embedded", json=openrlhf, headers=score)
        assert once.status_code == 200, once.text
        assert client.get("/v1/prompts?limit=1", headers=bearer(keys["read"])).status_code == 200

        # The review pages too: a 422 page naming it.
        client.follow_redirects = False
        sign_in(client, keys["admin"])
        page = client.get("/ui/queue?tag=a&tag=b")
        assert page.status_code == 422
        assert "query parameter &#39;tag&#39; is given more than once" in page.text


def test_text_the_policy_keeps_is_stored_and_hashed_exactly(
    api: tuple[TestClient, dict[str, str]], database_url: str
) -> None:
    client, headers = api
    kept = "tab\t bell\x07 esc\x1b[31m del\x7f \u202eevil\u202c e\u0301 \u0430pple \U0001f600"
    answer = client.post("/v1/prompts", json={"text": kept, "external_id": "kept"}, headers=headers)
    assert answer.status_code == 201, answer.text
    messages = [{"role": "user", "content": kept}]
    assert answer.json()["prompt"]["messages"] == messages
    assert answer.json()["prompt"]["content_hash"] == content_hash(messages)

    def stored(session: Session) -> Any:
        return session.scalar(select(Prompt.messages).where(Prompt.external_id == "kept"))

    assert read_database(database_url, stored) == messages


# -- The command line ---------------------------------------------------------------------------


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _cli_files(folder: Path) -> list[tuple[tuple[str, ...], Path, str]]:
    """(command, its file with a lone surrogate on line 2, the field the error names)."""
    rubric = {**WORD_RUBRIC, "name": "cli/good"}
    bad_rubric = {**WORD_RUBRIC, "name": "cli/bad", "criteria": [{"text": SURROGATE, "weight": 1}]}
    yaml_rubrics = folder / "rubrics.yaml"
    yaml_rubrics.write_text(
        'rubrics:\n  - name: cli/yaml\n    criteria:\n      - text: "a\\ud800b"\n        weight: 1\n',
        encoding="utf-8",
    )
    label = {"kind": "scalar", "completion": "c-1", "score": 3, "scale": [1, 5]}
    return [
        (
            ("completions", "add"),
            _jsonl(
                folder / "completions.jsonl",
                [{"prompt": "Q?", "text": "Fine."}, {"prompt": "Q?", "text": SURROGATE}],
            ),
            "text",
        ),
        (
            ("prompts", "add"),
            _jsonl(folder / "prompts.jsonl", [{"text": "Q?"}, {"text": SURROGATE}]),
            "text",
        ),
        (
            ("rubrics", "add"),
            _jsonl(folder / "rubrics.jsonl", [rubric, bad_rubric]),
            "criteria[0].text",
        ),
        (("rubrics", "add"), yaml_rubrics, "rubrics[0].criteria[0].text"),
        (
            ("labels", "import", "jsonl"),
            _jsonl(folder / "labels.jsonl", [label, {**label, "labeller": SURROGATE}]),
            "labeller",
        ),
    ]


def test_files_with_a_lone_surrogate_fail_with_one_line_and_store_nothing(
    database_url: str, tmp_path: Path
) -> None:
    for command, path, field in _cli_files(tmp_path):
        before = row_counts(database_url)
        result = run_cli(*command, str(path), database_url=database_url)
        line = 4 if path.suffix == ".yaml" else 2
        assert result.code == 2, (command, result.stdout, result.stderr)
        assert result.stderr == f"error: {path}:{line}: {field}: {SURROGATE_SAYS}\n", command
        assert "Traceback" not in result.stdout + result.stderr
        assert row_counts(database_url) == before


def test_an_argument_that_is_not_utf8_is_one_line(database_url: str) -> None:
    # A byte that is not UTF-8 on the command line reaches Python as U+DCxx (surrogateescape).
    result = run_cli("rubrics", "show", "demo/\udcff", database_url=database_url)
    assert result.code == 2
    assert result.stderr.startswith("error: argument 3 contains a lone surrogate (U+DCFF)")
    assert result.stderr.count("\n") == 1


# -- The review pages ---------------------------------------------------------------------------


def test_review_forms_and_parameters_refuse_what_the_policy_refuses(
    database_url: str,
) -> None:
    """A form field or a query parameter with NUL gets a 422 page naming it; nothing changes.
    Bidirectional controls are shown as markers on the version page, and kept as they are in
    the edit form's fields."""
    tricky = "Cites \u202egnirts\u202c sources"
    spec = {
        "name": "ui/tricky",
        "prompt": {"text": "Write about the sea."},
        "criteria": [{"text": tricky, "weight": 2}],
    }
    with api_client(database_url, rubrics=[]) as (client, keys):
        engine = make_engine(database_url)
        with session_scope(engine) as session:
            version_id = save_rubric(session, RubricSpec.model_validate(spec)).version.id
        engine.dispose()
        client.follow_redirects = False
        sign_in(client, keys["admin"])
        page = client.get(f"/ui/versions/{version_id}")
        assert page.status_code == 200
        assert "Cites ⟨U+202E⟩gnirts⟨U+202C⟩ sources" in page.text
        assert "\u202e" not in page.text
        edit = client.get(f"/ui/versions/{version_id}/edit")
        assert re.search(f">{re.escape(tricky)}</textarea>", edit.text)

        before = row_counts(database_url)
        refused = client.post(
            f"/ui/versions/{version_id}/approve",
            data={"csrf_token": csrf_of(page.text), "note": "looks \x00 fine"},
        )
        assert refused.status_code == 422
        assert "form field &#39;note&#39; contains a NUL character (U+0000) at character 7" in (
            refused.text
        )
        assert row_counts(database_url) == before

        def status(session: Session) -> VersionStatus:
            return session.get_one(RubricVersion, version_id).status

        assert read_database(database_url, status) == VersionStatus.DRAFT
        for url, name in [("/ui/queue?tag=%00", "tag"), (f"/ui/versions/{version_id}?x=%00", "x")]:
            answer = client.get(url)
            assert answer.status_code == 422, url
            assert f"query parameter &#39;{name}&#39; contains a NUL" in answer.text
