"""Regex check criteria against a policy's worst: a pattern that backtracks exponentially is
scored within a bound through the CLI, and a pattern RE2 cannot run is refused when the rubric
is added, from a file or the API, with nothing stored."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import func, select

from rubricsvc.models import Criterion, Rubric, RubricVersion
from tests.cli_runner import CliResult, run_cli
from tests.helpers import read_database
from tests.requirements import require_module

RUBRIC = r"""
name: integrity/words-only
prompt: {text: "Answer with words only.", external_id: words-only}
criteria:
  - {text: Words and single spaces only, weight: 1, kind: check,
     check: {type: regex, pattern: '^(\w+\s?)+$'}}
"""


def _ok(*args: str, database_url: str, timeout: float = 300) -> CliResult:
    result = run_cli(*args, database_url=database_url, timeout=timeout)
    assert result.code == 0, result.stderr
    return result


def _stored(database_url: str) -> tuple[int, ...]:
    return tuple(
        read_database(
            database_url,
            lambda s: tuple(
                s.scalar(select(func.count()).select_from(model))
                for model in (Rubric, RubricVersion, Criterion)
            ),
        )
    )


def test_a_backtracking_pattern_is_scored_within_a_bound(tmp_path: Path, sqlite_url: str) -> None:
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text(RUBRIC)
    completions = tmp_path / "completions.jsonl"
    texts = {"attack": "a" * 100_000 + "!", "fine": "a few words\n"}
    completions.write_text(
        "".join(
            json.dumps({"external_id": k, "prompt_external_id": "words-only", "text": t}) + "\n"
            for k, t in texts.items()
        )
    )
    _ok("rubrics", "add", str(rubric), database_url=sqlite_url)
    _ok("rubrics", "approve", "integrity/words-only", database_url=sqlite_url)
    _ok("completions", "add", str(completions), database_url=sqlite_url)

    # A backtracking engine takes longer than the age of the universe on the attack: the
    # command's timeout fails the test instead of hanging it. Check criteria need no model.
    try:
        result = _ok("score", "--json", database_url=sqlite_url, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("scoring a regex check on 100,000 characters did not finish in 120 s")
    report = json.loads(result.stdout)
    assert report["checks"] == 2 and report["backend_requests"] == 0
    values = {s["completion_external_id"]: s["value"] for s in report["scores"]}
    assert values == {"attack": 0.0, "fine": 1.0}


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        ("(?=.*sources)", "lookahead (?=...)"),
        (r"(?<!not )good", "negative lookbehind (?<!...)"),
        (r"(\w+) \1", r"backreference \1"),
        ("(?>a+)b", "atomic group (?>...)"),
        ("a*+b", "possessive quantifier *+"),
    ],
)
def test_a_pattern_re2_cannot_run_is_refused_at_add(
    tmp_path: Path, sqlite_url: str, pattern: str, construct: str
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(RUBRIC)
    bad = tmp_path / "bad.json"
    check = {"type": "regex", "pattern": pattern}
    criterion = {"text": "c", "weight": 1, "kind": "check", "check": check}
    bad.write_text(json.dumps({"name": "integrity/bad", "criteria": [criterion]}))

    result = run_cli("rubrics", "add", str(good), str(bad), database_url=sqlite_url)

    assert result.code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0] == (
        f"error: {bad}: rubric 'integrity/bad': criteria[0].check.regex.pattern: invalid "
        f"regular expression: {construct} is not supported: checks run on RE2, which matches "
        "in linear time"
    )
    assert _stored(sqlite_url) == (0, 0, 0)


def test_the_api_refuses_it_too(sqlite_url: str) -> None:
    require_module("fastapi", "api")
    from tests.api_harness import WORD_RUBRIC, api_client, bearer

    with api_client(sqlite_url) as (client, keys):
        before = _stored(sqlite_url)
        criterion = {
            "text": "No disclaimer",
            "weight": 1,
            "kind": "check",
            "check": {"type": "regex", "pattern": "^(?!As an AI)"},
        }
        response = client.post(
            "/v1/rubrics",
            json={**WORD_RUBRIC, "name": "api/lookahead", "criteria": [criterion]},
            headers=bearer(keys["author"]),
        )
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["field"].startswith("body.criteria.0.check")
        assert "negative lookahead (?!...) is not supported" in error["message"]
        assert _stored(sqlite_url) == before
