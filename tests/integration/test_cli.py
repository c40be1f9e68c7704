"""The `rubricsvc` command end to end, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.cli_runner import EXAMPLES, CliResult, add_examples, cli_error, cli_ok, run_cli


def test_example_set_round_trip(database_url: str, tmp_path: Path) -> None:
    def cli(*args: str) -> CliResult:
        return cli_ok(*args, database_url=database_url)

    added = cli("rubrics", "add", str(EXAMPLES / "rubrics.yaml"))
    assert "3 rubric(s): 3 created" in added.stdout
    again = cli("rubrics", "add", str(EXAMPLES / "rubrics.yaml"))
    assert "0 created, 0 new version(s), 3 unchanged" in again.stdout

    listed = run_cli("rubrics", "list", "--json", database_url=database_url).json()
    assert sorted(item["ref"] for item in listed) == [
        "demo/explain-recursion@1",
        "demo/haiku-autumn@1",
        "demo/sleep-advice@1",
    ]
    assert {item["status"] for item in listed} == {"draft"}

    shown = run_cli(
        "rubrics", "show", "demo/sleep-advice", "--json", database_url=database_url
    ).json()
    assert [c["weight"] for c in shown["criteria"]] == [5, 3, 4, 2, -5, 1]
    assert shown["criteria"][5]["check"] == {"type": "word_count", "min": None, "max": 300}

    # Edit through the export format: the new version records its parent, the old one is unchanged.
    exported = json.loads(cli("rubrics", "export", "demo/sleep-advice").stdout)
    exported["criteria"][1]["weight"] = 4
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(exported))
    assert "new version  demo/sleep-advice@2" in cli("rubrics", "add", str(edited)).stdout
    v2 = run_cli(
        "rubrics", "show", "demo/sleep-advice@2", "--json", database_url=database_url
    ).json()
    assert v2["parent_id"] == shown["id"]
    v1 = run_cli(
        "rubrics", "show", "demo/sleep-advice@1", "--json", database_url=database_url
    ).json()
    assert v1["criteria"] == shown["criteria"]

    diff = cli("rubrics", "diff", "demo/sleep-advice@1", "demo/sleep-advice@2").stdout
    assert "weight: 3.0 -> 4.0" in diff

    cli("rubrics", "approve", "demo/sleep-advice@2", "--reviewer", "ann")
    approved = run_cli(
        "rubrics", "list", "--status", "approved", "--json", database_url=database_url
    )
    assert [item["ref"] for item in approved.json()] == ["demo/sleep-advice@2"]
    twice = run_cli("rubrics", "approve", "demo/sleep-advice@2", database_url=database_url)
    assert twice.code == 0  # idempotent, so scripts can approve what may already be approved
    assert "demo/sleep-advice@2 (id 4) is already approved" in twice.stdout
    retired = run_cli("rubrics", "retire", "demo/sleep-advice@1", database_url=database_url)
    assert retired.code == 0
    refused = cli_error("rubrics", "approve", "demo/sleep-advice@1", database_url=database_url)
    assert refused == "error: demo/sleep-advice@1 is retired; approve a newer version instead"

    assert (
        "9 completion(s) added"
        in cli("completions", "add", str(EXAMPLES / "completions.jsonl")).stdout
    )
    assert (
        "0 completion(s) added, 9 already stored"
        in cli("completions", "add", str(EXAMPLES / "completions.jsonl")).stdout
    )
    completions = run_cli(
        "completions", "list", "--json", "--prompt", "demo-haiku", database_url=database_url
    )
    assert [c["external_id"] for c in completions.json()] == [
        "demo-haiku/a",
        "demo-haiku/b",
        "demo-haiku/c",
    ]


def test_unknown_reference_is_one_line(sqlite_url: str) -> None:
    for args, message in [
        (("rubrics", "show", "nope"), "error: no rubric named 'nope'"),
        (("rubrics", "show", "424242"), "error: no rubric version with id 424242"),
        (("rubrics", "diff", "nope", "nope@2"), "error: no rubric named 'nope'"),
        (("rubrics", "approve", "nope@1"), "error: no rubric named 'nope'"),
    ]:
        assert cli_error(*args, database_url=sqlite_url) == message


def test_unmigrated_database_says_what_to_do(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.sqlite'}"
    refused = cli_error("rubrics", "list", database_url=url)
    assert refused == f"error: database {url} is empty: run `rubricsvc db upgrade`"
    assert run_cli("db", "upgrade", database_url=url).code == 0
    assert run_cli("rubrics", "list", database_url=url).code == 0


def test_bad_completions_store_nothing(sqlite_url: str, tmp_path: Path) -> None:
    cli_ok("rubrics", "add", str(EXAMPLES / "rubrics.yaml"), database_url=sqlite_url)
    path = tmp_path / "c.jsonl"
    path.write_text(
        '{"prompt_external_id": "demo-haiku", "text": "fine"}\n'
        '{"prompt_external_id": "no-such-prompt", "text": "orphan"}\n'
    )
    refused = cli_error("completions", "add", str(path), database_url=sqlite_url)
    assert refused == f"error: {path}:2: no prompt with external id 'no-such-prompt'"
    listed = run_cli("completions", "list", "--json", database_url=sqlite_url).json()
    assert listed == []

    path.write_text('{"text": "which prompt?"}\n')
    result = run_cli("completions", "add", str(path), database_url=sqlite_url)
    assert (
        "give exactly one of prompt_id, prompt_external_id, prompt, prompt_messages"
        in result.stderr
    )


@pytest.mark.model
def test_scoring_with_the_embedded_model_then_from_the_cache(sqlite_url: str) -> None:
    """The demo's path: approve, score with the bundled model, score again from the cache."""

    def score(*args: str) -> str:
        return cli_ok(
            "score",
            "--judge",
            "embedded",
            "--mode",
            "criterion-prob",
            *args,
            database_url=sqlite_url,
        ).stdout

    add_examples(sqlite_url)
    report = json.loads(score("--json"))
    assert (report["judgments"], report["computed"], report["failed"], report["checks"]) == (
        39,
        39,
        0,
        6,
    )
    assert report["backend_requests"] == 39
    assert len(report["scores"]) == 9
    for scored in report["scores"]:
        assert scored["status"] == "ok" and scored["coverage"] == 1.0
        assert 0.0 <= scored["value"] <= 1.0
        judged = [c for c in scored["criteria"] if c["status"] == "ok"]
        assert all(0.0 < c["value"] < 1.0 for c in judged)  # probabilities, not hard verdicts

    again = score()
    assert (
        "39 judgment(s): 0 computed, 39 from the cache, 0 failed; 6 check(s); 0 backend request(s)"
        in again
    )
    assert "Everything came from the cache: no judge was called." in again
    ranked = [line for line in again.splitlines() if "demo-" in line and "│" in line]
    assert len(ranked) >= 9

    exported = run_cli(
        "scores", "export", "--judge", "embedded", "--aggregation", "rar", database_url=sqlite_url
    )
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert sorted(line["completion_external_id"] for line in lines) == sorted(
        s["completion_external_id"] for s in report["scores"]
    )
    by_id = {s["completion_id"]: s["value"] for s in report["scores"]}
    assert all(line["score"] == pytest.approx(by_id[line["completion_id"]]) for line in lines)
