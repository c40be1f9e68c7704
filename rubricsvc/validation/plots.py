"""PNG figures of a judge evaluation (matplotlib, Agg backend).

matplotlib comes with the trainer extra and is imported inside each function, so the metrics
and the rest of ``judges evaluate`` work without it; only asking for a plot needs the extra.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rubricsvc.errors import missing_extra
from rubricsvc.validation.metrics import ReliabilityBin


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display on servers and CI
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise missing_extra(
            err, "judge evaluation plots need the trainer extra", "trainer"
        ) from None
    return plt


def _save(plt: Any, figure: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def reliability_diagram(bins: Sequence[ReliabilityBin], path: Path, title: str) -> Path:
    """Observed frequency against stated probability per bin, with the diagonal a calibrated
    judge would follow; empty bins are left blank rather than drawn at 0, and each bar is
    labelled with its count so a sparse bin is not over-read."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(5, 5))
    axes.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1, label="calibrated")
    filled = [b for b in bins if b.frequency is not None and b.count > 0]
    bars = axes.bar(
        [b.low for b in filled],
        [b.frequency for b in filled],
        width=[b.high - b.low for b in filled],
        align="edge",
        edgecolor="black",
        alpha=0.7,
        label="observed frequency",
    )
    axes.bar_label(bars, labels=[str(b.count) for b in filled], fontsize="x-small")
    axes.plot(
        [b.mean_prob for b in filled],
        [b.frequency for b in filled],
        marker="o",
        markersize=3,
        linestyle="none",
        color="black",
        label="bin mean probability",
    )
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1.05)
    axes.set_xlabel("judge probability")
    axes.set_ylabel("share of positive human labels")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small", loc="upper left")
    return _save(plt, figure, path)


def agreement_bars(
    rows: Sequence[tuple[str, float, tuple[float, float] | None]], path: Path, title: str
) -> Path:
    """One bar per metric (name, value, bootstrap interval or None) with the interval as error
    bars, so a difference between judges can be read against its uncertainty."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(max(4.0, 1.2 * len(rows) + 2), 4))
    names = [name for name, _, _ in rows]
    values = [value for _, value, _ in rows]
    positions = list(range(len(rows)))
    axes.bar(positions, values, alpha=0.8, edgecolor="black")
    # The interval is drawn from its own ends, not as distances from the bar: a percentile
    # bootstrap interval need not contain the point estimate, and yerr refuses negative lengths.
    shown = [(x, ci) for x, (_, _, ci) in zip(positions, rows, strict=True) if ci is not None]
    if shown:
        xs = [x for x, _ in shown]
        lows = [ci[0] for _, ci in shown]
        highs = [ci[1] for _, ci in shown]
        axes.vlines(xs, lows, highs, color="black", linewidth=1.2)
        axes.plot(xs + xs, lows + highs, linestyle="none", marker="_", markersize=12, color="black")
    axes.set_xticks(positions, names, rotation=20, ha="right")
    axes.axhline(0, color="black", linewidth=0.8)
    axes.set_ylabel("value (line: bootstrap interval)")
    axes.set_title(title)
    axes.grid(axis="y", alpha=0.3)
    return _save(plt, figure, path)


def forest_plot(
    rows: Sequence[tuple[str, float | None, tuple[float, float] | None]], path: Path, title: str
) -> Path:
    """One row per comparison (label, difference, bootstrap interval or None): the point and
    its interval against a line at zero, so a difference whose interval crosses zero reads as
    one the labels do not settle."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6, max(2.0, 0.5 * len(rows) + 1.2)))
    positions = list(range(len(rows)))[::-1]  # the first row on top
    for y, (_, value, interval) in zip(positions, rows, strict=True):
        if interval is not None:
            axes.hlines(y, interval[0], interval[1], color="black", linewidth=1.2)
        if value is not None:
            axes.plot([value], [y], marker="s", color="black", markersize=6)
    axes.axvline(0, color="grey", linestyle="--", linewidth=1)
    axes.set_yticks(positions, [label for label, _, _ in rows])
    axes.set_xlabel("difference in agreement (line: paired bootstrap interval)")
    axes.set_title(title)
    axes.grid(axis="x", alpha=0.3)
    return _save(plt, figure, path)
