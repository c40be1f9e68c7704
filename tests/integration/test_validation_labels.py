"""`rubricsvc judges evaluate` with pointwise and scalar labels: a probability judge measured
against them through the real command, every figure recomputed from stored rows. The judge is
the tiny one of the embedded model's architecture (tests/tiny_model.py): the measurement is
under test, not the judge's figures (the embedded judge's own are in docs/validation.md).
(Pairwise labels and the published PandaLM verdicts: test_validation.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.models import JudgeConfig, Judgment, JudgmentStatus, Label
from tests.cli_runner import EXAMPLES, add_examples, cli_ok
from tests.helpers import read_database
from tests.integration.test_validation import HEALTHBENCH_FILE, _evaluate
from tests.tiny_model import add_tiny_judge

JUDGE = "tiny"


@pytest.mark.model
@pytest.mark.slow
def test_pointwise_labels_measure_a_probability_judge(sqlite_url: str, tmp_path: Path) -> None:
    """The HealthBench grader's verdicts as labels, a judge's probabilities against them:
    accuracy, kappa, F1 and ECE over the judged items, and a report folder with plots."""
    add_tiny_judge(sqlite_url, tmp_path, JUDGE)
    lines = HEALTHBENCH_FILE.read_text(encoding="utf-8").splitlines()[:2]
    sample = tmp_path / "judge_responses.jsonl"
    sample.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cli_ok("labels", "import", "healthbench", str(sample), database_url=sqlite_url)
    folder = tmp_path / "report"
    result = cli_ok(
        "judges",
        "evaluate",
        "--judge",
        JUDGE,
        "--labels",
        "healthbench-grader",
        "--json",
        "--report",
        str(folder),
        database_url=sqlite_url,
        timeout=900,
    )
    report = json.loads(result.stdout)
    assert report["kind"] == "pointwise"

    def pairs(session: Session) -> list[tuple[float, float | None]]:
        labels = list(session.scalars(select(Label)))
        judge = session.scalars(select(JudgeConfig).where(JudgeConfig.name == JUDGE)).one()
        found = []
        for label in labels:
            judgment = session.scalars(
                select(Judgment).where(
                    Judgment.judge_config_id == judge.id,
                    Judgment.completion_id == label.completion_id,
                    Judgment.criterion_id == label.criterion_id,
                )
            ).first()
            ok = judgment is not None and judgment.status == JudgmentStatus.OK
            found.append((label.value, judgment.value if ok and judgment else None))
        return found

    observed = read_database(sqlite_url, pairs)
    judged = [(label, value) for label, value in observed if value is not None]
    assert report["n_labelled"] == len(observed)
    assert report["n_judged"] == len(judged)
    agree = sum(1 for label, value in judged if (value >= 0.5) == (label >= 0.5))
    assert report["agreement"] == pytest.approx(agree / len(judged))
    assert 0.0 <= report["ece"] <= 1.0
    assert sum(b["count"] for b in report["reliability"]) == len(judged)
    written = json.loads((folder / "evaluation.json").read_text(encoding="utf-8"))
    assert written["agreement"] == report["agreement"]
    assert (folder / "reliability.png").stat().st_size > 1000
    assert (folder / "agreement.png").stat().st_size > 1000


@pytest.mark.model
@pytest.mark.slow
def test_scalar_labels_correlate_with_scores(sqlite_url: str, tmp_path: Path) -> None:
    """Scores on a 1-5 scale against the judge's scores: correlations over judged items."""
    add_tiny_judge(sqlite_url, tmp_path, JUDGE)
    add_examples(sqlite_url)
    scores = {"demo-strong": 5, "demo-medium": 3, "demo-weak": 1}
    lines = (EXAMPLES / "completions.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    labels = tmp_path / "scalar.jsonl"
    labels.write_text(
        "".join(
            json.dumps(
                {
                    "kind": "scalar",
                    "completion": r["external_id"],
                    "score": scores[r["source"]],
                    "scale": [1, 5],
                    "labeller": "demo",
                }
            )
            + "\n"
            for r in records
            if r["source"] in scores
        ),
        encoding="utf-8",
    )
    cli_ok(
        "labels", "import", "jsonl", str(labels), "--name", "demo-scalar", database_url=sqlite_url
    )
    report = _evaluate(sqlite_url, "--judge", JUDGE, "--labels", "demo-scalar")
    assert report["kind"] == "scalar"
    assert report["n_labelled"] == sum(1 for r in records if r["source"] in scores)
    for name in ("pearson", "spearman", "kendall"):
        assert report[name] is None or -1.0 <= report[name] <= 1.0
    assert report["agreement"] == pytest.approx((report["kendall"] + 1) / 2)
