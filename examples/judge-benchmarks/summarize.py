"""The judge benchmarks' figures as one Markdown table per benchmark, from run.sh's reports.

    python examples/judge-benchmarks/summarize.py [RESULTS]   (default: this folder's results/)

Each report is a `judges evaluate --report` folder (`evaluation.json`); a figure is printed
with its 95% interval (prompts resampled) as the report holds it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _share(value: float | None, interval: list[float] | None) -> str:
    if value is None:
        return "n/a"
    if not interval:
        return f"{value:.3f}"
    return f"{value:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]"


def _platform(report: dict[str, Any]) -> str:
    return _share(report["agreement"], report.get("agreement_ci"))


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(header: list[str], body: list[list[str]]) -> list[str]:
    return [_row(header), _row(["---"] * len(header)), *(_row(cells) for cells in body)]


def judgebench_rows(reports: list[dict[str, Any]]) -> list[str]:
    categories = sorted({c for r in reports for c in r["benchmark"]["by_category"]})
    header = ["judge", "pairs", "JudgeBench accuracy", "right / wrong / neither"]
    body = []
    for report in reports:
        bench = report["benchmark"]
        by_category = bench["by_category"]
        body.append(
            [
                report["judge"],
                str(bench["n"]),
                _share(bench["accuracy"], bench["accuracy_ci"]),
                f"{bench['correct']} / {bench['incorrect']} / {bench['neither']}",
                *(
                    f"{by_category[c]['correct']}/{by_category[c]['n']}"
                    if c in by_category
                    else "-"
                    for c in categories
                ),
                _platform(report),
            ]
        )
    return _table([*header, *categories, "platform agreement"], body)


def rmbench_rows(reports: list[dict[str, Any]]) -> list[str]:
    domains = [
        d
        for d in ("chat", "math", "code", "safety")
        if any(d in r["benchmark"]["domains"] for r in reports)
    ]
    figures = ("average", "hard", "normal", "easy")
    body = []
    for report in reports:
        bench = report["benchmark"]
        body.append(
            [
                report["judge"],
                str(bench["n_prompts"]),
                *(_share(bench[k], bench[f"{k}_ci"]) for k in figures),
                *(
                    f"{bench['domains'][d]['average']:.3f}" if d in bench["domains"] else "-"
                    for d in domains
                ),
                _platform(report),
            ]
        )
    rows = _table(["judge", "prompts", *figures, *domains, "platform agreement"], body)
    missing = sorted({d for r in reports for d in r["benchmark"].get("domains_missing", [])})
    if missing:
        rows.append("")
        rows.append(f"Domains not in the data measured: {', '.join(missing)}.")
    return rows


def main() -> None:
    results = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "results"
    reports: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(results.glob("*/evaluation.json")):
        report = json.loads(path.read_text(encoding="utf-8"))
        reports.setdefault(report["benchmark"]["name"], []).append(report)
    for name, found in reports.items():
        print(f"### {name}: {found[0]['labels']}\n")
        rows = judgebench_rows(found) if name == "JudgeBench" else rmbench_rows(found)
        print("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
