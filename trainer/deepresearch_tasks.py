"""The deep-research task set: questions whose answers need facts from two or more documents
of a local corpus, with checkable gold (examples/deepresearch/README.md).

Each task is a question, the corpus documents that support it (by title), and its key facts,
each a judged criterion paired with the check that decides it (as the over-optimization lab's
tasks are, ``trainer.overopt``). Three rubrics per question, named ``<id>/<part>``:

- ``proxy``: the facts and the citation of each supporting document as judged criteria, and
  the trajectory criteria (no tool call repeated three times, no tool error ignored): the
  ``rubric`` component of an agent's reward (trainer/agent_reward.py).
- ``citations``: one ``kind: citations`` criterion, each cited claim checked against the cited
  document among those the agent opened: the ``citations`` component.
- ``gold``: the facts and citations as checks (a regex, a text it must contain; a document is
  cited when its id appears in a citation marker): no judge, no model.

``python -m trainer.deepresearch_tasks`` writes rubrics.yaml beside the task file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rubricsvc.errors import ValidationFailed
from rubricsvc.fileformats import describe_validation_error, load_yaml
from rubricsvc.judging.readers.checks import run_check
from rubricsvc.rubrics.schemas import Check, RubricSpec
from trainer.overopt import Answer, Split

INSTRUCTIONS = (
    "Use the tools to search the Python documentation and open the documents you need, then "
    "answer in a few sentences. Cite every document you use by its id in brackets, like [12]."
)
FACT_WEIGHT = 2.0
CITE_WEIGHT = 1.0
TRAJECTORY_WEIGHT = 1.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Fact(_Strict):
    text: str = Field(min_length=1)
    gold: Check


# The corpus's markup: straight and typographic quotes, emphasis asterisks.
_MARKUP = re.compile('[*"\u201c\u201d\u2018\u2019]')


def plain(text: str) -> str:
    """``text`` without the markup a fact's check should not trip on (quotes, emphasis, line
    breaks): a document's text as a fact's check reads it."""
    return " ".join(_MARKUP.sub("", text).split())


def cited_pattern(doc_id: str) -> str:
    """A citation marker holding ``doc_id``: ``[7]``, ``[3, 7]``, ``[7,12]`` (RE2: no
    lookarounds; the digits around the id are bounded by the marker's brackets and commas)."""
    return rf"\[(\d+\s*,\s*)*{doc_id}(\s*,\s*\d+)*\]"


class DeepResearchTask(_Strict):
    id: str = Field(min_length=1)  # the prompt's external id
    split: Split
    question: str = Field(min_length=1)
    documents: list[str] = Field(min_length=2)  # supporting documents, by corpus title
    facts: list[Fact] = Field(min_length=1)
    answers: list[Answer] = Field(default_factory=list)

    @model_validator(mode="after")
    def _answers_cover_every_criterion(self) -> DeepResearchTask:
        wanted = len(self.facts) + len(self.documents)
        for n, answer in enumerate(self.answers):
            if len(answer.met) != wanted:
                raise ValueError(
                    f"answers[{n}].met has {len(answer.met)} values for {len(self.facts)} facts "
                    f"and {len(self.documents)} documents"
                )
        return self

    @property
    def prompt(self) -> str:
        return f"{self.question}\n\n{INSTRUCTIONS}"

    def rubric_name(self, part: str) -> str:
        return f"{self.id}/{part}"

    def gold_criteria(self, ids: dict[str, str]) -> list[dict[str, Any]]:
        """Each fact and each supporting document's citation as a check criterion."""
        facts = [
            {
                "text": f.text,
                "weight": FACT_WEIGHT,
                "kind": "check",
                "check": f.gold.model_dump(mode="json"),
            }
            for f in self.facts
        ]
        cites = [
            {
                "text": _cite_text(title, ids[title]),
                "weight": CITE_WEIGHT,
                "kind": "check",
                "check": {"type": "regex", "pattern": cited_pattern(ids[title])},
            }
            for title in self.documents
        ]
        return facts + cites

    def proxy_rubric(self, ids: dict[str, str]) -> RubricSpec:
        judged = [{"text": c["text"], "weight": c["weight"]} for c in self.gold_criteria(ids)]
        trajectory = [
            {
                "text": "Does not repeat the same tool call three times",
                "weight": TRAJECTORY_WEIGHT,
                "kind": "check",
                "check": {"type": "tool_loop", "min_repeats": 3},
            },
            {
                "text": "Does not ignore a tool error in its answer",
                "weight": TRAJECTORY_WEIGHT,
                "kind": "check",
                "check": {"type": "tool_errors_ignored"},
            },
        ]
        return self._rubric("proxy", judged + trajectory)

    def citations_rubric(self) -> RubricSpec:
        criterion = {
            "text": "Each cited claim is supported by the document it cites",
            "weight": 1.0,
            "kind": "citations",
        }
        return self._rubric("citations", [criterion])

    def gold_rubric(self, ids: dict[str, str]) -> RubricSpec:
        return self._rubric("gold", self.gold_criteria(ids))

    def gold_verdicts(self, response: str, ids: dict[str, str]) -> list[bool]:
        """Whether ``response`` meets each gold criterion (facts, then citations)."""
        return [run_check(dict(c["check"]), response) for c in self.gold_criteria(ids)]

    def _rubric(self, part: str, criteria: list[dict[str, Any]]) -> RubricSpec:
        return RubricSpec.model_validate(
            {
                "name": self.rubric_name(part),
                "prompt": {
                    "text": self.prompt,
                    "external_id": self.id,
                    "tags": {"deepresearch": self.split.value},
                },
                "criteria": criteria,
            }
        )


def gold_score(task: DeepResearchTask, met: Sequence[bool], ids: dict[str, str]) -> float:
    """The gold rubric's score of the verdicts ``met``: the met criteria's share of the weight."""
    weights = [float(c["weight"]) for c in task.gold_criteria(ids)]
    return sum(w for w, m in zip(weights, met, strict=True) if m) / sum(weights)


def _cite_text(title: str, doc_id: str) -> str:
    return f'Cites the "{title}" document as [{doc_id}]'


class DeepResearchTaskSet(_Strict):
    tasks: list[DeepResearchTask] = Field(min_length=1)

    def split(self, split: Split) -> list[DeepResearchTask]:
        return [task for task in self.tasks if task.split == split]


def corpus_ids(corpus: Path) -> dict[str, str]:
    """Each corpus document's id, by title."""
    ids = {}
    for line in corpus.read_text(encoding="utf-8").splitlines():
        if line.strip():
            document = json.loads(line)
            ids[str(document["title"])] = str(document["id"])
    return ids


def load_tasks(path: Path, corpus: Path) -> tuple[DeepResearchTaskSet, dict[str, str]]:
    """The task set in ``path`` and the corpus ids of its documents; ValidationFailed names a
    malformed task or a supporting document the corpus lacks."""
    try:
        tasks = DeepResearchTaskSet.model_validate(load_yaml(path))
    except ValidationError as err:
        raise ValidationFailed(f"{path}: {describe_validation_error(err)}") from None
    ids = corpus_ids(corpus)
    seen: set[str] = set()
    for task in tasks.tasks:
        if task.id in seen:
            raise ValidationFailed(f"{path}: task id {task.id!r} is given twice")
        seen.add(task.id)
        for title in task.documents:
            if title not in ids:
                raise ValidationFailed(f"{path}: {task.id}: no document {title!r} in {corpus}")
    return tasks, ids


def rubrics_document(tasks: DeepResearchTaskSet, ids: dict[str, str]) -> dict[str, Any]:
    rubrics = [
        rubric.model_dump(mode="json", exclude_defaults=True)
        for task in tasks.tasks
        for rubric in (task.proxy_rubric(ids), task.citations_rubric(), task.gold_rubric(ids))
    ]
    return {"rubrics": rubrics}


RUBRICS_HEADER = (
    "# Written by `python -m trainer.deepresearch_tasks` from tasks.yaml and corpus.jsonl: edit\n"
    "# those, then run it again. Per question: proxy (judged), citations, gold (checked).\n"
)


def main(argv: list[str] | None = None) -> None:
    import argparse

    import yaml

    parser = argparse.ArgumentParser(prog="python -m trainer.deepresearch_tasks")
    default = Path("examples/deepresearch/tasks.yaml")
    parser.add_argument("tasks", nargs="?", type=Path, default=default)
    args = parser.parse_args(argv)
    tasks, ids = load_tasks(args.tasks, args.tasks.with_name("corpus.jsonl"))
    out = args.tasks.with_name("rubrics.yaml")
    document = yaml.safe_dump(rubrics_document(tasks, ids), sort_keys=False, width=100)
    out.write_text(RUBRICS_HEADER + document, encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
