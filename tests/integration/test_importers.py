"""`rubricsvc import`: public benchmarks end to end, through the real command."""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc.models import Completion, Criterion, Judgment, Prompt, Rubric, RubricVersion, Score
from tests.cli_runner import CliResult, run_cli
from tests.helpers import read_database, table_counts

DATA = Path(__file__).resolve().parents[1] / "data"
HEALTHBENCH = DATA / "healthbench_m42_sample" / "data" / "sample"
HEALTHBENCH_FILE = HEALTHBENCH / "judge_responses.jsonl"
DRB = DATA / "deep_research_bench"
DRB_QUERIES = DRB / "data" / "prompt_data" / "query.jsonl"
DRB_CRITERIA = DRB / "data" / "criteria_data" / "criteria.jsonl"
DRB_REPORTS = DRB / "data" / "test_data" / "cleaned_data" / "claude-3-7-sonnet-latest.jsonl"
CRITERION_FIELDS = {"criterion", "explanation", "weight"}
TABLES = (Prompt, Rubric, RubricVersion, Criterion, Completion, Judgment, Score)


def _ok(*args: str, database_url: str) -> CliResult:
    result = run_cli(*args, database_url=database_url)
    assert result.code == 0, result.stderr
    return result


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _counts(database_url: str) -> dict[str, int]:
    return table_counts(database_url, TABLES)


def test_healthbench_reproduces_the_published_scores(database_url: str) -> None:
    imported = _ok("import", "healthbench", str(HEALTHBENCH_FILE), database_url=database_url)
    assert "100 of 100 equal the score the source states" in imported.stdout

    exported = _ok(
        "scores",
        "export",
        "--aggregation",
        "healthbench",
        "--judge",
        "imported",
        "--format",
        "jsonl",
        database_url=database_url,
    )
    rows = [json.loads(line) for line in exported.stdout.splitlines()]
    ours = {(r["prompt_external_id"], r["completion_external_id"]): r["score"] for r in rows}
    stated = {
        (r["prompt_id"], f"healthbench/{r['prompt_id']}/healthbench-graded"): r["score"]
        for r in _records(HEALTHBENCH_FILE)
    }
    assert len(stated) == 100
    assert ours.keys() == stated.keys()
    for key, value in stated.items():
        assert ours[key] == pytest.approx(value, abs=1e-9), key
    overall = json.loads((HEALTHBENCH / "final_metrics.json").read_text())["overall_score"]
    assert math.fsum(ours.values()) / len(ours) == pytest.approx(overall, abs=1e-9)

    def criteria(session: Session) -> tuple[int, int]:
        total = session.scalar(select(func.count()).select_from(Criterion))
        negative = session.scalar(select(func.count()).where(Criterion.weight < 0))
        return total or 0, negative or 0

    assert read_database(database_url, criteria) == (1157, 342)


def test_healthbench_keeps_repeated_items_and_their_verdicts(sqlite_url: str) -> None:
    _ok("import", "healthbench", str(HEALTHBENCH), database_url=sqlite_url)
    record = _records(HEALTHBENCH_FILE)[68]  # line 69 repeats items 8, 9 and 10 as 11, 12, 13
    verdicts = [v["response_dict"]["criteria_met"] for v in ast.literal_eval(record["responses"])]

    def read(session: Session) -> tuple[RubricVersion, list[Criterion], list[float | None]]:
        version = session.scalars(
            select(RubricVersion)
            .join(Rubric)
            .where(Rubric.name == f"healthbench/{record['prompt_id']}")
        ).one()
        values = [
            session.scalar(select(Judgment.value).where(Judgment.criterion_id == c.id))
            for c in version.criteria
        ]
        return version, list(version.criteria), values

    version, criteria, values = read_database(sqlite_url, read)
    texts = [item["criterion"].strip() for item in record["rubrics"]]
    assert [c.text for c in criteria[:10]] == texts[:10]
    assert [c.text for c in criteria[10:13]] == [
        f"{texts[i]} [repeat 1 of item {i + 1}]" for i in (7, 8, 9)
    ]
    assert [c.weight for c in criteria] == [item["points"] for item in record["rubrics"]]
    assert values == [1.0 if met else 0.0 for met in verdicts]
    assert version.origin_detail["repeated_items"] == [
        {"item": 11, "repeats_item": 8},
        {"item": 12, "repeats_item": 9},
        {"item": 13, "repeats_item": 10},
    ]


