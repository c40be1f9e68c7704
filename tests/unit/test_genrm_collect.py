"""examples/genrm/collect.py: recorded completions kept once per (prompt, text) with every place
they were seen, put on the side of the task set's split whatever file they came from, and the
per-prompt draw that leaves hand-written answers and held-out prompts alone."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rubricsvc.completions import CompletionRecord
from trainer.overopt import ANSWER_SOURCE, Split, TaskSet

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "genrm" / "collect.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("genrm_collect", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


collect = _load()


def _task(task_id: str, split: str) -> dict[str, Any]:
    return {
        "id": task_id,
        "split": split,
        "prompt": f"Question {task_id}?",
        "criteria": [
            {"text": "Says yes", "weight": 1, "gold": {"type": "contains", "text": "yes"}},
            {"text": "Is short", "weight": 1, "gold": {"type": "word_count", "max": 5}},
        ],
        "answers": [{"text": f"yes, {task_id}", "met": [True, True]}],
    }


TASKS = TaskSet.model_validate({"tasks": [_task("a", "train"), _task("b", "held-out")]})


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    for run in ("r1/baseline-s0", "r2/baseline-s0"):
        _write(
            tmp_path / run / "samples.jsonl",
            [
                {"step": 1, "prompt_id": "a", "completion": "yes"},
                {"step": 1, "prompt_id": "a", "completion": "no"},
                {"step": 2, "prompt_id": "a", "completion": "yes"},
            ],
        )
        gold_samples = [
            {"prompt_id": "b", "completion": "held", "gold": 0.5},
            # A training prompt's answer in gold.jsonl still goes by the task set's split.
            {"prompt_id": "a", "completion": "from gold", "gold": 0.0},
        ]
        _write(tmp_path / run / "gold.jsonl", [{"step": 0, "samples": gold_samples}])
    return tmp_path


def test_each_text_once_per_prompt_with_everywhere_it_was_seen(runs: Path) -> None:
    found = collect.deduplicate(TASKS, collect.recorded(runs), first=collect.hand_written(TASKS))
    by_key = {(c.prompt_id, c.text): c for c in found}
    assert len(found) == len(by_key) == 6  # 2 hand-written, yes, no, from gold, held
    seen = by_key["a", "yes"].seen
    assert seen == [
        {"run": "r1/baseline-s0", "step": 1},
        {"run": "r1/baseline-s0", "step": 2},
        {"run": "r2/baseline-s0", "step": 1},
        {"run": "r2/baseline-s0", "step": 2},
    ]
    assert by_key["b", "held"].seen[0] == {"run": "r1/baseline-s0", "step": 0, "gold": 0.5}
    assert by_key["b", "held"].split == Split.HELD_OUT
    assert by_key["a", "from gold"].split == Split.TRAIN
    assert by_key["a", "yes, a"].source == ANSWER_SOURCE
    assert by_key["a", "yes, a"].record()["external_id"] == "a/answer-1"


def test_records_are_completion_records_with_ids_named_by_their_text(runs: Path) -> None:
    found = collect.deduplicate(TASKS, collect.recorded(runs))
    records = [c.record() for c in found]
    for record in records:
        CompletionRecord.model_validate(record)
    assert len({r["external_id"] for r in records}) == len(records)
    assert collect.text_id("a", "yes") == collect.text_id("a", "yes") != collect.text_id("b", "yes")


def test_a_prompt_the_task_set_does_not_know_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "r" / "samples.jsonl", [{"step": 1, "prompt_id": "z", "completion": "x"}])
    with pytest.raises(SystemExit, match="'z'"):
        collect.deduplicate(TASKS, collect.recorded(tmp_path))


def test_the_draw_caps_recorded_training_completions_only(runs: Path) -> None:
    found = collect.deduplicate(TASKS, collect.recorded(runs), first=collect.hand_written(TASKS))
    drawn = collect.at_most(found, 1, seed=0)
    recorded_train = [c for c in drawn if c.split == Split.TRAIN and c.source != ANSWER_SOURCE]
    assert len(recorded_train) == 1
    assert {c.text for c in drawn if c.source == ANSWER_SOURCE} == {"yes, a", "yes, b"}
    assert [c.text for c in drawn if c.source == collect.HELD_OUT_SOURCE and c.prompt_id == "b"]
    assert collect.at_most(found, 1, seed=0) == drawn
    assert collect.at_most(found, None, seed=0) == found


def test_main_writes_the_two_sides_apart(runs: Path, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(json.dumps(TASKS.model_dump(mode="json")), encoding="utf-8")
    out = tmp_path / "out"
    assert collect.main(["--out", str(out), "--runs", str(runs), "--tasks", str(tasks)]) == 0
    train = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    held = [json.loads(line) for line in (out / "held-out.jsonl").read_text().splitlines()]
    assert {r["prompt_external_id"] for r in train} == {"a"}
    assert {r["prompt_external_id"] for r in held} == {"b"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["train"]["completions"] == 4 and summary["held-out"]["completions"] == 2
