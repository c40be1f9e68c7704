"""Tasks whose rubric a judge scores and whose truth a check decides: the over-optimization lab.

Each task is a prompt and a rubric of judged criteria (the proxy reward a policy trains on,
as a user would train) where every criterion is paired with a deterministic check that
decides the same question exactly (a regex, a must-mention or must-not-mention text, a length
bound). The checks are hidden from the judge: they make a second rubric of the same criteria,
texts and weights, every one of kind ``check`` (gold). Trained against the proxy, a policy
that raises the proxy while gold falls is gaming its judge, and the gap is measured exactly.

A task file (``examples/overopt/tasks.yaml``) also holds hand-written answers with which
criteria each meets, so that every check is tested against the question it stands for.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rubricsvc.errors import ValidationFailed
from rubricsvc.fileformats import describe_validation_error, load_yaml
from rubricsvc.judging.readers.checks import run_check
from rubricsvc.rubrics.schemas import Check, RubricSpec


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Split(StrEnum):
    TRAIN = "train"
    HELD_OUT = "held-out"


class PairedCriterion(_Strict):
    """A judged criterion and the check that decides it (met when the check passes; for a
    pitfall, a negative weight, met means the fault is there)."""

    text: str = Field(min_length=1)
    weight: float
    gold: Check


class Answer(_Strict):
    """A hand-written response and, per criterion in order, whether it meets it."""

    text: str = Field(min_length=1)
    met: list[bool]


class Task(_Strict):
    id: str = Field(min_length=1)  # the prompt's external id
    split: Split
    prompt: str = Field(min_length=1)
    criteria: list[PairedCriterion] = Field(min_length=2)
    answers: list[Answer] = Field(default_factory=list)

    @model_validator(mode="after")
    def _answers_cover_every_criterion(self) -> Task:
        for n, answer in enumerate(self.answers):
            if len(answer.met) != len(self.criteria):
                raise ValueError(
                    f"answers[{n}].met has {len(answer.met)} values for "
                    f"{len(self.criteria)} criteria"
                )
        return self

    def rubric_name(self, part: str) -> str:
        return f"{self.id}/{part}"

    def proxy_rubric(self) -> RubricSpec:
        """The judged rubric: what the policy's reward judge sees."""
        return self._rubric("proxy", [{"text": c.text, "weight": c.weight} for c in self.criteria])

    def gold_rubric(self) -> RubricSpec:
        """The same criteria decided by their checks: no judge, no model."""
        criteria = [
            {
                "text": c.text,
                "weight": c.weight,
                "kind": "check",
                "check": c.gold.model_dump(mode="json"),
            }
            for c in self.criteria
        ]
        return self._rubric("gold", criteria)

    def _rubric(self, part: str, criteria: list[dict[str, Any]]) -> RubricSpec:
        return RubricSpec.model_validate(
            {
                "name": self.rubric_name(part),
                "prompt": {
                    "text": self.prompt,
                    "external_id": self.id,
                    "tags": {"overopt": self.split.value},
                },
                "criteria": criteria,
            }
        )

    def gold_verdicts(self, response: str) -> list[bool]:
        """Whether ``response`` meets each criterion, as its check decides."""
        return [run_check(c.gold.model_dump(mode="json"), response) for c in self.criteria]


class TaskSet(_Strict):
    tasks: list[Task] = Field(min_length=1)

    @model_validator(mode="after")
    def _ids_are_unique(self) -> TaskSet:
        seen: set[str] = set()
        for task in self.tasks:
            if task.id in seen:
                raise ValueError(f"task id {task.id!r} is given twice")
            seen.add(task.id)
        return self

    def split(self, split: Split) -> list[Task]:
        return [task for task in self.tasks if task.split == split]


def rubrics_document(task_set: TaskSet) -> dict[str, Any]:
    """Every task's proxy and gold rubrics as one rubrics file (``rubricsvc rubrics add``)."""
    rubrics = [
        rubric.model_dump(mode="json", exclude_defaults=True)
        for task in task_set.tasks
        for rubric in (task.proxy_rubric(), task.gold_rubric())
    ]
    return {"rubrics": rubrics}


ANSWER_SOURCE = "overopt-hand-written"
LABEL_SET = "overopt-answers"


def answer_id(task: Task, n: int) -> str:
    """The external id of the task's ``n``-th hand-written answer (from 0)."""
    return f"{task.id}/answer-{n + 1}"


def answer_records(task_set: TaskSet) -> list[dict[str, Any]]:
    """Every hand-written answer as a completion record (``rubricsvc completions add``)."""
    return [
        {
            "external_id": answer_id(task, n),
            "prompt_external_id": task.id,
            "prompt": task.prompt,
            "source": ANSWER_SOURCE,
            "text": answer.text,
        }
        for task in task_set.tasks
        for n, answer in enumerate(task.answers)
    ]


def label_records(task_set: TaskSet) -> list[dict[str, Any]]:
    """Whether each hand-written answer meets each criterion of its proxy rubric, as pointwise
    labels (``rubricsvc labels import jsonl``): what the proxy's judge is measured against
    (``rubricsvc judges evaluate``). The checks decide every one of them the same way (a test
    holds them to it), so this is also the judge's agreement with gold."""
    return [
        {
            "kind": "pointwise",
            "item": f"{answer_id(task, n)}/{position}",
            "completion": answer_id(task, n),
            "rubric": task.rubric_name("proxy"),
            "criterion": position,
            "met": met,
            "labeller": "hand-written",
            "tags": [task.split.value],
        }
        for task in task_set.tasks
        for n, answer in enumerate(task.answers)
        for position, met in enumerate(answer.met, start=1)
    ]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    lines = (json.dumps(record, ensure_ascii=False) for record in records)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


RUBRICS_HEADER = (
    "# Written by `python -m trainer.overopt examples/overopt/tasks.yaml` from tasks.yaml: edit\n"
    "# that file, then run it again. Each task's proxy rubric (judged) and gold rubric (checked).\n"
)


def load_task_set(path: Path) -> TaskSet:
    """The task set in ``path`` (YAML), or ``ValidationFailed`` naming the file and field."""
    document = load_yaml(path)
    try:
        return TaskSet.model_validate(document)
    except ValidationError as err:
        raise ValidationFailed(f"{path}: {describe_validation_error(err)}") from None


def main(argv: list[str] | None = None) -> None:
    """``python -m trainer.overopt [TASKS] [--answers DIR]``: write ``rubrics.yaml`` beside the
    task file; with ``--answers``, also the hand-written answers (``answers.jsonl``) and their
    labels (``labels.jsonl``) into DIR."""
    import argparse

    import yaml

    parser = argparse.ArgumentParser(prog="python -m trainer.overopt")
    parser.add_argument("tasks", nargs="?", type=Path, default=Path("examples/overopt/tasks.yaml"))
    parser.add_argument("--answers", type=Path, help="write answers.jsonl and labels.jsonl here")
    args = parser.parse_args(argv)
    task_set = load_task_set(args.tasks)
    out = args.tasks.with_name("rubrics.yaml")
    document = yaml.safe_dump(rubrics_document(task_set), sort_keys=False, width=100)
    out.write_text(RUBRICS_HEADER + document, encoding="utf-8")
    print(f"wrote {out}")
    if args.answers is not None:
        args.answers.mkdir(parents=True, exist_ok=True)
        write_jsonl(args.answers / "answers.jsonl", answer_records(task_set))
        write_jsonl(args.answers / "labels.jsonl", label_records(task_set))
        print(f"wrote {args.answers / 'answers.jsonl'} and {args.answers / 'labels.jsonl'}")


if __name__ == "__main__":
    main()
