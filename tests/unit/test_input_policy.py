"""The input policy itself (rubricsvc.inputpolicy), the file readers' located refusals and the
content hash's defence: what is refused, what is kept exactly, and where an error points."""

from __future__ import annotations

import datetime
import json
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest

from rubricsvc.errors import ValidationFailed
from rubricsvc.fileformats import load_yaml, read_records, read_text
from rubricsvc.hashing import content_hash
from rubricsvc.inputpolicy import (
    MAX_DEPTH,
    check_text,
    describe_refusal,
    find_refusal,
    loads_json,
    text_problem,
)


def test_lone_surrogates_and_nul_are_refused_with_their_position() -> None:
    assert text_problem("a\ud800b") == (
        "contains a lone surrogate (U+D800) at character 2; text must be valid Unicode"
    )
    assert text_problem("ab\udfff") is not None and "U+DFFF) at character 3" in str(
        text_problem("ab\udfff")
    )
    assert text_problem("\x00") == (
        "contains a NUL character (U+0000) at character 1; "
        "text may not hold NUL (PostgreSQL cannot store it)"
    )
    with pytest.raises(ValidationFailed, match=r"^prompt: contains a lone surrogate \(U\+DC80\)"):
        check_text("x\udc80", "prompt")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "tab\tnewline\ncarriage\r",
        "\x01\x07\x1b[31m\x7f\x85\x9f",  # other C0 and C1 controls: data
        "abc\u202edef\u2066x\u2069",  # bidirectional controls: data
        "e\u0301",  # not NFC: kept as given
        "\u0430pple",  # a Cyrillic look-alike
        "\U0001f600 \ufeff \ufffd \uffff",  # astral, BOM, replacement, a noncharacter
        json.loads('"\\ud83d\\ude00"'),  # a surrogate pair in JSON is one character
    ],
)
def test_every_other_character_is_kept_exactly(text: str) -> None:
    assert text_problem(text) is None
    assert find_refusal({"text": text, text: [text]}) is None
    assert check_text(text, "f") == text
    # Kept as given: a text and its NFC form stay two texts, with two hashes.
    if unicodedata.normalize("NFC", text) != text:
        assert content_hash(text) != content_hash(unicodedata.normalize("NFC", text))


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"a": [1, {"b": "x\ud800"}]}, "a[1].b", "lone surrogate (U+D800) at character 2"),
        ({"tags": {"k\x00": 1}}, "tags.k\\u0000", "the key contains a NUL character"),
        ({"m": float("nan")}, "m", "must be a finite number, got nan"),
        ({"m": [2**64]}, "m[0]", "integer out of range (more than 64 bits)"),
        ({"when": datetime.date(2024, 1, 1)}, "when", "a date value is not JSON"),
        ({"b": b"raw"}, "b", "a bytes value is not JSON data"),
    ],
)
def test_find_refusal_names_the_field(data: object, field: str, message: str) -> None:
    refusal = find_refusal(data)
    assert refusal is not None
    assert describe_refusal(refusal).startswith(f"{field}: ")
    assert message in refusal.message


def test_the_first_refusal_in_document_order_is_reported() -> None:
    data = {"a": "fine", "b": ["x", "\x00"], "c": "\ud800"}
    refusal = find_refusal(data)
    assert refusal is not None and refusal.where == ("b", 1)


def test_a_repeated_key_is_refused_naming_it_and_a_single_one_is_not() -> None:
    refusal = find_refusal(loads_json('{"tags": {"a": 1, "b": 2, "a": 3}}'))
    assert refusal is not None
    assert describe_refusal(refusal) == "tags.a: the key is given more than once in one object"
    assert find_refusal(loads_json('{"tags": {"a": 1}, "b": {"a": 1}}')) is None


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, 2.5e3, {"b": null}], "c": "\\u00e9"}',
        b'{"items": [{"completion": "caf\\xc3\\xa9"}]}',
        '{"a": 1}'.encode("utf-16"),
        '{"a": 1}'.encode("utf-32-le"),
        "\ufeff{}",
        b'{"a": ',
        "",
        b"\xff\xfe",
    ],
)
def test_loads_json_reads_and_refuses_what_json_loads_does(text: str | bytes) -> None:
    def outcome(load: Callable[[str | bytes], object]) -> object:
        try:
            return load(text)
        except ValueError as err:
            return (type(err), str(err))

    assert outcome(loads_json) == outcome(json.loads)


