"""``rubricsvc rubrics evolution show`` and ``export`` on a run that evolved one prompt twice
(the step tests' scripted generator and table judge), and an exported set added back by a
person as a draft of the persistent rubric."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy.orm import Session

from rubricsvc import db
from rubricsvc.models import Origin, VersionStatus
from rubricsvc.rubrics.repository import resolve_version
from tests.cli_runner import run_cli
from tests.helpers import read_database
from tests.integration.test_evolution_step import (
    STEP0_ANSWER,
    STEP0_VALUES,
    Generator,
    TableJudge,
    _settings,
    _step,
)


def _evolved_twice(url: str) -> None:
    engine = db.make_engine(url)
    try:
        with db.session_scope(engine) as session:
            _step(session, 0, Generator(STEP0_ANSWER), TableJudge(STEP0_VALUES), _settings())
            _step(session, 1, Generator("garbage"), TableJudge({}), _settings())
    finally:
        engine.dispose()


def test_show_lists_the_run_and_a_prompts_history(sqlite_url: str) -> None:
    _evolved_twice(sqlite_url)
    summary = run_cli("rubrics", "evolution", "show", "run-1", database_url=sqlite_url)
    assert summary.code == 0, summary.stderr
    assert "t/sleep@1" in summary.stdout and "evolved/run-1/prompt-1@1" in summary.stdout
    assert "1/2" in summary.stdout  # generator failed once in two calls

    history = run_cli(
        "rubrics",
        "evolution",
        "show",
        "run-1",
        "--prompt",
        "t/sleep-prompt",
        database_url=sqlite_url,
    )
    assert history.code == 0, history.stderr
    lines = history.stdout.splitlines()
    assert "step 0: evolved t/sleep@1 -> evolved/run-1/prompt-1@1" in lines
    assert "  + Mentions a wind-down routine" in lines
    assert "  x Does not mention caffeine (mirror of 'Mentions caffeine')" in lines
    assert "step 1: generator_failed evolved/run-1/prompt-1@1 -> evolved/run-1/prompt-1@1" in lines

    as_json = run_cli(
        "rubrics", "evolution", "show", "run-1", "--prompt", "t/sleep-prompt", "--json",
        database_url=sqlite_url,
    )  # fmt: skip
    data = json.loads(as_json.stdout)
    bedroom = next(c for c in data["evolved_criteria"] if c["text"].startswith("Suggests"))
    assert (bedroom["state"], bedroom["appeared_at"], bedroom["inactive_at"]) == ("inactive", 0, 0)
    assert bedroom["inactive_reason"] == "past max_active"
    assert bedroom["spreads"][0]["values"] == [1, 0, 0, 0]
    assert [r["text"][:2] for r in data["steps_taken"][0]["rollouts"]] == ["A:", "B:", "C:", "D:"]


def test_an_exported_set_is_a_rubric_file_a_person_adds_and_approves(
    sqlite_url: str, tmp_path: Path
) -> None:
    _evolved_twice(sqlite_url)
    path = tmp_path / "evolved.json"
    exported = run_cli(
        "rubrics", "evolution", "export", "run-1", "--prompt", "t/sleep-prompt", "--name", "t/sleep",
        "-o", str(path), database_url=sqlite_url,
    )  # fmt: skip
    assert exported.code == 0, exported.stderr
    data = json.loads(path.read_text())
    assert data["name"] == "t/sleep" and data["origin"] == "evolved"
    assert data["prompt"]["external_id"] == "t/sleep-prompt"
    assert [c["text"] for c in data["criteria"]][2:] == [
        "Mentions a wind-down routine",
        "Recommends sleeping pills",
    ]

    added = run_cli("rubrics", "add", str(path), database_url=sqlite_url)
    assert added.code == 0 and "new version  t/sleep@2" in added.stdout, added.stdout
    approved = run_cli("rubrics", "approve", "t/sleep@2", database_url=sqlite_url)
    assert approved.code == 0, approved.stderr

    def read(session: Session) -> tuple[Origin, VersionStatus, str | None]:
        version = resolve_version(session, "t/sleep@2")
        assert version.parent is not None
        return version.origin, version.status, version.parent.ref

    # A draft of the persistent rubric, grown from its first version, approved by a person.
    assert read_database(sqlite_url, read) == (Origin.EVOLVED, VersionStatus.APPROVED, "t/sleep@1")


def test_show_names_an_unknown_run(sqlite_url: str) -> None:
    result = run_cli("rubrics", "evolution", "show", "nope", database_url=sqlite_url)
    assert result.code != 0 and "no evolution run named 'nope'" in result.stderr


def test_keys_opens_and_closes_a_run_to_keys_by_name(sqlite_url: str) -> None:
    _evolved_twice(sqlite_url)
    opened = run_cli(
        "rubrics",
        "evolution",
        "keys",
        "run-1",
        "--add",
        "trainer",
        "--add",
        "ci",
        database_url=sqlite_url,
    )
    assert opened.code == 0, opened.stderr
    assert "keys trainer, ci" in opened.stdout
    closed = run_cli(
        "rubrics", "evolution", "keys", "run-1", "--remove", "ci", database_url=sqlite_url
    )
    assert closed.code == 0, closed.stderr
    shown = run_cli("rubrics", "evolution", "show", "run-1", "--json", database_url=sqlite_url)
    assert json.loads(shown.stdout)["keys"] == ["trainer"]
    unknown = run_cli(
        "rubrics", "evolution", "keys", "no-run", "--add", "x", database_url=sqlite_url
    )
    assert unknown.code == 3 and "no evolution run named 'no-run'" in unknown.stderr
