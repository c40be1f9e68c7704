"""`rubricsvc import prometheus`: evaluation records (instruction, response, reference answer,
1-5 score rubric with level texts) imported, scored holistically with the reference and the
level texts in the judge's prompt, and exported joined to their record ids.

The record is prometheus-eval's own README example (tests/data/prometheus/SOURCE.txt). The
judge is scripted (``backend_options``: a fixed reply, and every prompt it is shown written
to a file), so the test reads exactly what the judge would read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import func, select

from rubricsvc.models import Completion, Prompt, Rubric, RubricVersion
from tests.cli_runner import cli_error, cli_ok
from tests.helpers import read_database

DATA = Path(__file__).resolve().parents[1] / "data" / "prometheus" / "direct_assessment.json"
RECORD: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))[0]


def _judge(tmp_path: Path, database_url: str, reply: str) -> Path:
    shown = tmp_path / "shown.jsonl"
    judges = tmp_path / "judges.yaml"
    judges.write_text(
        yaml.safe_dump(
            {
                "judges": [
                    {
                        "name": "prometheus-ref",
                        "backend": "scripted",
                        "mode": "holistic",
                        "reference": True,
                        "backend_options": {"reply": reply, "record_to": str(shown)},
                    }
                ]
            }
        )
    )
    cli_ok("judges", "add", str(judges), database_url=database_url)
    return shown


def test_a_record_is_scored_holistically_with_its_reference_and_levels_and_exported(
    database_url: str, tmp_path: Path
) -> None:
    evaluation = tmp_path / "evaluation.json"
    record = {**RECORD, "id": "readme-empathy", "orig_score": 5, "orig_feedback": "Warm."}
    evaluation.write_text(json.dumps([record]))
    imported = cli_ok("import", "prometheus", str(evaluation), database_url=database_url)
    assert "prompts:     1 added, 0 already stored" in imported.stdout
    assert "rubrics:     1 created" in imported.stdout
    assert "completions: 1 added, 0 already stored" in imported.stdout
    again = cli_ok("import", "prometheus", str(evaluation), database_url=database_url)
    assert "completions: 0 added, 1 already stored" in again.stdout

    def stored(s: Any) -> tuple[Any, ...]:
        prompt = s.scalars(select(Prompt)).one()
        completion = s.scalars(select(Completion)).one()
        version = s.scalars(select(RubricVersion)).one()
        return (
            prompt.external_id,
            prompt.messages,
            prompt.reference_answer,
            completion.external_id,
            completion.text,
            completion.meta,
            version.ref,
            version.rubric.prompt_id == prompt.id,
            version.criteria[0].scale,
        )

    (p_id, messages, reference, c_id, text, meta, ref, bound, scale) = read_database(
        database_url, stored
    )
    assert p_id == c_id == "prometheus/readme-empathy"
    assert messages == [{"role": "user", "content": RECORD["orig_instruction"]}]
    assert reference == RECORD["orig_reference_answer"]
    assert text == RECORD["orig_response"]
    assert meta["record_id"] == "readme-empathy" and meta["source_score"] == 5
    assert meta["source_feedback"] == "Warm." and meta["rubric"] == "prometheus/readme-empathy"
    assert ref == "prometheus/readme-empathy@1" and bound  # the prompt's own rubric
    assert [lv["description"] for lv in scale["levels"]] == [
        RECORD[f"orig_score{n}_description"] for n in range(1, 6)
    ]

    shown = _judge(tmp_path, database_url, "Empathetic, a little generic.\nSCORE: 4")
    result = cli_ok(
        "score",
        "--judge",
        "prometheus-ref",
        "--include-drafts",
        "--prompt",
        "prometheus/readme-empathy",
        "--json",
        database_url=database_url,
    )
    report = json.loads(result.stdout)
    (scored,) = report["scores"]
    assert report["aggregation"] == "holistic"
    assert scored["value"] == 0.75  # 4 on the rubric's 1..5, not on 1..10
    assert scored["rubric"] == "prometheus/readme-empathy@1"

    (chat,) = [json.loads(line) for line in shown.read_text().splitlines()]
    user = chat[-1]["content"]
    assert f"<reference_answer>\n{RECORD['orig_reference_answer']}\n</reference_answer>" in user
    assert f"<response>\n{RECORD['orig_response']}\n</response>" in user
    for n in range(1, 6):
        assert f"  Score {n}: {RECORD[f'orig_score{n}_description']}\n" in user + "\n"
    assert user.endswith("SCORE: <one of 1, 2, 3, 4, 5>")
    assert "from 1 (not at all) to 10" not in user
    # The reference comes before the response, the rubric after it.
    assert user.index("<reference_answer>") < user.index("<response>") < user.index("Score 1:")

    exported = cli_ok(
        "scores",
        "export",
        "--judge",
        "prometheus-ref",
        "--aggregation",
        "holistic",
        "--meta",
        "record_id=readme-empathy",
        "--source",
        "prometheus",
        "--rubric",
        "prometheus/readme-empathy",
        database_url=database_url,
    )
    (line,) = [json.loads(x) for x in exported.stdout.splitlines()]
    assert line["completion_external_id"] == "prometheus/readme-empathy"
    assert line["prompt_external_id"] == "prometheus/readme-empathy"
    assert line["metadata"]["record_id"] == "readme-empathy"
    assert line["metadata"]["source_score"] == 5  # the source's own grade, beside ours
    assert line["score"] == 0.75 and line["source"] == "prometheus"


def test_a_record_without_an_id_is_named_by_file_and_position(
    sqlite_url: str, tmp_path: Path
) -> None:
    cli_ok("import", "prometheus", str(DATA), database_url=sqlite_url)
    names = read_database(sqlite_url, lambda s: s.scalars(select(Rubric.name)).all())
    external = read_database(sqlite_url, lambda s: s.scalars(select(Completion.external_id)).all())
    assert names == ["prometheus/direct_assessment-1"]
    assert external == ["prometheus/direct_assessment-1"]


def test_a_malformed_record_stores_nothing(database_url: str, tmp_path: Path) -> None:
    broken = {k: v for k, v in RECORD.items() if k != "orig_response"}
    path = tmp_path / "eval.jsonl"
    path.write_text(json.dumps({**RECORD, "id": "ok"}) + "\n" + json.dumps(broken) + "\n")
    error = cli_error("import", "prometheus", str(path), database_url=database_url)
    assert error.startswith("error: ") and "eval.jsonl:2" in error and "response" in error
    assert len(error.splitlines()) == 1
    counts = read_database(
        database_url,
        lambda s: [s.scalar(select(func.count()).select_from(t)) for t in (Prompt, Completion)],
    )
    assert counts == [0, 0]


def test_export_filters_naming_nothing_are_errors(database_url: str, tmp_path: Path) -> None:
    evaluation = tmp_path / "evaluation.json"
    evaluation.write_text(json.dumps([{**RECORD, "id": "r1"}]))
    cli_ok("import", "prometheus", str(evaluation), database_url=database_url)
    _judge(tmp_path, database_url, "ok\nSCORE: 5")
    cli_ok("score", "--judge", "prometheus-ref", "--include-drafts", database_url=database_url)
    base = ("scores", "export", "--judge", "prometheus-ref", "--aggregation", "holistic")
    for extra, message in [
        (("--rubric", "prometheus/nope"), "no rubric named 'prometheus/nope'"),
        (("--rubric", "prometheus/r1@7"), "has no version 7"),
        (("--source", "nobody"), "no completion has source 'nobody'"),
        (("--prompt", "nope"), "no prompt with external id 'nope'"),
        (("--tag", "topic=none"), "no prompt is tagged topic=none"),
        (("--meta", "record_id=r2"), "no completion has metadata record_id=r2"),
    ]:
        error = cli_error(*base, *extra, database_url=database_url)
        assert message in error and len(error.splitlines()) == 1, error
    unknown_judge = cli_error(
        "scores",
        "export",
        "--judge",
        "nobody",
        "--aggregation",
        "holistic",
        database_url=database_url,
    )
    assert "no stored judge config named 'nobody'" in unknown_judge
    everything = cli_ok(*base, database_url=database_url)
    (line,) = [json.loads(x) for x in everything.stdout.splitlines()]
    assert line["score"] == 1.0 and line["metadata"]["record_id"] == "r1"
