"""PNG plots of a run, drawn from its metrics.jsonl and gold.jsonl (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainer.rundir import GOLD, METRICS, RunDirectory

# (file name, title, metric names): a figure is drawn when any of its metrics was logged.
FIGURES = [
    ("reward.png", "Reward per step", ["reward", "rubric/reward"]),
    ("length.png", "Completion length per step", ["completions/mean_length", "text/words"]),
    ("masked.png", "Masked rewards per step", ["rubric/masked_fraction"]),
    # A run in a tool environment (trainer/agent_reward.py): what the rollouts did, and the
    # reward's components.
    (
        "tools.png",
        "Tool use per step",
        [
            "agent/tool_call_rate",
            "agent/valid_call_rate",
            "agent/search_turns",
            "agent/documents_opened",
            "agent/citation_precision",
        ],
    ),
    (
        "components.png",
        "Reward components per step",
        ["reward/rubric", "reward/citations", "reward/format", "reward/search_turns"],
    ),
]


# A supervised warm start's (trainer/sft.py).
SFT_FIGURES = [
    ("loss.png", "Training loss per step", ["loss"]),
    ("accuracy.png", "Next-token accuracy on the trained tokens", ["mean_token_accuracy"]),
]


def _series(rows: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    points = [(row["step"], row[key]) for row in rows if row.get(key) is not None and "step" in row]
    return [float(s) for s, _ in points], [float(v) for _, v in points]


def draw_plots(
    run: RunDirectory, figures: Sequence[tuple[str, str, list[str]]] = FIGURES
) -> list[Path]:
    """Write every figure (of ``figures``, and the per-criterion and gold ones) the run has
    data for; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and CI
    import matplotlib.pyplot as plt

    metrics = run.read(METRICS)
    written: list[Path] = []

    def save(name: str, title: str, lines: list[tuple[str, list[float], list[float]]]) -> None:
        if not any(xs for _, xs, _ in lines):
            return
        figure, axes = plt.subplots(figsize=(7, 4))
        for label, xs, ys in lines:
            if xs:
                axes.plot(xs, ys, marker="o", markersize=3, label=label)
        axes.set_title(title)
        axes.set_xlabel("step")
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
        figure.tight_layout()
        path = run.path / "plots" / name
        figure.savefig(path, dpi=100)
        plt.close(figure)
        written.append(path)

    for name, title, keys in figures:
        save(name, title, [(key, *_series(metrics, key)) for key in keys])
    repetition = sorted({k for row in metrics for k in row if k.startswith("text/repeated_")})
    if repetition:
        save(
            "repetition.png",
            "Repeated n-gram fraction per step",
            [(key, *_series(metrics, key)) for key in repetition],
        )
    criteria = sorted({k for row in metrics for k in row if k.startswith("criteria/")})
    save(
        "criteria.png",
        "Criterion pass rate per step",
        [(key.removeprefix("criteria/")[:40], *_series(metrics, key)) for key in criteria],
    )
    gold = run.read(GOLD)
    save(
        "gold.png",
        "Held-out prompts: training score vs gold score",
        [
            ("training scorer", *_series(gold, "train_score")),
            ("gold scorer", *_series(gold, "gold_score")),
        ],
    )
    return written
