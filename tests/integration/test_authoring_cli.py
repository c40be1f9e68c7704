"""Review and reuse on the command line: the drafts setting of `score`, and `add-generic`."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from rubricsvc.rubrics.generic import GENERIC_CRITERIA
from tests.cli_runner import CliResult, run_cli
from tests.helpers import check_criterion

# A check criterion is computed without a model, so `score` runs here without loading one.
RUBRIC = {
    "name": "t/short",
    "prompt": {"text": "Say hello briefly.", "external_id": "hello"},
    "criteria": [check_criterion("Says hello", {"type": "contains", "text": "hello"}, weight=2)],
}


def _setup(database_url: str, tmp_path: Path) -> None:
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text(yaml.safe_dump(RUBRIC))
    completions = tmp_path / "completions.jsonl"
    completions.write_text(
        json.dumps({"prompt_external_id": "hello", "text": "Hello there!", "external_id": "c1"})
        + "\n"
    )
    for args in (("rubrics", "add", str(rubric)), ("completions", "add", str(completions))):
        assert run_cli(*args, database_url=database_url).code == 0


def _score(database_url: str, *args: str, use_drafts: str | None = None) -> CliResult:
    env = {"RUBRICSVC_SCORING_USE_DRAFTS": use_drafts} if use_drafts is not None else {}
    result = run_cli("score", "--json", *args, database_url=database_url, env=env)
    assert result.code == 0, result.stderr
    return result


def test_score_uses_drafts_only_when_the_setting_or_the_flag_says(
    sqlite_url: str, tmp_path: Path
) -> None:
    _setup(sqlite_url, tmp_path)
    approved_only = _score(sqlite_url, use_drafts="false").json()
    assert approved_only["scores"] == [] and len(approved_only["without_rubric"]) == 1

    with_drafts = _score(sqlite_url, use_drafts="true").json()
    assert [(s["rubric"], s["value"]) for s in with_drafts["scores"]] == [("t/short@1", 1.0)]
    assert with_drafts["backend_requests"] == 0

    # The flag overrides the setting, both ways.
    assert _score(sqlite_url, "--approved-only", use_drafts="true").json()["scores"] == []
    assert len(_score(sqlite_url, "--include-drafts", use_drafts="false").json()["scores"]) == 1


def test_add_generic_makes_a_new_version(sqlite_url: str, tmp_path: Path) -> None:
    _setup(sqlite_url, tmp_path)
    added = run_cli("rubrics", "add-generic", "t/short", database_url=sqlite_url)
    assert added.code == 0, added.stderr
    assert (
        f"new version t/short@2 (id 2, a draft): {len(GENERIC_CRITERIA)} generic criteria appended"
        in added.stdout
    )
    diff = run_cli("rubrics", "diff", "t/short@1", "t/short@2", database_url=sqlite_url).stdout
    assert [line[2:] for line in diff.splitlines() if line.startswith("+ ")] == [
        f"[{c.category.value} {c.weight:g}] {c.text}" for c in GENERIC_CRITERIA
    ]
    first = run_cli("rubrics", "show", "t/short@1", "--json", database_url=sqlite_url).json()
    assert [c["text"] for c in first["criteria"]] == ["Says hello"]
    second = run_cli("rubrics", "show", "t/short@2", "--json", database_url=sqlite_url).json()
    assert second["parent_id"] == first["id"] and "generic criteria appended" in second["note"]

    again = run_cli("rubrics", "add-generic", "t/short", database_url=sqlite_url)
    assert "t/short@2 already has every generic criterion" in again.stdout
    assert len(run_cli("rubrics", "list", "--all", "--json", database_url=sqlite_url).json()) == 2
