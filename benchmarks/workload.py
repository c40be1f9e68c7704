"""The benchmark workloads: DeepResearch Bench reports, and HealthBench short answers.

Reports are long (2.5k-40k characters); each is cut to ``report_tokens`` tokens of the judge's
tokenizer so every prompt fits the context of the small bundled model, and the cut is reported.
The HealthBench answers (under 1,500 characters, a few hundred tokens; 6-13 physician-written
criteria each, some of them pitfalls with negative points) are judged whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rubricsvc.judging.modes import CompletionView, CriterionView, Item

TEST_DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
DATA = TEST_DATA / "deep_research_bench" / "data"
HEALTHBENCH = TEST_DATA / "healthbench_m42_sample" / "data" / "sample" / "judge_responses.jsonl"
MODEL_NAME = "claude-3-7-sonnet-latest"


@dataclass
class Task:
    id: int
    prompt: str
    report: str
    criteria: list[CriterionView]

    def view(self) -> CompletionView:
        return CompletionView(self.id, [{"role": "user", "content": self.prompt}], self.report)

    def items(self) -> list[Item]:
        return [Item(f"{self.id}-{c.id}", c) for c in self.criteria]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def load_tasks(count: int, report_tokens: int, tokenizer: Any) -> list[Task]:
    """The first ``count`` English tasks, reports cut to ``report_tokens`` tokens."""
    queries = {q["id"]: q for q in _jsonl(DATA / "prompt_data" / "query.jsonl")}
    criteria = {c["id"]: c for c in _jsonl(DATA / "criteria_data" / "criteria.jsonl")}
    reports = {
        r["id"]: r for r in _jsonl(DATA / "test_data" / "cleaned_data" / f"{MODEL_NAME}.jsonl")
    }
    tasks = []
    for task_id in sorted(queries):
        query = queries[task_id]
        if query.get("language") != "en" or task_id not in reports or task_id not in criteria:
            continue
        ids = tokenizer.encode(reports[task_id]["article"], add_special_tokens=False)[
            :report_tokens
        ]
        flat = [
            (dimension, item)
            for dimension, items in criteria[task_id]["criterions"].items()
            for item in items
        ]
        views = [
            CriterionView(
                index, item["criterion"], None, item["weight"], {"type": "binary"}, dimension
            )
            for index, (dimension, item) in enumerate(flat)
        ]
        tasks.append(Task(task_id, query["prompt"], tokenizer.decode(ids), views))
        if len(tasks) == count:
            break
    return tasks


def load_short_answers(count: int, max_chars: int = 1500) -> list[Task]:
    """The first ``count`` HealthBench conversations of a single user turn whose graded
    answer is under ``max_chars`` characters, with the answer and its rubric items."""
    tasks = []
    for index, record in enumerate(_jsonl(HEALTHBENCH)):
        if len(record["prompt"]) != 1 or record["prompt"][0]["role"] != "user":
            continue
        if len(record["prompt_response"][0]["content"]) >= max_chars:
            continue
        views = [
            CriterionView(i, item["criterion"], None, item["points"], {"type": "binary"})
            for i, item in enumerate(record["rubrics"])
        ]
        answer = record["prompt_response"][0]["content"]
        tasks.append(Task(1000 + index, record["prompt"][0]["content"], answer, views))
        if len(tasks) == count:
            break
    return tasks
