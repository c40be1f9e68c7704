"""Hostile input generated at every door (Hypothesis), on SQLite and PostgreSQL: every API
route that takes a body and every file format the command line reads gets valid records with
lone surrogates, NUL, controls, bidirectional overrides, look-alike letters, overlong strings,
deep nesting, huge and non-finite numbers, repeated keys and wrong types mixed in.

What must hold, whatever comes in:

- the API answers 2xx, or a JSON 4xx in the one error shape (422 and 413 name the field); never
  a 5xx, never a traceback;
- the command line exits 0, or non-zero with exactly one line, ``error: FILE...``, that names
  the file (and the line, when the input policy refused the text or a key); never a traceback;
- a refused request or file stores nothing (every table's row count is unchanged).

Schemathesis (test_api_schema.py) generates from the schema and never writes a lone surrogate;
these strategies do. Examples are bounded (``FUZZ_EXAMPLES``, no deadline) and derandomized,
so a run takes the same time and finds the same things each time.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.requirements import require_module

require_module("fastapi", "api")

from fastapi.testclient import TestClient  # noqa: E402

from rubricsvc import db  # noqa: E402
from rubricsvc.backends.scripted import ScriptedBackend  # noqa: E402
from rubricsvc.completions import CompletionRecord, add_completions  # noqa: E402
from rubricsvc.rubrics.schemas import RubricSpec  # noqa: E402
from rubricsvc.rubrics.versions import approve, save_rubric  # noqa: E402
from tests.api_harness import WORD_RUBRIC, api_client, bearer, wait_for_job  # noqa: E402
from tests.cli_runner import run_cli  # noqa: E402
from tests.integration.test_input_policy import (  # noqa: E402
    FULL_REWARD_ITEM,
    TRAJECTORY,
    row_counts,
)

FUZZ_EXAMPLES = 12
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MAX_BODY = 256 * 1024  # small, so that overlong strings also meet the size limit

# -- Hostile values ----------------------------------------------------------------------------

SPECIALS = [
    "\ud800",  # lone surrogates: refused
    "\udfff",
    "\udc80",
    "\x00",  # NUL: refused
    "\x01",
    "\x1b[2J",
    "\x7f\x85",
    "\t\r\n",
    "\u202e",  # bidirectional override, isolate
    "\u2066",
    "\ufeff",
    "e\u0301",  # not NFC
    "\u0430",  # Cyrillic a
    "\uff41",  # fullwidth a
    "\u200b",
    "\U0001f600",
    "<script>alert(1)</script>",
    "' OR 1=1 --",
    "{{7*7}}",
]
REFUSED_CHARACTERS = re.compile("[\ud800-\udfff\x00]")


def _nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


texts = st.one_of(
    st.text(max_size=20),
    st.builds(
        lambda a, special, b: a + special + b,
        st.text(max_size=8),
        st.sampled_from(SPECIALS),
        st.text(max_size=8),
    ),
    st.integers(min_value=1_000, max_value=300_000).map(lambda n: "x" * n),
)
scalars = st.one_of(
    texts,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**63, -(2**63) - 1, 2**31, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)
hostile_values = st.one_of(
    scalars,
    st.integers(min_value=90, max_value=400).map(_nested),
    st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)
        ),
        max_leaves=6,
    ),
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into a JSON tree, the root's children first."""
    if isinstance(value, dict | list):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            yield (*prefix, key)
            yield from _paths(child, (*prefix, key))