@pytest.mark.slow
def test_importing_twice_adds_nothing_and_scoring_needs_no_judge(sqlite_url: str) -> None:
    _ok("import", "healthbench", str(HEALTHBENCH_FILE), database_url=sqlite_url)
    first = _counts(sqlite_url)
    assert first["judgments"] == 1157 and first["scores"] == 100
    again = _ok("import", "healthbench", str(HEALTHBENCH), database_url=sqlite_url)
    assert "0 created, 0 new version(s), 100 unchanged" in again.stdout
    assert "0 added, 1157 already stored" in again.stdout
    assert _counts(sqlite_url) == first

    report = _ok(
        "score",
        "--judge",
        "imported",
        "--aggregation",
        "healthbench",
        "--include-drafts",
        "--json",
        database_url=sqlite_url,
    ).json()
    assert report["backend_requests"] == 0
    assert report["cached"] == report["judgments"] == 1157
    assert _counts(sqlite_url) == first


def test_deepresearch_bench_keeps_every_weight_exactly(sqlite_url: str) -> None:
    imported = _ok("import", "deepresearch-bench", str(DRB), database_url=sqlite_url)
    assert "100 created" in imported.stdout and "(2517 criteria)" in imported.stdout
    tasks = {str(t["id"]): t for t in _records(DRB_CRITERIA)}

    def read(session: Session) -> dict[str, Any]:
        versions = session.scalars(select(RubricVersion).join(Rubric)).all()
        return {
            v.rubric.name: (
                v.dimension_weights,
                [(c.theme, c.text, c.explanation, c.weight) for c in v.criteria],
                v.origin_detail.get("extra_fields", []),
            )
            for v in versions
        }

    stored = read_database(sqlite_url, read)
    assert len(stored) == 100
    assert sum(len(criteria) for _, criteria, _ in stored.values()) == 2517
    for task_id, task in tasks.items():
        dimension_weights, criteria, extra_fields = stored[f"drb/{task_id}"]
        source = [c for items in task["criterions"].values() for c in items]
        assert dimension_weights == task["dimension_weight"]
        assert criteria == [
            (dimension, c["criterion"], c["explanation"], c["weight"])
            for dimension, items in task["criterions"].items()
            for c in items
        ]
        # comment, aspect, rationale_for_weight: no room in a criterion, kept in origin_detail
        extras = [
            {"item": n, **{k: v for k, v in c.items() if k not in CRITERION_FIELDS}}
            for n, c in enumerate(source, start=1)
            if set(c) - CRITERION_FIELDS
        ]
        assert extra_fields == extras

    def completions(session: Session) -> list[tuple[str | None, str | None, str]]:
        rows = session.scalars(select(Completion).order_by(Completion.id)).all()
        return [(c.external_id, c.source, c.text) for c in rows]

    reports = _records(DRB_REPORTS)
    assert read_database(sqlite_url, completions) == [
        (f"drb/{r['id']}/claude-3-7-sonnet-latest", "claude-3-7-sonnet-latest", r["article"])
        for r in reports
    ]
    assert _counts(sqlite_url)["judgments"] == 0


