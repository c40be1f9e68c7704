"""Rubric assignment: completions and prompts name the shared rubrics they are scored against,
one `rubricsvc score` run scores them all (one model load), `--dry-run` says what it would
judge, and a shared `--rubric` never widens the selection.

The data: the Auto-J scenario rubrics (tests/data/autoj) and 20 PandaLM pairs turned into 40
completions that name their scenario rubric (tests/data/pandalm_autoj, see its SOURCE.txt).
Four prompts' pairs are scored by a model judge (one model load for all, counted): the tiny one
of the embedded model's architecture (tests/tiny_model.py), whose forward pass the rubrics'
long prompts cost milliseconds; the 40-completion run by a scripted judge on each database,
where the selection and counts are what is tested.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc import db
from rubricsvc.models import Completion, Judgment, Prompt, RubricAssignment, RubricVersion
from rubricsvc.scoring.selection import Selection, select_work
from tests.cli_runner import cli_error, cli_ok, run_cli
from tests.helpers import add_scripted_judge
from tests.tiny_model import add_tiny_judge

DATA = Path(__file__).resolve().parents[1] / "data"
AUTOJ = DATA / "autoj"
PAIRS = DATA / "pandalm_autoj"


def _records() -> list[dict]:
    lines = (PAIRS / "completions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _count(url: str, model: type) -> int:
    engine = db.make_engine(url)
    try:
        with Session(engine) as session:
            return int(session.scalar(select(func.count()).select_from(model)) or 0)
    finally:
        engine.dispose()


# The model judge's share of the forty pairs: the first pair of each of the first four
# rubrics in the file. What the forty check beyond the model (selection, dry runs, the cache,
# one invocation for every rubric version) does not depend on the judge: the scripted judge's
# test below checks it on each database.
MODEL_PROMPTS = ("pandalm/0", "pandalm/4", "pandalm/6", "pandalm/16")


@pytest.mark.model
def test_a_model_judge_scores_pairs_under_four_rubrics_in_one_run(
    sqlite_url: str, tmp_path: Path
) -> None:
    """A model judge scores four prompts' pairs, each under its own Auto-J rubric, in one
    invocation with one model load: every score ok and in [0, 1]; then all from the cache."""
    url = sqlite_url
    judge = add_tiny_judge(url, tmp_path)
    cli_ok("rubrics", "import", "--format", "autoj", str(AUTOJ), database_url=url)
    cli_ok("completions", "add", str(PAIRS / "completions.jsonl"), database_url=url)
    chosen = [r for r in _records() if r["prompt_external_id"] in MODEL_PROMPTS]
    expected = {r["external_id"]: f"{r['rubric']}@1" for r in chosen}
    assert len(chosen) == 8 and len(set(expected.values())) == 4
    flags = [flag for prompt in MODEL_PROMPTS for flag in ("--prompt", prompt)]
    command = ("score", "--judge", judge, "--include-drafts", *flags, "--json")
    run = cli_ok(*command, database_url=url).json()
    assert run["model_loads"] == 1 and run["failed"] == 0
    assert run["computed"] == run["judgments"] > 0 and run["cached"] == 0
    assert {s["completion_external_id"]: s["rubric"] for s in run["scores"]} == expected
    assert all(s["status"] == "ok" and 0.0 <= s["value"] <= 1.0 for s in run["scores"])
    assert _count(url, Judgment) == run["computed"]
    again = cli_ok(*command, database_url=url).json()
    assert again["model_loads"] == 0 and again["computed"] == 0
    assert [s["value"] for s in again["scores"]] == [s["value"] for s in run["scores"]]


def test_forty_pair_selection_and_counts_on_each_database(
    database_url: str, tmp_path: Path
) -> None:
    add_scripted_judge(database_url, tmp_path)
    run = _forty_pair_run(database_url, tmp_path, "scripted")
    # The scripted judge gives P(yes) = 0.9 on every criterion (Auto-J rubrics have no pitfalls).
    assert all(s["status"] == "ok" and s["value"] == pytest.approx(0.9) for s in run["scores"])


def _forty_pair_run(url: str, tmp_path: Path, judge: str) -> dict:
    """Import the scenario rubrics and the 40 completions, dry-run, score one pair, dry-run
    again (its judgments now cached), score everything in one invocation, then once more
    (all from the cache, no model load); the counts must agree throughout. The full run's
    report is returned."""
    cli_ok("rubrics", "import", "--format", "autoj", str(AUTOJ), database_url=url)
    added = cli_ok("completions", "add", str(PAIRS / "completions.jsonl"), database_url=url)
    # Two records per prompt (a pair) are one prompt with two completions, not an error.
    assert "40 completion(s) added, 0 already stored; 40 rubric assignment(s) added" in (
        added.stdout
    )
    prompts = cli_ok("prompts", "list", "--json", database_url=url).json()
    assert len(prompts) == 20 and {p["completions"] for p in prompts} == {2}
    # An unrelated completion whose prompt has no rubric: never scored, and said why.
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"prompt": "Unrelated?", "text": "Yes.", "source": "x"}) + "\n")
    cli_ok("completions", "add", str(other), database_url=url)
    expected = {r["external_id"]: f"{r['rubric']}@1" for r in _records()}

    # The imported rubrics are drafts: the hint says so (and only for the 40).
    drafts = cli_ok("score", "--judge", judge, "--dry-run", database_url=url).stdout
    assert "40 completion(s) have only draft rubric versions" in " ".join(drafts.split())
    assert "1 completion(s) have no rubric: their prompt has none" in " ".join(drafts.split())

    def score(*flags: str) -> dict:
        """``score --judge JUDGE --include-drafts FLAGS --json``, its report read."""
        command = ("score", "--judge", judge, "--include-drafts", *flags, "--json")
        return cli_ok(*command, database_url=url).json()

    # One pair first, so the dry run has something cached to count.
    first = score("--prompt", "pandalm/565")
    assert [s["rubric"] for s in first["scores"]] == ["autoj/writing_advertisement@1"] * 2
    judgments_before = _count(url, Judgment)
    assert judgments_before == first["computed"] > 0

    dry = score("--dry-run")
    assert _count(url, Judgment) == judgments_before  # the dry run judged and stored nothing
    assert dry["dry_run"] is True
    assert (dry["completions"], dry["scores"]) == (40, 40)
    assert len(dry["versions"]) == len(set(expected.values())) == 17
    assert sum(v["completions"] for v in dry["versions"]) == 40
    assert dry["cached"] == first["judgments"]
    assert dry["judgments"] == sum(v["judgments"] for v in dry["versions"])
    assert (
        dry["without_reasons"]["no_rubric"] == dry["without_rubric"]
        and len(dry["without_rubric"]) == 1
    )
    text = cli_ok(
        "score", "--judge", judge, "--include-drafts", "--dry-run", database_url=url
    ).stdout
    flat = " ".join(text.split())
    assert f"{dry['judgments']} judgment(s): {dry['cached']} from the cache, " in flat
    assert "Nothing was judged." in flat and "autoj/writing_advertisement@1" in flat

    run = score()
    assert run["model_loads"] == 1  # every rubric of every completion, one backend
    assert (run["judgments"], run["cached"]) == (dry["judgments"], dry["cached"])
    assert run["computed"] == dry["judgments"] - dry["cached"] and run["failed"] == 0
    assert {s["completion_external_id"]: s["rubric"] for s in run["scores"]} == expected
    assert run["without_rubric"] == dry["without_rubric"]

    again = score("--dry-run")
    assert again["cached"] == again["judgments"] == dry["judgments"]
    rerun = score()
    assert rerun["model_loads"] == 0 and rerun["computed"] == 0
    assert [s["value"] for s in rerun["scores"]] == [s["value"] for s in run["scores"]]
    return run


def test_a_shared_rubric_scores_only_what_is_assigned_or_selected(
    database_url: str, tmp_path: Path
) -> None:
    url = database_url
    cli_ok("rubrics", "import", "--format", "autoj", str(AUTOJ), database_url=url)
    cli_ok("completions", "add", str(PAIRS / "completions.jsonl"), database_url=url)
    add_scripted_judge(url, tmp_path)

    def score(*args: str) -> dict:
        return cli_ok(
            "score", "--judge", "scripted", "--include-drafts", "--json", *args, database_url=url
        ).json()

    shared = score("--rubric", "autoj/writing_advertisement@1")
    assert sorted(s["completion_external_id"] for s in shared["scores"]) == [
        "pandalm/565/1",
        "pandalm/565/2",
    ]
    # Explicitly selected completions are scored against it too, and only they.
    chosen = score("--rubric", "autoj/chitchat@1", "--prompt", "pandalm/0")
    assert sorted(s["completion_external_id"] for s in chosen["scores"]) == [
        "pandalm/0/1",
        "pandalm/0/2",
    ]
    assert {s["rubric"] for s in chosen["scores"]} == {"autoj/chitchat@1"}
    # Assigned to nothing, nothing selected: said so, nothing scored.
    before = _count(url, Judgment)
    error = cli_error(
        "score",
        "--judge",
        "scripted",
        "--include-drafts",
        "--rubric",
        "autoj/others@1",
        database_url=url,
    )
    assert error.startswith("error: no completion is assigned to 'autoj/others'")
    assert len(error.splitlines()) == 1
    assert _count(url, Judgment) == before


def test_tag_rules_assign_rubrics_to_prompts(database_url: str, tmp_path: Path) -> None:
    url = database_url
    cli_ok("rubrics", "import", "--format", "autoj", str(AUTOJ), database_url=url)
    added = cli_ok(
        "prompts",
        "add",
        str(PAIRS / "prompts.jsonl"),
        "--assign",
        "scenario:writing_advertisement -> autoj/writing_advertisement",
        database_url=url,
    )
    assert "20 prompt(s) added, 0 already stored" in added.stdout
    assert "1 prompt assignment(s) added by tag rules" in added.stdout
    rules = tmp_path / "rules.txt"
    rules.write_text(
        "# scenario rubrics\n"
        "scenario:planning -> autoj/planning\n"
        "\n"
        "app=Tasty -> autoj/writing_cooking_recipe\n"
        "scenario:nothing_here -> autoj/others\n"
    )
    assigned = run_cli("prompts", "assign", "--file", str(rules), database_url=url)
    assert assigned.code == 0, assigned.stderr
    assert "5 prompt assignment(s) added by tag rules" in assigned.stdout  # 2 planning, 3 Tasty
    assert "rule 'scenario:nothing_here -> autoj/others' matched no prompt" in assigned.stderr
    again = cli_ok("prompts", "assign", "--file", str(rules), database_url=url)
    assert "0 prompt assignment(s) added" in again.stdout
    assert _count(url, RubricAssignment) == 6

    # Completions without `rubric` fields get their prompts' rubrics.
    bare = tmp_path / "bare.jsonl"
    bare.write_text(
        "".join(
            json.dumps({k: v for k, v in r.items() if k not in ("rubric", "prompt")}) + "\n"
            for r in _records()
        )
    )
    bare_added = cli_ok(
        "completions",
        "add",
        str(bare),
        "--assign",
        "app=Google Search -> autoj/brainstorming",
        database_url=url,
    )
    assert "1 prompt assignment(s) added by tag rules" in bare_added.stdout
    add_scripted_judge(url, tmp_path)
    dry = cli_ok(
        "score",
        "--judge",
        "scripted",
        "--include-drafts",
        "--dry-run",
        "--json",
        database_url=url,
    ).json()
    assert {v["rubric"]: v["completions"] for v in dry["versions"]} == {
        "autoj/writing_advertisement@1": 2,
        "autoj/planning@1": 4,
        "autoj/writing_cooking_recipe@1": 6,
        "autoj/brainstorming@1": 2,
    }
    assert len(dry["without_rubric"]) == 40 - 14

    # Bad rules and unknown rubrics: one line, nothing stored.
    bad = cli_error("prompts", "assign", "scenario planning autoj/planning", database_url=url)
    assert bad == (
        "error: --assign: expected 'KEY:VALUE -> RUBRIC', got 'scenario planning autoj/planning'"
    )
    rules.write_text("scenario:planning -> autoj/planning\nscenario:x -> autoj/no-such\n")
    unknown = cli_error("prompts", "assign", "--file", str(rules), database_url=url)
    assert unknown == "error: no rubric named 'autoj/no-such'"
    versioned = cli_error(
        "prompts", "assign", "scenario:planning -> autoj/planning@1", database_url=url
    )
    assert "assign a rubric by name, not a version" in versioned
    assert _count(url, RubricAssignment) == 7


def test_a_rubric_field_must_name_an_assignable_rubric(database_url: str, tmp_path: Path) -> None:
    url = database_url
    cli_ok("rubrics", "import", "--format", "autoj", str(AUTOJ), database_url=url)
    own = tmp_path / "own.yaml"
    own.write_text(
        yaml.safe_dump(
            {
                "name": "own/sleep",
                "prompt": {"external_id": "sleep", "text": "How can I sleep better?"},
                "criteria": [{"text": "Suggests a regular schedule", "weight": 3}],
            }
        )
    )
    cli_ok("rubrics", "add", str(own), database_url=url)
    records = tmp_path / "c.jsonl"
    good = {
        "prompt": "Write an ad for socks.",
        "text": "Socks!",
        "rubric": "autoj/writing_advertisement",
    }
    for rubric, message in [
        ("autoj/nope", "no rubric named 'autoj/nope'"),
        (
            "own/sleep",
            "rubric 'own/sleep' belongs to prompt 1: only a shared rubric (one with no "
            "prompt) can be assigned to other prompts",
        ),
    ]:
        records.write_text(
            json.dumps(good)
            + "\n"
            + json.dumps({**good, "text": "More socks", "rubric": [rubric]})
            + "\n"
        )
        error = cli_error("completions", "add", str(records), database_url=url)
        assert error == f"error: {records}:2: rubric: {message}"
        assert _count(url, Completion) == 0 and _count(url, RubricAssignment) == 0
    # Its own prompt's rubric needs no assignment: accepted, nothing stored for it.
    records.write_text(
        json.dumps({"prompt_external_id": "sleep", "text": "Sleep early.", "rubric": "own/sleep"})
        + "\n"
    )
    cli_ok("completions", "add", str(records), database_url=url)
    assert _count(url, RubricAssignment) == 0


def test_a_jobs_pinned_shared_versions_score_only_their_assigned_completions(
    database_url: str, tmp_path: Path
) -> None:
    """Chunks of a score job re-select with the versions pinned at submission: a shared one
    must not spread to the other completions of the chunk."""
    url = database_url
    cli_ok("rubrics", "import", "--format", "autoj", str(AUTOJ), database_url=url)
    cli_ok("completions", "add", str(PAIRS / "completions.jsonl"), database_url=url)
    engine = db.make_engine(url)
    try:
        with Session(engine) as session:
            everything = Selection(include_drafts=True)
            work, _ = select_work(session, everything)
            pinned = Selection(
                completion_ids=tuple(sorted({c.id for c, _ in work})),
                include_drafts=True,
                version_ids=tuple(sorted({v.id for _, v in work})),
                shared_by_assignment=True,
            )
            again, without = select_work(session, pinned)
            assert sorted((c.id, v.id) for c, v in again) == sorted((c.id, v.id) for c, v in work)
            assert len(again) == 40 and without == []
            # Without it (a labelled set's rubric), every selected completion gets each version.
            spread, _ = select_work(
                session, Selection(**{**pinned.__dict__, "shared_by_assignment": False})
            )
            assert len(spread) == 40 * 17
            assert session.scalar(select(func.count()).select_from(RubricVersion)) == 58
            assert session.scalar(select(func.count()).select_from(Prompt)) == 20
    finally:
        engine.dispose()
