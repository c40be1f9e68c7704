"""B1 and B4: judgments per second by verdict mode, with and without prefix reuse, and cache hits.

Run: ``python -m benchmarks.bench_judging [--tasks 4] [--report-tokens 1000]`` (``make bench``).
Each figure is compared with a baseline measured in the same run, on the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.workload import Task, load_tasks
from rubricsvc.judging.backends.base import BackendError, JudgeBackend
from rubricsvc.judging.config import BUILTIN_JUDGES, JudgeSpec, VerdictMode
from rubricsvc.judging.modes import BUILDERS, Call
from rubricsvc.judging.types import ChoiceRequest, GenerationRequest
from rubricsvc.judging.verdicts import VerdictParseError

RESULTS = Path(__file__).resolve().parent / "results"


def calls_for(spec: JudgeSpec, tasks: Sequence[Task]) -> list[Call]:
    template = spec.prompt_template()
    return [
        call
        for task in tasks
        for call in BUILDERS[spec.mode](spec, template, task.view(), task.items(), 0)
    ]


def run_calls(backend: JudgeBackend, calls: Sequence[Call]) -> dict[str, Any]:
    """Send the calls in one batch per primitive; count valid verdicts and parse failures."""
    started = time.perf_counter()
    choice = [c for c in calls if isinstance(c.request, ChoiceRequest)]
    generation = [c for c in calls if isinstance(c.request, GenerationRequest)]
    responses: list[Any] = []
    if choice:
        responses += list(backend.choice_probs([c.request for c in choice]))  # type: ignore[misc]
    if generation:
        responses += list(backend.generate([c.request for c in generation]))  # type: ignore[misc]
    seconds = time.perf_counter() - started
    verdicts = failures = errors = 0
    for call, response in zip(choice + generation, responses, strict=True):
        if isinstance(response, BackendError):
            errors += len(call.keys)
            continue
        try:
            verdicts += len(call.parse(response))
        except VerdictParseError:
            failures += len(call.keys)
    judgments = sum(len(c.keys) for c in calls)
    return {
        "judgments": judgments,
        "seconds": round(seconds, 3),
        "judgments_per_s": round(judgments / seconds, 3),
        "valid_verdicts_per_s": round(verdicts / seconds, 3),
        "parse_failures": failures,
        "backend_errors": errors,
    }


def measure(name: str, action: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    print(f"  {name} ...", flush=True)
    result = action()
    print(f"  {name}: {json.dumps(result)}", flush=True)
    return result


def bench_transformers(tasks: Sequence[Task], text_tasks: Sequence[Task]) -> dict[str, Any]:
    from rubricsvc.judging.backends.transformers import TransformersBackend

    backend = TransformersBackend(batch_size=16)
    prob = BUILTIN_JUDGES["embedded"]
    results = {
        "criterion-prob, prefix reuse": measure(
            "prob+reuse", lambda: run_calls(backend, calls_for(prob, tasks))
        ),
    }
    backend.prefix_reuse = False
    results["criterion-prob, no prefix reuse"] = measure(
        "prob, no reuse", lambda: run_calls(backend, calls_for(prob, tasks))
    )
    backend.prefix_reuse = True
    text = prob.with_mode(VerdictMode.CRITERION_TEXT).model_copy(update={"max_tokens": 64})
    results["criterion-text (64 tokens)"] = measure(
        "text", lambda: run_calls(backend, calls_for(text, text_tasks))
    )
    multi = prob.with_mode(VerdictMode.MULTI_CRITERION).model_copy(
        update={"max_tokens": 96, "max_criteria": 8}
    )
    results["multi-criterion (8 per call, 96 tokens)"] = measure(
        "multi", lambda: run_calls(backend, calls_for(multi, text_tasks))
    )
    backend.close()
    return results


def bench_vllm(tasks: Sequence[Task]) -> dict[str, Any]:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from rubricsvc.judging.backends.vllm import VLLMBackend

    prob = BUILTIN_JUDGES["embedded"]
    results: dict[str, Any] = {}
    for caching in (True, False):
        backend = VLLMBackend(
            max_context=4096,
            kv_cache_memory_bytes=512 * 2**20,
            enforce_eager=True,
            enable_prefix_caching=caching,
        )
        run_calls(backend, calls_for(prob, tasks[:1]))  # warm-up: first call compiles the sampler
        label = "criterion-prob, prefix caching" if caching else "criterion-prob, no prefix caching"
        # The warm-up filled the cache with task 1's prefix: measure on the other tasks.
        results[label] = measure(label, lambda b=backend: run_calls(b, calls_for(prob, tasks[1:])))
        backend.close()
    return results


def ratio(numerator: dict[str, Any], denominator: dict[str, Any]) -> float:
    return round(numerator["judgments_per_s"] / denominator["judgments_per_s"], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=5)
    parser.add_argument("--text-tasks", type=int, default=1)
    parser.add_argument("--report-tokens", type=int, default=1000)
    parser.add_argument("--skip-vllm", action="store_true")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from rubricsvc.config import get_settings
    from rubricsvc.judging.embedded import prepare_embedded_model

    tokenizer = AutoTokenizer.from_pretrained(
        prepare_embedded_model(get_settings().judge.model_dir)
    )
    tasks = load_tasks(args.tasks, args.report_tokens, tokenizer)
    text_tasks = tasks[: args.text_tasks]
    print(
        f"workload: {len(tasks)} DeepResearch Bench reports cut to {args.report_tokens} tokens, "
        f"{sum(len(t.criteria) for t in tasks)} criteria",
        flush=True,
    )
    report: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        "workload": {
            "tasks": [t.id for t in tasks],
            "report_tokens": args.report_tokens,
            "judgments": sum(len(t.criteria) for t in tasks),
            "text_mode_judgments": sum(len(t.criteria) for t in text_tasks),
        },
        "transformers": bench_transformers(tasks, text_tasks),
    }
    t = report["transformers"]
    report["ratios"] = {
        "transformers prefix reuse / no reuse": ratio(
            t["criterion-prob, prefix reuse"], t["criterion-prob, no prefix reuse"]
        ),
    }
    if not args.skip_vllm:
        report["vllm"] = bench_vllm(tasks)
        v = report["vllm"]
        report["ratios"]["vllm prefix caching / none"] = ratio(
            v["criterion-prob, prefix caching"], v["criterion-prob, no prefix caching"]
        )
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"judging-{report['date'].replace(':', '')}.json"
    path.write_text(json.dumps(report, indent=2))
    print(json.dumps(report["ratios"], indent=2))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
