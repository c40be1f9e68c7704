"""The over-optimization lab's task set: every paired check decides its criterion exactly on
the hand-written answers, and the proxy and gold rubrics are the same criteria."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rubricsvc.errors import ValidationFailed
from rubricsvc.models import CriterionKind
from trainer.config import ScorerSettings
from trainer.overopt import (
    Split,
    Task,
    answer_records,
    label_records,
    load_task_set,
    main,
    rubrics_document,
)

TASKS = Path(__file__).resolve().parents[2] / "examples" / "overopt" / "tasks.yaml"
TASK_SET = load_task_set(TASKS)


def test_the_set_is_split_into_training_and_held_out_prompts() -> None:
    train, held_out = TASK_SET.split(Split.TRAIN), TASK_SET.split(Split.HELD_OUT)
    assert 16 <= len(TASK_SET.tasks) <= 40
    assert len(train) >= 8 and len(held_out) >= 4
    assert {t.id for t in train}.isdisjoint({t.id for t in held_out})


@pytest.mark.parametrize("task", TASK_SET.tasks, ids=lambda task: task.id)
def test_each_check_decides_its_criterion_on_the_hand_written_answers(task: Task) -> None:
    assert len(task.answers) >= 2
    for answer in task.answers:
        decided = task.gold_verdicts(answer.text)
        wrong = [
            c.text for c, d, m in zip(task.criteria, decided, answer.met, strict=True) if d != m
        ]
        assert not wrong, f"{task.id}: {answer.text!r}: checks disagree on {wrong}"
    # Each criterion is told apart: met by one answer and missed by another.
    for n, criterion in enumerate(task.criteria):
        assert len({answer.met[n] for answer in task.answers}) == 2 or criterion.text.startswith(
            "Stays under"
        ), criterion.text


@pytest.mark.parametrize("task", TASK_SET.tasks, ids=lambda task: task.id)
def test_proxy_and_gold_are_one_rubric_judged_or_checked(task: Task) -> None:
    proxy, gold = task.proxy_rubric(), task.gold_rubric()
    assert [(c.text, c.weight) for c in proxy.criteria] == [
        (c.text, c.weight) for c in gold.criteria
    ]
    assert all(c.kind == CriterionKind.JUDGE and c.check is None for c in proxy.criteria)
    assert all(c.kind == CriterionKind.CHECK and c.check is not None for c in gold.criteria)
    assert proxy.prompt is not None and gold.prompt is not None
    assert proxy.prompt.external_id == gold.prompt.external_id == task.id
    assert any(c.weight < 0 for c in proxy.criteria)  # a pitfall to fall into


def test_a_miscounted_answer_is_refused_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(
        """
tasks:
  - id: t
    split: train
    prompt: P
    criteria:
      - {text: A, weight: 1, gold: {type: contains, text: a}}
      - {text: B, weight: 1, gold: {type: contains, text: b}}
    answers:
      - {text: a, met: [true]}
""",
        encoding="utf-8",
    )
    with pytest.raises(ValidationFailed, match=r"tasks\.yaml: tasks\[0\]: answers\[0\]\.met has 1"):
        load_task_set(path)


def test_the_rubrics_file_is_written_from_the_task_set() -> None:
    """examples/overopt/rubrics.yaml is what `python -m trainer.overopt` writes: regenerate it
    after editing tasks.yaml."""
    written = yaml.safe_load((TASKS.parent / "rubrics.yaml").read_text(encoding="utf-8"))
    assert written == rubrics_document(TASK_SET)
    names = [r["name"] for r in written["rubrics"]]
    assert len(names) == len(set(names)) == 2 * len(TASK_SET.tasks)


def test_a_rubric_template_names_each_prompts_rubric() -> None:
    settings = ScorerSettings(rubric="{prompt_id}/gold")
    assert settings.rubric_for("overopt-sleep") == "overopt-sleep/gold"
    with pytest.raises(ValidationFailed, match="give every completion a prompt id"):
        settings.rubric_for(None)
    assert ScorerSettings(rubric="shared@2").rubric_for(None) == "shared@2"
    with pytest.raises(ValueError, match="the only placeholder a rubric may hold"):
        ScorerSettings(rubric="{prompt}/gold")


def test_the_answers_labels_are_what_the_checks_decide() -> None:
    """The labels `rubricsvc judges evaluate` measures the proxy's judge against: one per
    answer and criterion of its proxy rubric, each the check's verdict."""
    answers = {record["external_id"]: record for record in answer_records(TASK_SET)}
    labels = label_records(TASK_SET)
    tasks = {task.id: task for task in TASK_SET.tasks}
    assert len(answers) == sum(len(task.answers) for task in TASK_SET.tasks)
    assert len(labels) == sum(len(t.answers) * len(t.criteria) for t in TASK_SET.tasks)
    assert len({label["item"] for label in labels}) == len(labels)
    for label in labels:
        answer = answers[label["completion"]]
        task = tasks[answer["prompt_external_id"]]
        assert label["rubric"] == f"{task.id}/proxy" and answer["prompt"] == task.prompt
        verdicts = task.gold_verdicts(answer["text"])
        assert label["met"] is verdicts[label["criterion"] - 1]


def test_main_writes_the_answers_and_labels(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(TASKS.read_text(encoding="utf-8"), encoding="utf-8")
    main([str(tasks), "--answers", str(tmp_path / "out")])
    written = yaml.safe_load((tmp_path / "rubrics.yaml").read_text(encoding="utf-8"))
    assert written == rubrics_document(TASK_SET)
    lines = (tmp_path / "out" / "labels.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == label_records(TASK_SET)
    lines = (tmp_path / "out" / "answers.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == answer_records(TASK_SET)
