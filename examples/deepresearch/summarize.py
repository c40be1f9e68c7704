"""What a deep-research run's policy did, from its samples.jsonl: tool calls by name, how many
were valid, searches, documents opened, citations and how many name an opened document.

Usage: python examples/deepresearch/summarize.py RUN_DIR   (prints Markdown)
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from rubricsvc.judging.readers.citations import extract_citations
from rubricsvc.judging.readers.trajectory import looks_like_error
from trainer.deepresearch_tasks import load_tasks

EXAMPLE = Path(__file__).parent


def summary(samples: list[dict[str, Any]]) -> list[str]:
    calls: Counter[str] = Counter()
    valid = rollouts_with_calls = answered = cited = cited_opened = opened = 0
    for sample in samples:
        trajectory = sample.get("trajectory") or []
        names = [
            str(call.get("function", {}).get("name"))
            for m in trajectory
            if m.get("role") == "assistant"
            for call in m.get("tool_calls") or []
        ]
        calls.update(names)
        rollouts_with_calls += bool(names)
        valid += sum(1 for m in trajectory if m.get("role") == "tool" and not looks_like_error(m))
        answered += bool(str(sample.get("completion") or "").strip())
        labels = extract_citations(str(sample.get("completion") or "")).cited_labels
        documents = {str(d.get("label")) for d in sample.get("documents") or []}
        opened += len(documents)
        cited += len(labels)
        cited_opened += sum(1 for label in labels if label in documents)
    n = len(samples)
    total = sum(calls.values())
    tasks, ids = load_tasks(EXAMPLE / "tasks.yaml", EXAMPLE / "corpus.jsonl")
    by_id = {task.id: task for task in tasks.tasks}
    verdicts = [
        met
        for s in samples
        if s.get("prompt_id") in by_id
        for met in by_id[s["prompt_id"]].gold_verdicts(str(s.get("completion") or ""), ids)
    ]
    by_name = ", ".join(f"{name} {count}" for name, count in calls.most_common()) or "none"
    return [
        f"- rollouts: {n} ({answered} with a written answer)",
        f"- rollouts with a tool call: {rollouts_with_calls} ({rollouts_with_calls / n:.1%})",
        f"- tool calls: {total} ({by_name}); valid (result reported no error): {valid}",
        f"- documents opened: {opened}",
        f"- citation labels in answers: {cited}; naming a document the rollout opened: "
        f"{cited_opened}",
        f"- gold criteria met (the checks: key facts and supporting documents cited): "
        f"{sum(verdicts)} of {len(verdicts)}",
    ]


def main() -> None:
    run = Path(sys.argv[1])
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    print("\n".join(summary(samples)))


if __name__ == "__main__":
    main()
