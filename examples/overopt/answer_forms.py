"""How often a run's answers take the form of a list, and what the proxy and gold make of it.

An exploratory reading of the recorded samples (docs/overoptimization.md): an answer "is a
list" when it has a numbered or bulleted line or opens its advice with "Here's" / "Here are"
/ "step-by-step". Per run: the share of list answers among the samples of the first and of
the last 10 steps; over every run's rollout groups holding both forms, the mean difference
list minus other, in proxy and in gold, with 95% intervals resampling groups.

    python examples/overopt/answer_forms.py docs/overopt/runs
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rubricsvc.validation.metrics import bootstrap_interval
from trainer.report import read_run

LIST_FORM = re.compile(r"(^|\n)\s*(\d+\.|[-*] )|step-by-step|Here's|Here are")


def is_list(text: str) -> bool:
    return LIST_FORM.search(text) is not None


def share(samples: list[dict[str, Any]], steps: range) -> float:
    chosen = [s for s in samples if s.get("step") in steps]
    return sum(is_list(s["completion"]) for s in chosen) / len(chosen) if chosen else 0.0


def group_differences(samples: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """Per rollout group with both forms: (proxy, gold) of the list answers minus the others'."""
    groups: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for sample in samples:
        if sample.get("rubric_reward") is not None and sample.get("gold_reward") is not None:
            groups[(sample["step"], sample["prompt_id"])].append(sample)
    found = []
    for members in groups.values():
        lists = [s for s in members if is_list(s["completion"])]
        others = [s for s in members if not is_list(s["completion"])]
        if lists and others:

            def gap(key: str, lists: list[Any] = lists, others: list[Any] = others) -> float:
                return statistics.fmean(s[key] for s in lists) - statistics.fmean(
                    s[key] for s in others
                )

            found.append((gap("rubric_reward"), gap("gold_reward")))
    return found


def mean_over(values: list[float]) -> Callable[[Sequence[int]], float]:
    return lambda chosen: statistics.fmean(values[i] for i in chosen)


def main(root: Path) -> None:
    differences: list[tuple[float, float]] = []
    print("| run | list answers, first 10 steps | last 10 steps |")
    print("| --- | --- | --- |")
    for path in sorted(p for p in root.iterdir() if (p / "samples.jsonl").is_file()):
        run = read_run(path)
        first, last = share(run.samples, range(1, 11)), share(run.samples, range(31, 41))
        print(f"| {run.name} | {first:.2f} | {last:.2f} |")
        differences += group_differences(run.samples)
    print(f"\nRollout groups with both forms: {len(differences)}")
    for index, name in enumerate(("proxy", "gold")):
        values = [d[index] for d in differences]
        low, high = bootstrap_interval(range(len(values)), mean_over(values)) or (0.0, 0.0)
        print(f"{name}: list minus other {statistics.fmean(values):+.4f} [{low:+.4f}, {high:+.4f}]")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/overopt/runs"))
