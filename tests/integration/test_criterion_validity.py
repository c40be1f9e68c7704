"""Criterion validity: each criterion's agreement with its pointwise labels under a judge, in
`rubrics show --validity`, on the analytics page, as a review-queue filter and as proposals of
`rubrics refine`. The judge is the scripted one (P(yes) = 0.9 on every criterion), and the
labels say "not met" on every labelled answer for one criterion of the sleep rubric."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.api import create_app
from rubricsvc.apikeys import create_key
from rubricsvc.db import make_engine, session_scope
from rubricsvc.models import RubricVersion
from rubricsvc.rubrics.repository import resolve_version
from tests.api_harness import settings_for
from tests.cli_runner import add_examples, cli_ok
from tests.helpers import add_scripted_judge, read_database
from tests.integration.test_ui import sign_in

SLEEP, RECURSION = "demo/sleep-advice@1", "demo/explain-recursion@1"
WRONG = 2  # the criterion of SLEEP the labellers say no answer meets: "limiting caffeine"


def _labels() -> list[dict[str, Any]]:
    lines = []
    for rubric, prompt, criteria in (
        (SLEEP, "sleep", (1, 2, 3, 4)),
        (RECURSION, "recursion", (1, 2)),
    ):
        for side in ("a", "b", "c"):
            for criterion in criteria:
                for labeller in ("ann", "bob"):
                    lines.append(
                        {
                            "kind": "pointwise",
                            "completion": f"demo-{prompt}/{side}",
                            "rubric": rubric,
                            "criterion": criterion,
                            "met": not (rubric == SLEEP and criterion == WRONG),
                            "labeller": labeller,
                            "item": f"{prompt}/{side}#{criterion}",
                        }
                    )
    return lines


def _setup(url: str, tmp_path: Path) -> None:
    add_examples(url)
    add_scripted_judge(url, tmp_path)
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in _labels()), encoding="utf-8")
    cli_ok("labels", "import", "jsonl", str(path), "--name", "demo-criteria", database_url=url)
    # The judge's verdicts on what the labels need (validity only reads stored verdicts).
    cli_ok(
        "judges", "evaluate", "--judge", "scripted", "--labels", "demo-criteria", database_url=url
    )


def test_the_cli_flags_the_criterion_the_judge_gets_wrong(sqlite_url: str, tmp_path: Path) -> None:
    _setup(sqlite_url, tmp_path)
    shown = json.loads(
        cli_ok(
            "rubrics", "show", SLEEP, "--validity", "scripted", "--json", database_url=sqlite_url
        ).stdout
    )
    rows = shown["validity"]["criteria"]
    assert [row["criterion"] for row in rows] == [1, 2, 3, 4]  # the labelled ones
    assert [row["flagged"] for row in rows] == [False, True, False, False]
    assert rows[1]["agreement"] == 0.0 and rows[1]["n"] == rows[1]["n_labelled"] == 3
    assert [row["agreement"] for row in rows if not row["flagged"]] == [1.0, 1.0, 1.0]
    assert rows[0]["agreement_ci"] == [1.0, 1.0]

    table = cli_ok(
        "rubrics", "show", SLEEP, "--validity", "scripted", database_url=sqlite_url
    ).stdout
    flagged = [line for line in table.splitlines() if "FLAGGED" in line]
    assert len(flagged) == 1 and "2. agreement 0.000" in flagged[0] and "caffeine" in flagged[0]
    assert "flagged criteria: 2" in table
    # A threshold no agreement is below flags nothing; a rubric the judge gets right neither.
    none = cli_ok(
        "rubrics", "show", SLEEP, "--validity", "scripted", "--below", "0", database_url=sqlite_url
    ).stdout
    assert "FLAGGED" not in none
    right = cli_ok("rubrics", "show", RECURSION, "--validity", "scripted", database_url=sqlite_url)
    assert "FLAGGED" not in right.stdout and "1. agreement 1.000" in right.stdout


def test_the_page_shows_the_flag_and_the_queue_filters_by_it(
    sqlite_url: str, tmp_path: Path
) -> None:
    _setup(sqlite_url, tmp_path)
    engine = make_engine(sqlite_url)
    with session_scope(engine) as session:
        reader = create_key(session, "cy", ["read"]).secret
        ids = {ref: resolve_version(session, ref).id for ref in (SLEEP, RECURSION)}
    app = create_app(settings_for(sqlite_url), engine)
    with TestClient(app, follow_redirects=False) as client:
        sign_in(client, reader)
        page = client.get(f"/ui/versions/{ids[SLEEP]}/analytics", params={"validity": "scripted"})
        assert page.status_code == 200
        assert '<option value="scripted" selected>' in page.text
        rows = re.findall(r'<tr class="criterion-stats ?[\w-]*">(.*?)</tr>', page.text, re.S)
        flags = ["validity-flag" in row for row in rows]
        assert flags == [False, True, False, False, False, False]
        assert "n=3" in rows[1] and "0.00" in rows[1]
        assert "no labels" in rows[4]  # the pitfall has none
        plain = client.get(f"/ui/versions/{ids[SLEEP]}/analytics")
        assert plain.status_code == 200 and "validity-flag" not in plain.text

        everything = client.get("/ui/queue", params={"status": "any"}).text
        assert SLEEP in everything and RECURSION in everything
        params = {"status": "any", "validity_judge": "scripted", "validity_below": "0.5"}
        filtered = client.get("/ui/queue", params=params).text
        assert (
            SLEEP in filtered and RECURSION not in filtered and "demo/haiku-autumn" not in filtered
        )
        assert 'id="validity-filter"' in filtered
        strict = client.get("/ui/queue", params={**params, "validity_below": "0"}).text
        assert SLEEP not in strict
        unknown = client.get("/ui/queue", params={**params, "validity_judge": "nobody"})
        assert unknown.status_code == 200 and 'id="validity_judge-error"' in unknown.text
    engine.dispose()


def test_refine_proposes_rewording_or_removing_it_and_changes_nothing(
    sqlite_url: str, tmp_path: Path
) -> None:
    _setup(sqlite_url, tmp_path)
    cli_ok("score", "--judge", "scripted", "--rubric", SLEEP, database_url=sqlite_url)
    flags = cli_ok(
        "rubrics", "refine", SLEEP, "--judge", "scripted", "--no-propose", database_url=sqlite_url
    ).stdout
    proposals = [line for line in flags.splitlines() if "reword or remove" in line]
    assert len(proposals) == 1 and "#2 Advises limiting caffeine" in proposals[0]
    assert "agreement 0.00" in proposals[0] and "n=3" in proposals[0]

    # With a (scripted) generator: a new draft that keeps the criterion and says why.
    generator = tmp_path / "generator.yaml"
    reply = {
        "criteria": [
            {"text": "Names a bedtime routine", "category": "important", "theme": "coverage"}
        ]
    }
    generator.write_text(
        yaml.safe_dump(
            {"backend": "scripted", "backend_options": {"reply": json.dumps(reply)}, "retries": 0}
        )
    )
    cli_ok(
        "rubrics",
        "refine",
        SLEEP,
        "--judge",
        "scripted",
        "--generator",
        str(generator),
        database_url=sqlite_url,
    )

    def drafts(session: Session) -> tuple[list[str], str, list[dict[str, Any]], list[str]]:
        refined = resolve_version(session, "demo/sleep-advice@2")
        old = resolve_version(session, SLEEP)
        return (
            [c.text for c in refined.criteria],
            refined.note or "",
            refined.origin_detail["criterion_validity"],
            [c.text for c in old.criteria],
        )

    criteria, note, detail, old = read_database(sqlite_url, drafts)
    assert criteria[: len(old)] == old and criteria[-1] == "Names a bedtime routine"
    assert "Reword or remove, the judge disagrees with the labellers (kept for review): #2" in note
    assert [d["position"] for d in detail] == [WRONG - 1] and detail[0]["agreement"] == 0.0
    assert (
        read_database(
            sqlite_url,
            lambda s: s.scalar(select(RubricVersion.id).where(RubricVersion.number == 3)),
        )
        is None
    )


def test_a_piped_evaluation_reports_its_progress_in_lines(sqlite_url: str, tmp_path: Path) -> None:
    """A long `judges evaluate` run into a log (no terminal) still says how far it is."""
    add_examples(sqlite_url)
    add_scripted_judge(sqlite_url, tmp_path)
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in _labels()), encoding="utf-8")
    cli_ok(
        "labels", "import", "jsonl", str(path), "--name", "demo-criteria", database_url=sqlite_url
    )
    result = cli_ok(
        "judges", "evaluate", "--judge", "scripted", "--labels", "demo-criteria",
        database_url=sqlite_url,
    )  # fmt: skip
    lines = [line for line in result.stderr.splitlines() if line.startswith("judging: ")]
    assert lines and "(100%)" in lines[-1]
    assert len(lines) <= 11  # one line per 10% step at most
