"""Judge refresh in a real ``rubricsvc train`` run on CPU: tiny random models of the embedded
model's architecture as policy and judge (tests/tiny_model.py: the swap is under test, not what
either says), GRPO on TRL, the run's own completions labelled by the gold checks, a student distilled
by ``judges distill`` and gated. Two tiny runs (3 steps, one refresh at step 2, a one-step
student) whose gates are decided by their thresholds, not by what the student learned: one
that every student passes (the gain's interval above -1), one that none can (an agreement of
1 and a gain above 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from rubricsvc.judging.readers.checks import run_check
from rubricsvc.models import (
    Completion,
    Criterion,
    JudgeConfig,
    JudgeGate,
    Judgment,
    Label,
    LabelSet,
)
from tests.cli_runner import run_cli
from tests.helpers import check_criterion, read_database
from tests.integration.test_trainer_rewards import seed
from tests.requirements import require_module
from tests.tiny_model import add_tiny_judge, tiny_model_dir
from trainer.refresh import label_balance
from trainer.report import compare_runs

pytestmark = [pytest.mark.model, pytest.mark.slow]

JUDGE = "tiny"
HELLO = {"type": "contains", "text": "hello"}
FRIEND = {"type": "regex", "pattern": "(?i)friend"}
WIND = {"type": "contains", "text": "wind"}
RAIN = {"type": "contains", "text": "rain"}
TASKS = {
    "rf-greet": ("Say hello to a friend, briefly.", [("Says hello", HELLO), ("Names the friend", FRIEND)]),
    "rf-storm": ("Describe a storm in a few words.", [("Mentions the wind", WIND), ("Mentions rain", RAIN)]),
    "rf-team": ("Greet your team in a few words.", [("Says hello", HELLO), ("Mentions rain", RAIN)]),
}  # fmt: skip


def _rubrics() -> list[dict[str, Any]]:
    """Each task's proxy rubric (judged by the model) and gold rubric (the same criteria, each
    decided by its check), as in the over-optimization lab."""
    rubrics = []
    for prompt_id, (text, criteria) in TASKS.items():
        prompt = {"external_id": prompt_id, "text": text}
        judged = [{"text": name, "weight": 1} for name, _ in criteria]
        checked = [check_criterion(name, check) for name, check in criteria]
        rubrics.append({"name": f"{prompt_id}/proxy", "prompt": prompt, "criteria": judged})
        rubrics.append({"name": f"{prompt_id}/gold", "prompt": prompt, "criteria": checked})
    return rubrics


def _config(tmp_path: Path, name: str, gate: dict[str, float]) -> Path:
    config = {
        "name": name,
        "policy": str(tiny_model_dir()),
        "prompts": ["rf-greet", "rf-storm"],
        "reward": {"judge": JUDGE, "rubric": "{prompt_id}/proxy"},
        "grpo": {
            "num_generations": 2,
            "per_device_train_batch_size": 4,
            "max_completion_length": 12,
            "max_steps": 3,
        },
        "monitors": {
            "gold": {
                "scorer": {"judge": JUDGE, "rubric": "{prompt_id}/gold"},
                "prompts": ["rf-team"],
                "every": 3,
            }
        },
        # The 8 completions of steps 1-2, labelled by the gold checks; half the prompts held
        # out for the gate; the student trained for one step of one example, top layer only.
        "refresh": {
            "every": 2,
            "labeller": "gold",
            "samples": 8,
            "gate": {**gate, "split": 0.5},
            "training": {
                "max_steps": 1,
                "batch_size": 1,
                "gradient_accumulation_steps": 1,
                "trainable_layers": 1,
                "learning_rate": 1e-4,
                "save_steps": 1,
            },
        },
        "output_dir": str(tmp_path / "runs"),
        "threads": 1,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _train(tmp_path: Path, database_url: str, name: str, gate: dict[str, float]) -> Path:
    result = run_cli(
        "train", str(_config(tmp_path, name, gate)), database_url=database_url, timeout=1500
    )
    assert result.code == 0, result.stderr[-3000:]
    return tmp_path / "runs" / name


def _scored_by(database_url: str, texts: set[str], config_hash: str) -> bool:
    """Whether the judge config ``config_hash`` judged stored completions of these texts."""

    def read(session: Any) -> bool:
        judge = session.scalar(select(JudgeConfig.id).where(JudgeConfig.config_hash == config_hash))
        ids = select(Completion.id).where(Completion.text.in_(texts))
        found = session.scalar(
            select(Judgment.id).where(
                Judgment.judge_config_id == judge, Judgment.completion_id.in_(ids)
            )
        )
        return found is not None

    return bool(read_database(database_url, read))


def _check_refresh(run: Path, database_url: str, decision: str, swapped: bool) -> None:
    """The run's one refresh: its record, the judge each step's reward names, its report."""
    (refresh,) = _lines(run / "refreshes.jsonl")
    assert refresh["step"] == 2 and refresh["labeller"] == "gold"
    assert refresh["decision"] == decision and refresh["swapped"] is swapped
    assert refresh["judge_before"]["judge"] == JUDGE
    student = refresh["student"]
    assert student["judge"] == f"{run.name}-refresh-2"
    gate = refresh["gate"]
    assert gate["base"]["agreement_ci"] is not None and gate["student"]["agreement_ci"]
    assert gate["gain_ci"] is not None
    # The gain within criteria is measured either way, and gated unless the gate says not.
    assert {"criteria", "labels", "prompts", "gain", "gain_ci"} <= set(gate["within_criteria"])
    assert gate["gated_within_criteria"] is (run.name != "passes")
    assert refresh["split"]["train_prompts"] == refresh["split"]["test_prompts"] == 1
    expected = student if swapped else refresh["judge_before"]
    assert refresh["judge_after"] == expected

    # Each step's logged reward names the judge config that scored it: the first judge up
    # to the refresh, then the one the gate left in place; and that config did judge the
    # step's completions.
    metrics = _lines(run / "metrics.jsonl")
    hashes = {m["step"]: m["rubric/judge_config_hash"] for m in metrics}
    before, after = refresh["judge_before"]["config_hash"], expected["config_hash"]
    assert hashes == {1: before, 2: before, 3: after}
    samples = _lines(run / "samples.jsonl")
    assert {(s["step"], s["judge_config_hash"]) for s in samples} == {
        (1, before), (2, before), (3, after),
    }  # fmt: skip
    step_3 = {s["completion"] for s in samples if s["step"] == 3}
    assert _scored_by(database_url, step_3, after)
    if swapped:
        assert after != before
        fresh = step_3 - {s["completion"] for s in samples if s["step"] < 3}
        assert not fresh or not _scored_by(database_url, fresh, before)
    # The gold monitor's proxy of the held-out answers follows the swap too.
    (_, last) = _lines(run / "gold.jsonl")
    assert last["step"] == 3
    assert _scored_by(database_url, {s["completion"] for s in last["samples"]}, after)

    report = (run / "report.md").read_text(encoding="utf-8")
    assert "## Judge refreshes" in report
    row = next(line for line in report.splitlines() if line.startswith("| 2 |"))
    assert decision in row and f"| {'yes' if swapped else 'no'} |" in row


def test_a_refresh_swaps_the_judge_only_when_its_gate_passes(
    sqlite_url: str, tmp_path: Path
) -> None:
    require_module("trl", "trainer")
    seed(sqlite_url, *_rubrics())
    add_tiny_judge(sqlite_url, tmp_path, JUDGE)

    # Checked before the next run: with the same seed, both runs write the same completions
    # up to the refresh, and the same policy update makes their step 3 alike too.
    # The passing gate leaves out the gain within criteria (a refresh's default): one held-out
    # prompt of four completions may contrast no criterion, and this test is about the swap.
    passing = _train(
        tmp_path,
        sqlite_url,
        "passes",
        {"min_agreement": 0.0, "min_gain": -1.0, "within_criteria": False},
    )
    _check_refresh(passing, sqlite_url, "approved", swapped=True)
    failing = _train(tmp_path, sqlite_url, "fails", {"min_agreement": 1.0, "min_gain": 1.0})
    _check_refresh(failing, sqlite_url, "rejected", swapped=False)

    # The labels are the gold checks' verdicts on the run's own completions, per criterion of
    # the reward's rubric.
    def labels(session: Any) -> list[tuple[str, str, float, int, int]]:
        rows = session.execute(
            select(
                Completion.text,
                Criterion.text,
                Label.value,
                Label.completion_id,
                Label.criterion_id,
            )
            .join(Completion, Completion.id == Label.completion_id)
            .join(Criterion, Criterion.id == Label.criterion_id)
            .join(LabelSet, LabelSet.id == Label.label_set_id)
            .where(LabelSet.name == "refresh/passes/step-2")
        )
        return [tuple(row) for row in rows]

    checks = {name: check for _, criteria in TASKS.values() for name, check in criteria}
    stored = read_database(sqlite_url, labels)
    (refresh,) = _lines(passing / "refreshes.jsonl")
    assert len(stored) == refresh["labels"] == 2 * refresh["completions"] > 0
    for text, criterion, value, *_ in stored:
        assert value == float(run_check(checks[criterion], text))
    # The record's balance is that of the labels stored (label_balance's own test counts it).
    balance = label_balance({(c, k): value for _, _, value, c, k in stored})
    assert refresh["label_balance"] == balance and balance["criteria"] > 0

    # The gate's decisions are stored with the students: the rejected one is no reward.
    def decisions(session: Any) -> dict[str, str]:
        rows = session.execute(
            select(JudgeConfig.name, JudgeGate.status)
            .join(JudgeGate, JudgeGate.judge_config_id == JudgeConfig.id)
            .order_by(JudgeGate.id)
        )
        return {name: status.value for name, status in rows}

    assert read_database(sqlite_url, decisions) == {
        "passes-refresh-2": "approved",
        "fails-refresh-2": "rejected",
    }

    # `rubricsvc train compare` redraws every refresh from the logs alone.
    _, document, _ = compare_runs([passing, failing], tmp_path / "compare")
    compared = document.read_text(encoding="utf-8")
    assert "## Judge refreshes: passes" in compared and "## Judge refreshes: fails" in compared