def test_a_zero_point_item_is_kept_aside_with_its_verdict(sqlite_url: str, tmp_path: Path) -> None:
    record = _records(HEALTHBENCH_FILE)[0]
    verdicts = ast.literal_eval(record["responses"])
    record["rubrics"][1]["points"] = verdicts[1]["points"] = 0
    record["responses"] = repr(verdicts)
    met = [v["response_dict"]["criteria_met"] for v in verdicts]
    points = [item["points"] for item in record["rubrics"]]
    positive = sum(p for p in points if p > 0)
    record["score"] = sum(p for p, m in zip(points, met, strict=True) if m) / positive
    path = tmp_path / "judge_responses.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")

    imported = _ok("import", "healthbench", str(path), database_url=sqlite_url)
    assert "1 of 1 equal the score the source states" in imported.stdout

    def read(session: Session) -> tuple[dict[str, Any], dict[str, Any], int]:
        version = session.scalars(select(RubricVersion)).one()
        completion = session.scalars(select(Completion)).one()
        return version.origin_detail, completion.meta, len(version.criteria)

    detail, meta, count = read_database(sqlite_url, read)
    assert count == len(record["rubrics"]) - 1
    item = record["rubrics"][1]
    axis = next(tag for tag in item["tags"] if tag.startswith("axis:"))
    assert detail["zero_weight_items"] == [
        {
            "item": 2,
            "text": item["criterion"],
            "weight": 0,
            "explanation": None,
            "theme": axis.removeprefix("axis:"),
            "tags": item["tags"],
        }
    ]
    assert meta["zero_weight_verdicts"] == [{"item": 2, **verdicts[1]["response_dict"]}]


def _without_criterion_text(record: dict[str, Any]) -> str:
    del record["rubrics"][2]["criterion"]
    return json.dumps(record)


def _only_pitfalls(record: dict[str, Any]) -> str:
    verdicts = ast.literal_eval(record["responses"])
    for item in [*record["rubrics"], *verdicts]:
        item["points"] = -abs(item["points"])
    record["responses"] = repr(verdicts)
    return json.dumps(record)


# (case id, how line 4 is spoiled, what the one-line error says after "<file>:4: ")
SPOILED = [
    ("not-json", lambda record: '{"prompt": [', "invalid JSON"),
    ("no-criterion-text", _without_criterion_text, "rubrics[2].criterion: Field required"),
    ("only-pitfalls", _only_pitfalls, "at least one criterion with positive weight"),
]


@pytest.mark.parametrize(
    ("spoil", "message"), [case[1:] for case in SPOILED], ids=[case[0] for case in SPOILED]
)
def test_a_malformed_record_is_named_and_nothing_is_written(
    sqlite_url: str, tmp_path: Path, spoil: Callable[[dict[str, Any]], str], message: str
) -> None:
    lines = HEALTHBENCH_FILE.read_text(encoding="utf-8").splitlines()[:5]
    lines[3] = spoil(json.loads(lines[3]))
    path = tmp_path / "judge_responses.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    result = run_cli("import", "healthbench", str(path), database_url=sqlite_url)
    assert result.code != 0
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"{path}:4: " in result.stderr and message in result.stderr, result.stderr
    assert set(_counts(sqlite_url).values()) == {0}


def test_a_malformed_criterion_of_deepresearch_bench_is_named(
    sqlite_url: str, tmp_path: Path
) -> None:
    root = tmp_path / "drb"
    for source in (DRB_QUERIES, DRB_CRITERIA):
        target = root / source.relative_to(DRB)
        target.parent.mkdir(parents=True)
        lines = source.read_text(encoding="utf-8").splitlines()[:3]
        if source == DRB_CRITERIA:
            task = json.loads(lines[2])
            del task["criterions"]["insight"][1]["weight"]
            lines[2] = json.dumps(task, ensure_ascii=False)
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")

    result = run_cli("import", "deepresearch-bench", str(root), database_url=sqlite_url)
    assert result.code != 0
    assert "criteria.jsonl:3: criterions.insight[1].weight: Field required" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert set(_counts(sqlite_url).values()) == {0}
