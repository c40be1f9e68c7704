"""The per-run table of docs/overoptimization.md, from the recorded run directories.

Per run: proxy and gold on the training prompts (the mean of the first and of the last 5
steps), words per answer, the held-out scores at the start and the end, the steps at which
the gold monitor's test fires (decided from the logs, at the run's alpha), its smallest
p-value, and the proxy's agreement with gold within rollout groups.

    python examples/overopt/runs_table.py docs/overopt/runs
"""

from __future__ import annotations

import sys
from pathlib import Path

from trainer.report import (
    PROXY,
    TRAIN_GOLD,
    RunRecord,
    _training_ends,
    group_agreement,
    read_run,
)

ORDER = ("baseline", "dropout", "jury", "control")


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def row(run: RunRecord) -> str:
    proxy, gold = _training_ends(run, PROXY), _training_ends(run, TRAIN_GOLD)
    words = _training_ends(run, "text/words")
    held = run.held_out_summary()
    start, end = (held["start"], held["end"]) if held else (None, None)
    alarms = run.test_alarms()
    best = run.strongest_evidence()
    agreement = group_agreement(run.samples)
    interval = (
        f" [{agreement.interval[0]:.2f}, {agreement.interval[1]:.2f}]" if agreement.interval else ""
    )
    return (
        f"| {run.group} | {run.seed} | {_fmt(proxy[0])} / {_fmt(proxy[1])} "
        f"| {_fmt(gold[0])} / {_fmt(gold[1])} | {_fmt(words[0], 0)} / {_fmt(words[1], 0)} "
        f"| {_fmt(start.proxy if start else None)} / {_fmt(end.proxy if end else None)} "
        f"| {_fmt(start.gold if start else None)} / {_fmt(end.gold if end else None)} "
        f"| {', '.join(map(str, alarms)) or 'none'} "
        f"| {f'{best[0]:.2g} (step {best[1]}, {best[2]})' if best else '-'} "
        f"| {_fmt(agreement.agreement, 2)}{interval} ({agreement.pairs} pairs) |"
    )


def main(folder: Path) -> str:
    runs = [read_run(path) for path in sorted(folder.iterdir()) if (path / "config.yaml").is_file()]
    runs.sort(key=lambda r: (ORDER.index(r.group) if r.group in ORDER else len(ORDER), r.seed))
    level = runs[0].test_level() if runs else 0.0
    header = (
        "| run | seed | training proxy first / last 5 steps | training gold first / last "
        "| words first / last | held-out proxy start / end | held-out gold start / end "
        f"| test alarms at (each test at level {level:.3g}) | smallest p (step, answers) "
        "| proxy agrees with gold in groups [95%] |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    return "\n".join([header, *(row(run) for run in runs)])


if __name__ == "__main__":
    print(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/overopt/runs")))