def test_nesting_is_limited_and_the_field_names_the_start_of_the_path() -> None:
    fine = json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    assert find_refusal(fine) is None
    deep = {"x": json.loads("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))}
    refusal = find_refusal(deep)
    assert refusal is not None
    assert refusal.where == ("x", 0, 0, 0)
    assert refusal.message == f"holds values nested more than {MAX_DEPTH} levels deep"


def test_a_yaml_alias_repeated_many_times_is_checked_once(tmp_path: Path) -> None:
    """A small file that expands to 10^9 values (aliases of aliases) is read in no time."""
    lines = ["a0: &a0 [x, y, z, w, v, u, t, s, r, q]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert isinstance(load_yaml(path), dict)


def test_content_hash_refuses_text_that_is_not_unicode_instead_of_crashing() -> None:
    with pytest.raises(ValidationFailed, match=r"^cannot hash: b\[0\]: contains a lone surrogate"):
        content_hash({"a": "ok", "b": ["x\ud800"]})
    assert content_hash("\x01") == content_hash("\x01")


# -- Files: one line naming the file, the line and the field -----------------------------------


@pytest.mark.parametrize(
    ("name", "content", "error"),
    [
        (
            "c.jsonl",
            '{"text": "ok"}\n\n{"text": "a\\ud800b"}\n',
            "c.jsonl:3: text: contains a lone",
        ),
        ("c.jsonl", '{"t": {"x": 1, "x": 2}}\n', "c.jsonl:1: t.x: the key is given more than"),
        ("c.jsonl", '{"x": ' + "[" * 100_000 + "\n", "c.jsonl:1: holds values nested more than"),
        ("c.jsonl", '{"x": 1e999}\n', "c.jsonl:1: x: must be a finite number, got inf"),
        (
            "r.json",
            '{\n "rubrics": [\n  {"name": "a"},\n  {"name": "b",\n'
            '   "criteria": [{"text": "x\\u0000"}]}\n ]\n}\n',
            "r.json:5: rubrics[1].criteria[0].text: contains a NUL character (U+0000) at character 2",
        ),
        (
            "r.json",
            '{"a": {"\\udc00": 1}}',
            "r.json:1: a.\\udc00: the key contains a lone surrogate",
        ),
        (
            "r.yaml",
            'name: a\ncriteria:\n  - text: ok\n  - text: "bad \\ud800"\n',
            "r.yaml:4: criteria[1].text: contains a lone surrogate (U+D800) at character 5",
        ),
        ("r.yaml", "name: a\ntags:\n  when: 2024-01-01\n", "r.yaml:3: tags.when: a date value"),
        ("r.yaml", 'name: a\ntitle: "x\x7fy"\n', "r.yaml:2: invalid YAML: character U+007F is not"),
        (
            "r.yaml",
            "a: " + "[" * 600 + "]" * 600,
            "r.yaml:1: holds values nested more than 100 levels deep",
        ),
    ],
)
def test_files_refuse_with_file_line_and_field(
    tmp_path: Path, name: str, content: str, error: str
) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValidationFailed) as refused:
        read_records(path)
    message = str(refused.value)
    assert message == message.strip() and "\n" not in message
    assert message.startswith(f"{tmp_path}/{error}"), message


def _nested_call(depth: int, call: Callable[[], object]) -> object:
    return call() if depth == 0 else _nested_call(depth - 1, call)


@pytest.mark.parametrize("stack", [0, 600])
def test_a_json_files_refusal_names_its_line_however_deep_the_file_and_the_stack(
    tmp_path: Path, stack: int
) -> None:
    """The line of a refusal is found without recursion: a value nested 99 levels next to a
    repeated key (under the depth limit, so the key is the refusal) must not lose its line when
    the caller already holds hundreds of frames (an API thread, a worker, a test runner)."""
    deep = "[" * 99 + "1" + "]" * 99
    path = tmp_path / "r.json"
    path.write_text(
        f'[\n  {{"title": "T",\n   "name": {deep}, "x": [{deep}, "\\"]"],\n   "name": "again"}}\n]'
    )
    with pytest.raises(ValidationFailed) as refused:
        _nested_call(stack, lambda: read_records(path))
    assert str(refused.value) == (
        f"{path}:4: [0].name: the key is given more than once in one object"
    )


def test_bytes_that_are_not_utf8_and_raw_nul_name_their_line(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": "caf\xc3\xa9"}\n{"text": "\xed\xa0\x80"}\n')
    with pytest.raises(ValidationFailed, match=r"c\.jsonl:2: not UTF-8 text: .*\(byte 0xed\)$"):
        read_text(path)
    path.write_bytes(b"first\nsecond \x00 third\n")
    with pytest.raises(ValidationFailed, match=r"c\.jsonl:2: contains a NUL .* at character 8"):
        read_text(path)


# Characters str.splitlines() breaks at besides newlines; JSON keeps them raw inside strings.
LINE_BREAKS_BUT_NOT_IN_JSON = "\u2028\u2029\x85\x0b\x0c\x1c\x1d\x1e"


def test_a_json_lines_record_holding_a_unicode_line_separator_stays_whole(
    tmp_path: Path,
) -> None:
    texts = [f"one{char}two" for char in LINE_BREAKS_BUT_NOT_IN_JSON]
    path = tmp_path / "c.jsonl"
    lines = [json.dumps({"text": text}, ensure_ascii=False) for text in texts]
    path.write_text("\r\n".join(lines) + "\n\n", encoding="utf-8")
    assert [record["text"] for _, record in read_records(path)] == texts
    # Line numbers count newlines only: the bad record is named by the line it is on.
    path.write_text("\n".join([*lines, '{"text": oops}']), encoding="utf-8")
    with pytest.raises(ValidationFailed, match=rf"c\.jsonl:{len(lines) + 1}: "):
        read_records(path)
