"""``rubricsvc judges calibrate`` on a few HealthBench records: the map is fitted on some prompts
and measured on the others, the calibrated judge is a new config holding the map, and its
verdicts are the map of the judge's own values. The judge calibrated is the tiny one of the
embedded model's architecture (tests/tiny_model.py): the calibration is under test, not the
judge's figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from rubricsvc.judging.calibration import CalibrationMap
from rubricsvc.models import Judgment, JudgmentStatus, Label
from rubricsvc.scoring.judge_configs import latest_judge_config, stored_spec
from tests.cli_runner import cli_error, cli_ok
from tests.helpers import read_database
from tests.tiny_model import add_tiny_judge

SAMPLE = Path(__file__).resolve().parents[1] / "data/healthbench_m42_sample/data/sample"
# Records with short conversations and few criteria (25 labels on 6 prompts).
RECORDS = (60, 21, 31, 85, 2, 87)
JUDGE = "tiny"


def _import_labels(tmp_path: Path, database_url: str) -> None:
    lines = (SAMPLE / "judge_responses.jsonl").read_text(encoding="utf-8").splitlines()
    subset = tmp_path / "judge_responses.jsonl"
    subset.write_text("\n".join(lines[i] for i in RECORDS) + "\n", encoding="utf-8")
    cli_ok("db", "upgrade", database_url=database_url)
    cli_ok("labels", "import", "healthbench", str(subset), database_url=database_url)


def test_a_judge_of_another_mode_is_refused(sqlite_url: str, tmp_path: Path) -> None:
    _import_labels(tmp_path, sqlite_url)
    args = ("judges", "calibrate", "--labels", "healthbench-grader")
    error = cli_error(*args, "--judge", "embedded-text", database_url=sqlite_url)
    assert "criterion-text verdicts, not probabilities" in error
    assert len(error.splitlines()) == 1
    error = cli_error(*args, "--judge", "embedded", "--into", "embedded", database_url=sqlite_url)
    assert "needs a new name" in error
    stored = read_database(sqlite_url, lambda s: latest_judge_config(s, "embedded-calibrated"))
    assert stored is None


@pytest.mark.model
@pytest.mark.slow
def test_calibrate_stores_a_calibrated_judge(sqlite_url: str, tmp_path: Path) -> None:
    _import_labels(tmp_path, sqlite_url)
    add_tiny_judge(sqlite_url, tmp_path, JUDGE)
    report = cli_ok(
        "judges",
        "calibrate",
        "--judge",
        JUDGE,
        "--labels",
        "healthbench-grader",
        "--method",
        "platt",
        "--json",
        database_url=sqlite_url,
        timeout=600,
    ).json()

    # The split is by prompt; the figures are on the held-out prompts' labels only.
    fit, held = set(report["fit_prompt_ids"]), set(report["held_out_prompt_ids"])
    labels = read_database(sqlite_url, lambda s: list(s.scalars(select(Label))))
    assert fit and held and not fit & held
    assert fit | held == {label.prompt_id for label in labels}
    assert report["fit"]["prompts"] == len(fit) and report["held_out"]["prompts"] == len(held)
    on_held = sum(1 for label in labels if label.prompt_id in held)
    assert report["held_out"]["labels"] <= on_held
    assert report["fit"]["labels"] + report["held_out"]["labels"] + report["unjudged"] == len(
        labels
    )
    for side in ("before", "after"):
        assert report[side]["ece"] is not None and report[side]["brier"] is not None
        assert sum(b["count"] for b in report[side]["bins"]) == report["held_out"]["labels"]
    assert report["method"] == "platt" and "asked for" in report["reason"]

    # A new judge config whose hash covers the map.
    calibration = CalibrationMap.model_validate(report["calibration"])
    name = report["calibrated_judge"]["name"]
    assert name == f"{JUDGE}-calibrated"
    assert report["use"] == f"rubricsvc score --judge {JUDGE}-calibrated"
    row = read_database(sqlite_url, lambda s: latest_judge_config(s, name))
    plain_row = read_database(sqlite_url, lambda s: latest_judge_config(s, JUDGE))
    assert row.config_hash == report["calibrated_judge"]["config_hash"]
    assert row.config_hash != plain_row.config_hash
    assert stored_spec(row).calibration == calibration
    assert row.settings["hashed"]["calibration"] == calibration.model_dump()
    assert row.settings["origin"]["calibrated"]["after"]["ece"] == report["after"]["ece"]

    # The calibrated judge's verdicts: the map of the judge's own value, kept in the detail.
    completion_id = min(labels, key=lambda label: label.prompt_id).completion_id
    cli_ok(
        "score",
        "--judge",
        name,
        "--completion",
        str(completion_id),
        "--include-drafts",
        "--json",
        database_url=sqlite_url,
        timeout=600,
    )

    def judgments(config_id: int) -> dict[int | None, Judgment]:
        query = select(Judgment).where(
            Judgment.judge_config_id == config_id, Judgment.completion_id == completion_id
        )
        return {
            j.criterion_id: j for j in read_database(sqlite_url, lambda s: list(s.scalars(query)))
        }

    calibrated, plain = judgments(row.id), judgments(plain_row.id)
    assert calibrated and set(calibrated) == set(plain)
    for criterion_id, judgment in calibrated.items():
        assert judgment.status == JudgmentStatus.OK
        assert judgment.detail is not None
        own = judgment.detail["uncalibrated"]
        assert judgment.value == pytest.approx(calibration.apply(own))
        # The same model on the same question: its own value is the uncalibrated judge's.
        assert own == pytest.approx(plain[criterion_id].value, abs=1e-4)
        assert judgment.verdict == plain[criterion_id].verdict
    assert json.loads(json.dumps(report))  # one JSON object
