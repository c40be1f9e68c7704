"""The over-optimization lab's recorded completions as completion records for the genrm recipe.

Reads every recorded run under RUNS (a folder holding run folders, searched at any depth for
``samples.jsonl`` and ``gold.jsonl``) and the task set's hand-written answers, and writes two
files that ``rubricsvc completions add`` takes:

- ``train.jsonl``: the completions of the lab's **training** prompts: what the policies wrote
  during training (``samples.jsonl``: every step, every seed) and the hand-written answers.
  The judge is trained on labels of these (and of perturbed copies of them).
- ``held-out.jsonl``: the completions of the lab's **held-out** prompts: the policies' greedy
  answers at each held-out evaluation (``gold.jsonl``) and the hand-written answers. Never
  trained on; ``evaluate.py`` measures judges on the recorded ones.

The split is the task set's (``split:`` of each task in tasks.yaml), not the file a completion
came from, so a held-out prompt's completion can never land in the training file.

Each text is kept once per prompt (the same policy often writes the same answer in several
runs, steps and seeds: greedy answers at step 0 are identical in every run), with every place
it was seen in its metadata (``seen``: the run folder relative to RUNS, the step, and for a
held-out answer the gold score the run recorded), which is what ``evaluate.py`` forms its
groups from. A completion's external id is derived from its
prompt and text, so adding a file again stores nothing new.

    python examples/genrm/collect.py --out DIR [--runs docs/overopt]
        [--tasks examples/overopt/tasks.yaml] [--max-per-prompt N] [--seed 0]

``--max-per-prompt`` draws at most N recorded completions of each training prompt (seeded; the
hand-written answers are always kept): a smaller training set for a slower machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.overopt import ANSWER_SOURCE, Split, TaskSet, answer_id, load_task_set, write_jsonl

REPO = Path(__file__).resolve().parents[2]
# The ``source`` of each kind of completion, which `rubricsvc score --source` and
# `evaluate.py` select by.
POLICY_SOURCE = "overopt-policy"  # written during training (samples.jsonl)
HELD_OUT_SOURCE = "overopt-held-out"  # a held-out evaluation's greedy answer (gold.jsonl)


@dataclass
class Collected:
    """One completion: a prompt, a text, and everywhere it was seen."""

    prompt_id: str
    text: str
    source: str
    split: Split
    seen: list[dict[str, Any]] = field(default_factory=list)
    external_id: str | None = None  # None: derived from the prompt and text

    def record(self) -> dict[str, Any]:
        """The completion record for ``rubricsvc completions add``."""
        return {
            "external_id": self.external_id or text_id(self.prompt_id, self.text),
            "prompt_external_id": self.prompt_id,
            "source": self.source,
            "text": self.text,
            "metadata": {"split": self.split.value, "seen": self.seen},
        }


def text_id(prompt_id: str, text: str) -> str:
    """An external id that names the text of one prompt: the same text, the same id."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    return f"genrm/{prompt_id}/{digest}"


def recorded(runs: Path) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """(prompt id, text, source, where) for every completion of every run under ``runs``, in
    a fixed order (runs by path, then as each file lists them)."""
    for path in sorted(runs.rglob("samples.jsonl")):
        run = path.parent.relative_to(runs).as_posix()
        for row in _read_jsonl(path):
            where = {"run": run, "step": row["step"]}
            yield row["prompt_id"], row["completion"], POLICY_SOURCE, where
    for path in sorted(runs.rglob("gold.jsonl")):
        run = path.parent.relative_to(runs).as_posix()
        for row in _read_jsonl(path):
            for sample in row["samples"]:
                # The gold the run recorded: evaluate.py checks its own gold scores against it.
                where = {"run": run, "step": row["step"], "gold": sample["gold"]}
                yield sample["prompt_id"], sample["completion"], HELD_OUT_SOURCE, where


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def hand_written(task_set: TaskSet) -> Iterator[Collected]:
    """The task set's hand-written answers, under the ids the lab gives them
    (``trainer.overopt.answer_id``)."""
    for task in task_set.tasks:
        for n, answer in enumerate(task.answers):
            yield Collected(
                prompt_id=task.id,
                text=answer.text,
                source=ANSWER_SOURCE,
                split=task.split,
                seen=[{"tasks": "answers", "answer": n + 1}],
                external_id=answer_id(task, n),
            )


