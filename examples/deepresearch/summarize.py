"""What a deep-research run's policy did, from its samples.jsonl: tool calls by name, how many
were valid, documents opened, citations and how many name an opened document, gold criteria
met. Each rollout is measured as `rubricsvc train eval-agent` measures one
(trainer/agent_metrics.py), from what the run stored of it (its trajectory ends at the first
tool error, so calls made after one are not counted here).

Usage: python examples/deepresearch/summarize.py RUN_DIR   (prints Markdown)
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from trainer.agent_metrics import BY_NAME, RolloutMetrics, measure
from trainer.deepresearch_tasks import load_tasks
from trainer.environments.rollouts import Rollout

EXAMPLE = Path(__file__).parent


def measured(samples: list[dict[str, Any]]) -> list[RolloutMetrics]:
    tasks, ids = load_tasks(EXAMPLE / "tasks.yaml", EXAMPLE / "corpus.jsonl")
    by_id = {task.id: task for task in tasks.tasks}
    metrics = []
    for sample in samples:
        trajectory = sample.get("trajectory") or []
        rollout = Rollout(
            str(sample.get("completion") or ""), trajectory, sample.get("documents") or [], False
        )
        metrics.append(measure(by_id[sample["prompt_id"]], ids, rollout, trajectory))
    return metrics


def summary(samples: list[dict[str, Any]]) -> list[str]:
    calls: Counter[str] = Counter(
        str(call.get("function", {}).get("name"))
        for sample in samples
        for m in sample.get("trajectory") or []
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
    )
    metrics = measured(samples)
    n = len(metrics)
    with_calls = sum(1 for m in metrics if m.tool_calls)
    rate = BY_NAME["tool_call_rate"].of(metrics) or 0.0
    by_name = ", ".join(f"{name} {count}" for name, count in calls.most_common()) or "none"
    unparsed = sum(m.unparsed_calls for m in metrics)
    return [
        f"- rollouts: {n} ({sum(1 for m in metrics if m.answered)} with a written answer)",
        f"- rollouts with a tool call: {with_calls} ({rate:.1%})",
        f"- tool calls: {sum(m.tool_calls for m in metrics)} ({by_name}); valid (result "
        f"reported no error): {sum(m.valid_calls for m in metrics)}"
        + (f"; `<tool_call>` blocks the parser could not read: {unparsed}" if unparsed else ""),
        f"- documents opened: {sum(m.documents_opened for m in metrics)}",
        f"- citation labels in answers: {sum(m.cited for m in metrics)}; naming a document the "
        f"rollout opened: {sum(m.cited_opened for m in metrics)}",
        f"- gold criteria met (the checks: key facts and supporting documents cited): "
        f"{sum(m.gold_met for m in metrics)} of {sum(m.gold_criteria for m in metrics)}",
    ]


def main() -> None:
    run = Path(sys.argv[1])
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    print("\n".join(summary(samples)))


if __name__ == "__main__":
    main()