def _containers(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        yield prefix
    if isinstance(value, dict | list):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in items:
            yield from _containers(child, (*prefix, key))


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


@pytest.fixture(autouse=True)
def _room_for_deep_values() -> Iterator[None]:
    """The hostile values nest up to 400 levels and ``_encode`` recurses twice per level. Under
    a test the stack already holds pytest, Hypothesis and (with pytest-xdist) a worker's
    frames, deeper than a command's own, so the limit is raised for this file's tests."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4000))
    yield
    sys.setrecursionlimit(limit)


class Mutated:
    """A valid record with hostile changes; ``repeat`` is the path of an object whose first key
    is written twice when encoded."""

    def __init__(self, value: Any, repeat: tuple[Any, ...] | None) -> None:
        self.value = value
        self.repeat = repeat

    def __repr__(self) -> str:
        return f"Mutated({_encode(self.value, (), self.repeat)[:2000]!r})"

    def encode(self) -> str:
        """JSON text (also read as YAML): non-ASCII written as is, lone surrogates and NUL as
        escapes (the only way they can be written), NaN and Infinity as Python writes them."""
        return _encode(self.value, (), self.repeat)

    @property
    def refused_text(self) -> bool:
        """Whether the input policy must refuse it for its text or keys: a lone surrogate or
        NUL in a string or a key, or a key given twice (whatever else it holds)."""
        return self.repeat is not None or _has_refused_text(self.value)


def _encode(value: Any, path: tuple[Any, ...], repeat: tuple[Any, ...] | None) -> str:
    if isinstance(value, dict):
        items = [f"{_string(str(k))}: {_encode(v, (*path, k), repeat)}" for k, v in value.items()]
        if path == repeat and value:
            items.append(f'{_string(str(next(iter(value))))}: "again"')
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_encode(v, (*path, i), repeat) for i, v in enumerate(value)) + "]"
    if isinstance(value, str):
        return _string(value)
    return json.dumps(value)


def _string(text: str) -> str:
    return re.sub(
        "[\ud800-\udfff]",
        lambda m: f"\\u{ord(m.group()):04x}",
        json.dumps(text, ensure_ascii=False),
    )


def _has_refused_text(value: Any) -> bool:
    if isinstance(value, str):
        return REFUSED_CHARACTERS.search(value) is not None
    if isinstance(value, dict):
        return any(_has_refused_text(k) or _has_refused_text(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_refused_text(v) for v in value)
    return False


@st.composite
def mutated(draw: st.DrawFn, template: Any) -> Mutated:
    """``template`` with one to three of: a value replaced by a hostile one, an unknown key
    added, a key written twice, the whole record replaced; or left valid."""
    value = copy.deepcopy(template)
    repeat = None
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        action = draw(st.sampled_from(["replace", "replace", "replace", "add", "repeat", "root"]))
        paths = list(_paths(value))
        containers = list(_containers(value))
        if action == "replace" and paths:
            path = draw(st.sampled_from(paths))
            _at(value, path[:-1])[path[-1]] = draw(hostile_values)
        elif action == "add" and containers:
            _at(value, draw(st.sampled_from(containers)))[draw(texts)] = draw(hostile_values)
        elif action == "repeat" and containers:
            repeat = draw(st.sampled_from(containers))
        elif action == "root":
            value = draw(hostile_values)
    if repeat is not None and not (
        isinstance(_at_or_none(value, repeat), dict) and _at_or_none(value, repeat)
    ):
        repeat = None
    return Mutated(value, repeat)


def _at_or_none(value: Any, path: tuple[Any, ...]) -> Any:
    try:
        return _at(value, path)
    except (KeyError, IndexError, TypeError):
        return None


# -- The API -----------------------------------------------------------------------------------

COMPLETION = {
    "prompt_external_id": "api-sea",
    "text": "The sea is blue.",
    "external_id": "fuzz-c",
    "source": "fuzz",
    "metadata": {"step": 1, "note": "n"},
    "trajectory": TRAJECTORY,
    "documents": [{"text": "The sea is blue.", "label": "S1", "url": "https://example.org/"}],
}
ROUTES: dict[str, tuple[str, Any]] = {
    "prompts": (
        "/v1/prompts",
        {"text": "A prompt.", "external_id": "fuzz-p", "reference_answer": "R", "tags": {"k": "v"}},
    ),
    "prompt messages": (
        "/v1/prompts",
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
            ]
        },
    ),
    "rubrics": ("/v1/rubrics", {**WORD_RUBRIC, "name": "fuzz/rubric", "title": "T"}),
    "generate": (
        "/v1/rubrics/generate",
        {"prompt_ids": ["api-sea"], "name_prefix": "gen/", "temperature": 0.5, "seed": 1},
    ),
    "review": ("/v1/rubrics/fuzz/draft/versions/1/approve", {"note": "Reviewed."}),
    "completions": ("/v1/completions", [COMPLETION]),
    "score jobs": (
        "/v1/score-jobs",
        {"judge": "embedded", "prompt_ids": ["api-sea"], "aggregation": "rar", "min_coverage": 0.5},
    ),
    "rewards": (
        "/v1/rewards",
        {
            "items": [
                FULL_REWARD_ITEM,
                {"completion": "Grey.", "prompt_id": "api-sea", "rubric": "api/blue-sea"},
            ],
            "judge": "embedded",
            "aggregation": "rar",
            "source": "fuzz",
        },
    ),
    "openrlhf": (
        "/v1/openrlhf/reward",
        {"query": ["Q: The sea is blue."], "prompts": ["Q: "], "labels": ["api-sea"]},
    ),
}


def _scripted(spec: Any) -> ScriptedBackend:
    return ScriptedBackend(model=getattr(spec, "model", None) or "scripted")


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def fuzz_database(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated database of its own for this module's examples (they share it)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'fuzz.sqlite'}"
    else:
        url = request.getfixturevalue("make_postgres_database")()
    db.upgrade(url)
    return url


@pytest.fixture(scope="module")
def api(fuzz_database: str) -> Iterator[tuple[TestClient, dict[str, str], str]]:
    """The app on the fuzz database: the check-only rubric approved, a draft to review, a
    scripted backend for anything that would load a model."""
    with api_client(fuzz_database, build_backend=_scripted, max_body_bytes=MAX_BODY) as (
        client,
        keys,
    ):
        engine = db.make_engine(fuzz_database)
        with db.session_scope(engine) as session:
            save_rubric(session, RubricSpec.model_validate({**WORD_RUBRIC, "name": "fuzz/draft"}))
        engine.dispose()
        yield client, bearer(keys["admin"]), fuzz_database


def _check_answer(
    client: TestClient, answer: Any, before: dict[str, int], database_url: str
) -> None:
    assert answer.status_code < 500, answer.text
    assert "Traceback" not in answer.text
    if answer.status_code >= 300:
        error = answer.json()["error"]
        assert error["status"] == answer.status_code and error["message"], answer.text
        assert "\n" not in error["message"]
        if answer.status_code in (413, 422):
            assert isinstance(error.get("field"), str) and error["field"], answer.text
            assert error["field"].split(".")[0] in ("body", "line", "query", "path"), answer.text
        assert row_counts(database_url) == before, answer.text
    elif "/v1/score-jobs" in str(answer.url):
        # A job this server runs writes after it answered: wait, so the next example's
        # counts are its own.
        wait_for_job(client, answer.json()["id"], dict(answer.request.headers), timeout=60)


@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_body_answers_2xx_or_a_json_4xx_and_stores_nothing_refused(
    api: tuple[TestClient, dict[str, str], str], route: str
) -> None:
    client, headers, database_url = api
    path, template = ROUTES[route]

    @FUZZ
    @given(body=mutated(template))
    def door(body: Mutated) -> None:
        before = row_counts(database_url)
        answer = client.post(
            path,
            content=body.encode().encode("utf-8"),
            headers={**headers, "content-type": "application/json"},
        )
        _check_answer(client, answer, before, database_url)
        if body.refused_text:
            assert answer.status_code in (413, 422), answer.text

    door()


def test_json_lines_ingest_answers_2xx_or_a_json_4xx_naming_the_line(
    api: tuple[TestClient, dict[str, str], str],
) -> None:
    client, headers, database_url = api

    @FUZZ
    @given(
        records=st.lists(mutated(COMPLETION), min_size=1, max_size=3),
        raw=st.sampled_from([b"", b"\xff\xfe", b"\xed\xa0\x80", b"\x00"]),
    )
    def door(records: list[Mutated], raw: bytes) -> None:
        body = b"\n".join(r.encode().encode("utf-8") for r in records) + b"\n" + raw
        before = row_counts(database_url)
        answer = client.post(
            "/v1/completions/jsonl",
            content=body,
            headers={**headers, "content-type": "application/x-ndjson"},
        )
        _check_answer(client, answer, before, database_url)
        if any(r.refused_text for r in records) or raw:
            assert answer.status_code in (413, 422), answer.text

    door()


# -- The command line --------------------------------------------------------------------------

LABEL = {"kind": "scalar", "completion": "fuzz-seed", "score": 3, "scale": [1, 5]}
JUDGE = {"name": "fuzz-judge", "backend": "scripted", "model": "m", "mode": "criterion-text"}
RUBRIC = {**WORD_RUBRIC, "name": "fuzz/cli", "title": "T"}
# (command, file suffixes, a valid record, whether records go one per line or in a list)
FORMATS: dict[str, tuple[tuple[str, ...], tuple[str, ...], Any]] = {
    "completions add": (("completions", "add"), (".jsonl",), COMPLETION),
    "prompts add": (
        ("prompts", "add"),
        (".jsonl", ".json", ".yaml"),
        {"text": "A prompt.", "external_id": "fuzz-p", "tags": {"k": "v"}},
    ),
    "rubrics add": (("rubrics", "add"), (".yaml", ".json", ".jsonl"), RUBRIC),
    "labels import jsonl": (("labels", "import", "jsonl"), (".jsonl",), LABEL),
    "judges add": (("judges", "add"), (".yaml", ".json"), JUDGE),
}


def _seed(database_url: str) -> None:
    engine = db.make_engine(database_url)
    try:
        with db.session_scope(engine) as session:
            spec = RubricSpec.model_validate({**WORD_RUBRIC, "name": "fuzz/seed"})
            approve(session, save_rubric(session, spec).version)
            record = CompletionRecord.model_validate(
                {"prompt_external_id": "api-sea", "text": "Blue.", "external_id": "fuzz-seed"}
            )
            add_completions(session, [("seed", record)])
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def seeded(api: tuple[TestClient, dict[str, str], str]) -> str:
    """The fuzz database with what the records name: an approved rubric and a completion."""
    _seed(api[2])
    return api[2]


def _write(path: Path, records: list[Mutated]) -> list[int]:
    """The file, and the line each record starts on."""
    if path.suffix == ".jsonl":
        path.write_text("".join(r.encode() + "\n" for r in records), encoding="utf-8")
        return list(range(1, len(records) + 1))
    lines = [r.encode() for r in records]
    path.write_text("[\n" + ",\n".join(lines) + "\n]\n", encoding="utf-8")
    return [n + 2 for n in range(len(records))]


@pytest.mark.parametrize("file_format", list(FORMATS))
def test_every_file_format_fails_with_one_line_naming_the_file_and_stores_nothing(
    seeded: str, file_format: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    database_url = seeded
    command, suffixes, template = FORMATS[file_format]
    folder = tmp_path_factory.mktemp("fuzz-files")

    @FUZZ
    @given(
        records=st.lists(mutated(template), min_size=1, max_size=3),
        suffix=st.sampled_from(suffixes),
    )
    def door(records: list[Mutated], suffix: str) -> None:
        path = folder / f"input{suffix}"
        starts = _write(path, records)
        before = row_counts(database_url)
        result = run_cli(*command, str(path), database_url=database_url)
        output = result.stdout + result.stderr
        assert "Traceback" not in output, output
        if result.code == 0:
            return
        assert row_counts(database_url) == before, result.stderr
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), output
        assert str(path) in result.stderr, result.stderr
        poisoned = [start for start, r in zip(starts, records, strict=True) if r.refused_text]
        if poisoned:  # refused: the line is named
            where = re.match(rf"error: {re.escape(str(path))}:(\d+): ", result.stderr)
            too_deep = "holds values nested more than 100 levels deep"
            assert where or too_deep in result.stderr, result.stderr
            # By the input policy: no later than the first poisoned record. (The file may be
            # refused for something else first, such as a character YAML does not allow.)
            policy = "lone surrogate" in result.stderr or "NUL character" in result.stderr
            assert not (where and policy) or int(where.group(1)) <= poisoned[0], result.stderr

    door()