def deduplicate(
    task_set: TaskSet,
    found: Iterable[tuple[str, str, str, dict[str, Any]]],
    first: Iterable[Collected] = (),
) -> list[Collected]:
    """One completion per (prompt, text), in the order first seen; ``first`` (the hand-written
    answers) come before ``found`` and keep their own ids and source. A text seen again adds
    where it was seen. A prompt the task set does not know is refused: its split is unknown."""
    splits = {task.id: task.split for task in task_set.tasks}
    kept: dict[tuple[str, str], Collected] = {}
    for completion in first:
        kept.setdefault((completion.prompt_id, completion.text), completion)
    for prompt_id, text, source, where in found:
        if prompt_id not in splits:
            raise SystemExit(f"prompt {prompt_id!r} is not in the task set")
        key = (prompt_id, text)
        if key not in kept:
            kept[key] = Collected(prompt_id, text, source, splits[prompt_id])
        kept[key].seen.append(where)
    return list(kept.values())


def at_most(completions: list[Collected], per_prompt: int | None, seed: int) -> list[Collected]:
    """At most ``per_prompt`` recorded completions of each training prompt, a seeded draw in
    the order they came; hand-written answers and held-out prompts' completions all stay."""
    if per_prompt is None:
        return completions
    by_prompt: dict[str, list[int]] = {}
    for n, completion in enumerate(completions):
        if completion.split == Split.TRAIN and completion.source != ANSWER_SOURCE:
            by_prompt.setdefault(completion.prompt_id, []).append(n)
    rng = random.Random(seed)
    dropped: set[int] = set()
    for prompt_id in sorted(by_prompt):
        positions = by_prompt[prompt_id]
        if len(positions) > per_prompt:
            dropped.update(set(positions) - set(rng.sample(positions, per_prompt)))
    return [c for n, c in enumerate(completions) if n not in dropped]


def summary(completions: list[Collected]) -> dict[str, Any]:
    """Counts per split: completions, prompts, by source, empty texts."""
    result: dict[str, Any] = {}
    for split in Split:
        chosen = [c for c in completions if c.split == split]
        sources: dict[str, int] = {}
        for c in chosen:
            sources[c.source] = sources.get(c.source, 0) + 1
        result[split.value] = {
            "completions": len(chosen),
            "prompts": len({c.prompt_id for c in chosen}),
            "by_source": dict(sorted(sources.items())),
            "empty": sum(1 for c in chosen if not c.text.strip()),
            "occurrences": sum(len(c.seen) for c in chosen),
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True, help="folder to write the files to")
    parser.add_argument("--runs", type=Path, default=REPO / "docs" / "overopt")
    parser.add_argument("--tasks", type=Path, default=REPO / "examples" / "overopt" / "tasks.yaml")
    parser.add_argument("--max-per-prompt", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    task_set = load_task_set(args.tasks)
    completions = deduplicate(task_set, recorded(args.runs), first=hand_written(task_set))
    completions = at_most(completions, args.max_per_prompt, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    files = {Split.TRAIN: "train.jsonl", Split.HELD_OUT: "held-out.jsonl"}
    for split, name in files.items():
        write_jsonl(args.out / name, [c.record() for c in completions if c.split == split])
    counts = {
        "runs": len(list(args.runs.rglob("samples.jsonl"))),
        "max_per_prompt": args.max_per_prompt,
        **summary(completions),
    }
    (args.out / "summary.json").write_text(json.dumps(counts, indent=2) + "\n", encoding="utf-8")
    json.dump(counts, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
