"""Each kind of malformed rubric file gives a one-line error naming the problem; nothing is stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select

from rubricsvc.models import Criterion, Prompt, Rubric, RubricVersion
from tests.cli_runner import cli_error

GOOD = """
name: good/rubric
prompt: {text: "A valid prompt"}
criteria:
  - {text: "A valid criterion", weight: 2}
"""


def _yaml_rubric(criteria: str, head: str = "name: bad/rubric\n") -> str:
    return f"{head}criteria:\n{criteria}"


# (case id, file name, content, substring the error must contain)
MALFORMED = [
    ("bad-yaml", "r.yaml", "name: x\ncriteria: [\n  {text: a", "invalid YAML"),
    ("bad-json", "r.json", '{"name": "x", "criteria": [', "invalid JSON"),
    ("missing-text", "r.yaml", _yaml_rubric("  - {weight: 1}"), "criteria[0].text: Field required"),
    ("missing-name", "r.yaml", "criteria:\n  - {text: a, weight: 1}", "name: Field required"),
    ("weight-zero", "r.yaml", _yaml_rubric("  - {text: a, weight: 0}"), "weight must be non-zero"),
    ("weight-nan", "r.yaml", _yaml_rubric("  - {text: a, weight: .nan}"), "finite number"),
    (
        "weight-inf-json",
        "r.json",
        '{"name": "x", "criteria": [{"text": "a", "weight": Infinity}]}',
        "finite number",
    ),
    (
        "weight-not-a-number",
        "r.yaml",
        _yaml_rubric("  - {text: a, weight: heavy}"),
        "criteria[0].weight: Input should be a valid number",
    ),
    (
        "unknown-category",
        "r.yaml",
        _yaml_rubric("  - {text: a, weight: 1, category: crucial}"),
        "criteria[0].category: Input should be 'essential', 'important', 'optional' or 'pitfall'",
    ),
    (
        "pitfall-positive",
        "r.yaml",
        _yaml_rubric("  - {text: a, weight: 3, category: pitfall}"),
        "does not match weight",
    ),
    (
        "duplicate-criterion",
        "r.yaml",
        _yaml_rubric(
            "  - {text: Cites sources, weight: 1}\n  - {text: '  cites   SOURCES ', weight: 2}"
        ),
        "criteria[1] duplicates criteria[0]",
    ),
    ("empty-rubric", "r.yaml", _yaml_rubric("  []"), "at least one criterion"),
    ("only-pitfalls", "r.yaml", _yaml_rubric("  - {text: a, weight: -1}"), "positive weight"),
    (
        "ordinal-without-levels",
        "r.yaml",
        _yaml_rubric("  - {text: a, weight: 1, scale: {type: ordinal}}"),
        "scale.ordinal.levels: Field required",
    ),
    (
        "ordinal-one-level",
        "r.yaml",
        _yaml_rubric(
            "  - {text: a, weight: 1, scale: {type: ordinal, levels: [{score: 1, description: x}]}}"
        ),
        "at least two levels",
    ),
    (
        "unknown-field",
        "r.yaml",
        _yaml_rubric("  - {text: a, wieght: 1}"),
        "criteria[0].wieght: Extra inputs are not permitted",
    ),
    (
        "duplicate-yaml-key",
        "r.yaml",
        _yaml_rubric("  - {text: a, weight: 1, weight: 2}"),
        "duplicate key 'weight'",
    ),
    (
        "check-without-spec",
        "r.yaml",
        _yaml_rubric("  - {text: a, weight: 1, kind: check}"),
        "needs a 'check' spec",
    ),
    (
        "check-bad-regex",
        "r.yaml",
        _yaml_rubric(
            "  - {text: a, weight: 1, kind: check, check: {type: regex, pattern: '(unclosed'}}"
        ),
        "invalid regular expression",
    ),
    (
        "check-regex-lookahead",
        "r.yaml",
        _yaml_rubric(
            "  - {text: a, weight: 1, kind: check, check: {type: regex, pattern: '^(?!As an AI)'}}"
        ),
        "criteria[0].check.regex.pattern: invalid regular expression: negative lookahead (?!...) "
        "is not supported: checks run on RE2, which matches in linear time",
    ),
    (
        "check-regex-backreference",
        "r.yaml",
        _yaml_rubric(
            "  - {text: a, weight: 1, kind: check, check: {type: regex, pattern: '(\\w+) \\1'}}"
        ),
        "criteria[0].check.regex.pattern: invalid regular expression: backreference \\1",
    ),
    ("not-a-mapping", "r.yaml", "- just\n- strings\n", "a rubric must be a mapping, got str"),
    ("empty-file", "r.yaml", "", "a rubric must be a mapping, got nothing"),
    (
        "bad-name",
        "r.yaml",
        "name: 'has spaces'\ncriteria:\n  - {text: a, weight: 1}",
        "name: String should match",
    ),
    ("unknown-extension", "r.txt", "name: x", "unknown file type '.txt'"),
]


def _counts(url: str) -> tuple[int, ...]:
    engine = create_engine(url)
    with engine.connect() as conn:
        counts = tuple(
            conn.scalar(select(func.count()).select_from(model))
            for model in (Prompt, Rubric, RubricVersion, Criterion)
        )
    engine.dispose()
    return counts  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("file_name", "content", "expected"),
    [pytest.param(f, c, e, id=i) for i, f, c, e in MALFORMED],
)
def test_malformed_rubric_file(
    tmp_path: Path, sqlite_url: str, file_name: str, content: str, expected: str
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    bad = tmp_path / file_name
    bad.write_text(content)

    # The valid file comes first: it must not be stored either.
    stderr = cli_error("rubrics", "add", str(good), str(bad), database_url=sqlite_url)

    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    assert expected in lines[0]
    assert str(bad) in lines[0]
    assert _counts(sqlite_url) == (0, 0, 0, 0)


def test_missing_file(tmp_path: Path, sqlite_url: str) -> None:
    stderr = cli_error("rubrics", "add", str(tmp_path / "absent.yaml"), database_url=sqlite_url)
    assert stderr == f"error: {tmp_path / 'absent.yaml'}: no such file"


def test_error_names_the_rubric(tmp_path: Path, sqlite_url: str) -> None:
    path = tmp_path / "many.jsonl"
    path.write_text(
        '{"name": "ok/one", "criteria": [{"text": "a", "weight": 1}]}\n'
        '{"name": "bad/two", "criteria": [{"text": "a", "weight": 0}]}\n'
    )
    stderr = cli_error("rubrics", "add", str(path), database_url=sqlite_url)
    assert f"{path}:2: rubric 'bad/two': criteria[0].weight" in stderr
    assert _counts(sqlite_url) == (0, 0, 0, 0)
