"""The benchmark page generator and the HealthBench-style grader's verdict parser."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from benchmarks.peers.healthbench_style import GRADER_TEMPLATE, grader_prompt, parse_verdict
from benchmarks.report import update
from benchmarks.results import headline, spread

PUBLISHED_TEMPLATE_SHA256 = "2adffd51fd259554ebcd036ad1072d4aa2b7ce3aec2bbffe36271f911632ed3c"
RUN = {
    "date": "2026-01-02T03:04:05+00:00",
    "machine": "Test CPU, 2 cores",
    "other_work_cores": 0.05,
}


def write(results: Path, name: str, result: dict[str, object]) -> None:
    results.mkdir(exist_ok=True)
    (results / f"{name}-latest.json").write_text(json.dumps({**RUN, **result}))


def render(results: Path, name: str, result: dict[str, object]) -> str:
    """The block ``name`` of an empty page, written from ``result``."""
    write(results, name, result)
    return update(f"<!-- results:{name} -->\n<!-- /results:{name} -->\n", results)[0]


def rates(per_s: float, valid: float, failures: int = 0) -> dict[str, float | int]:
    return {
        "judgments": 10,
        "seconds": 10 / per_s,
        "judgments_per_s": per_s,
        "valid_verdicts_per_s": valid,
        "parse_failures": failures,
        "prompt_tokens": 12000,
        "reply_tokens": 10,
    }


def test_blocks_are_rewritten_from_results_and_the_prose_is_kept(tmp_path: Path) -> None:
    def repeat(task: int, peer_valid: float) -> dict[str, object]:
        return {
            "task": task,
            "order": ["rubricsvc", "peer"],
            "graders": {"rubricsvc": rates(4.0, 4.0), "peer": rates(2.0, peer_valid, 7)},
        }

    write(
        tmp_path,
        "peers",
        {
            "command": "python -m benchmarks.bench_peers",
            "workload": {
                "warm_up_task": 51,
                "tasks": [52, 53],
                "report_tokens": 1000,
                "criteria_per_report": 16,
                "concurrency": 16,
                "grader_max_tokens": 2048,
                "grader_temperature": 0.5,
                "grader_attempts": 1,
                "verifiers_tokens_per_criterion": 128,
            },
            "repeats": [repeat(52, 0.5), repeat(53, 1.0)],
            "ratios": {
                "rubricsvc / peer, valid_verdicts_per_s": [8.0, 4.0],
                "rubricsvc / silent, valid_verdicts_per_s": [None],
            },
            "headlines": {
                "valid": {
                    "compares": "valid verdicts/s, rubricsvc / peer",
                    "unit": "x",
                    "median": 6.0,
                    "min": 4.0,
                    "max": 8.0,
                    "runs": [8.0, 4.0],
                    "at_least": 3,
                    "met": True,
                }
            },
        },
    )
    doc = (
        "# Title\nprose before\n<!-- results:peers -->\nold figures\n<!-- /results:peers -->\n"
        "middle\n<!-- results:queue -->\nkept\n<!-- /results:queue -->\nafter\n"
    )
    text, written, missing = update(doc, tmp_path)

    assert written == ["peers"] and missing == ["queue"]
    assert "old figures" not in text
    assert text.startswith("# Title\nprose before\n") and "middle\n" in text and "after\n" in text
    assert "<!-- results:queue -->\nkept\n<!-- /results:queue -->" in text
    assert "`python -m benchmarks.bench_peers`" in text and "Test CPU" in text
    assert "other work on the machine meanwhile: 0.05 cores" in text
    assert "warmed up on DeepResearch Bench report 51 (not measured)" in text
    assert "| 2: report 53 | peer | 10 | 5.0 | 2.0 | 1.0 | 7 | 12000 | 10 |" in text
    assert "- rubricsvc / peer, valid_verdicts_per_s, per repeat: 8x, 4x" in text
    assert "silent, valid_verdicts_per_s: the peer gave no valid verdict" in text
    assert (
        "- valid verdicts/s, rubricsvc / peer: 6x [4x-8x] over 2 runs (target >= 3x: met)" in text
    )
    # Rewriting again from the same results changes nothing.
    assert update(text, tmp_path)[0] == text


def test_a_missed_target_is_reported_as_missed(tmp_path: Path) -> None:
    text = render(
        tmp_path,
        "queue",
        {
            "command": "python -m benchmarks.bench_queue",
            "judgments": 1600,
            "latency_per_request_s": 0.002,
            "chunk_judgments": 256,
            "runs": 3,
            "seconds": {
                "in-process": spread([4.0, 4.2, 3.9]),
                "celery, 1 worker": spread([6.0, 6.1, 5.8]),
            },
            "two_workers": {"seconds": 3.1, "ratio": 0.78, "overhead_ms_per_judgment": 0.6},
            "headlines": {
                "queue_ratio": headline([1.5, 1.45, 1.49], "queue / in-process", at_most=1.25),
                "overhead_ms": headline([1.25, 1.2, 1.19], "per judgment", unit="ms", at_most=2),
            },
        },
    )
    assert "| Celery + Redis + PostgreSQL, 1 worker | 6 [5.8-6.1] | 1.49x [1.45x-1.5x] |" in text
    assert ", 2 workers (one run) | 3.1 | 0.78x | 0.6 ms |" in text
    assert "- queue / in-process: 1.49x [1.45x-1.5x] over 3 runs (target <= 1.25x: missed)" in text
    assert "- per judgment: 1.2 ms [1.19 ms-1.25 ms] over 3 runs (target <= 2 ms: met)" in text


def test_repeated_rows_show_their_spread_and_the_reuse_ratios_their_runs(
    tmp_path: Path,
) -> None:
    repeated = {
        **rates(3.0, 3.0),
        "runs": 3,
        "judgments_per_s": spread([3.0, 2.8, 3.3]),
        "seconds": spread([3.333, 3.571, 3.03]),
    }
    runs = {"criterion-prob, prefix reuse": repeated, "criterion-text": rates(0.1, 0, 10)}
    text = render(
        tmp_path,
        "judging",
        {
            "command": "python -m benchmarks.bench_judging",
            "workload": {
                "tasks": [51],
                "report_tokens": 1000,
                "judgments": 25,
                "runs": 3,
                "short_answers": 2,
                "short_answer_judgments": 20,
                "text_mode_judgments": 3,
                "baseline_criteria_per_response": 2,
            },
            "transformers": runs,
            "vllm": runs,
            "headlines": {
                "vllm_reuse": headline([4.1, 5.2, 4.0], "vllm reuse / none", at_least=5),
            },
            "short_answer_ratios": {"vllm prefix caching / none, short answers": 1.9},
            "prefill_tokens_per_judgment": {
                "short answers": {"without_reuse": 400.0, "with_reuse": 120.5, "bound": 3.32},
            },
        },
    )
    assert (
        "| transformers | criterion-prob, prefix reuse (3 runs) | 10 | 3.333 [3.03-3.571] "
        "| 3 [2.8-3.3] | 3.0 | 0 | 12000 | 10 |" in text
    )
    assert "| vllm (vllm-cpu) | criterion-text (one run) | 10 | 100.0 | 0.1 | 0 | 10 |" in text
    assert "- vllm reuse / none: 4.1x [4x-5.2x] over 3 runs (target >= 5x: missed)" in text
    assert "- vllm prefix caching / none, short answers (one run): 1.9x\n" in text
    assert "- short answers: 400 without reuse, 120.5 with it: at most 3.32x" in text


def test_the_platform_share_of_in_process_scoring_is_reported(tmp_path: Path) -> None:
    text = render(
        tmp_path,
        "overhead",
        {
            "command": "python -m benchmarks.bench_overhead",
            "workload": {"tasks": [51], "report_tokens": 1000},
            "runs": 3,
            "judgments": 25,
            "backend_requests": 25,
            "floor_seconds": spread([9.5, 9.4, 10.1]),
            "in_process_seconds": spread([9.6, 9.3, 10.0]),
            "in_process_outside_backend_seconds": spread([0.06, 0.07, 0.05]),
            "rescore_seconds": spread([0.021, 0.02, 0.025], digits=4),
            "rescore_cached": 25,
            "rescore_backend_requests": 0,
            "celery_seconds": spread([11.2, 11.0, 11.9]),
            "headlines": {
                "celery": headline([1.18, 1.17, 1.18], "Celery / floor", at_most=1.25),
                "own_share": headline([0.62, 0.75, 0.5], "own share", unit="%", digits=2),
                "own_ms": headline([2.4, 2.8, 2.0], "own ms per judgment", unit="ms"),
            },
        },
    )
    assert "| of which outside the backend's calls (s) | 0.06 [0.05-0.07] |" in text
    assert "| 0.021 [0.02-0.025] (25 from the cache, 0 backend requests) |" in text
    assert "- Celery / floor: 1.18x [1.17x-1.18x] over 3 runs (target <= 1.25x: met)" in text
    assert "- own share: 0.62 % [0.5 %-0.75 %] over 3 runs" in text
    assert "- own ms per judgment: 2.4 ms [2 ms-2.8 ms] over 3 runs" in text


def test_api_load_shows_before_and_after_with_their_spread(tmp_path: Path) -> None:
    def server(rate: list[float], p99: list[float], healthz_p50: float) -> dict[str, Any]:
        return {
            "requests_per_second": spread(rate, 1),
            "p50_ms": spread([p / 2 for p in p99], 0),
            "p99_ms": spread(p99, 0),
            "errors": 0,
            "by_route": {"rubrics": {"p50_ms": spread([400.4]), "p99_ms": spread([900.6], 0)}},
            "healthz": {"p50_ms": healthz_p50, "p99_ms": 2 * healthz_p50},
        }

    text = render(
        tmp_path,
        "api_load",
        {
            "command": "python -m benchmarks.bench_api_load",
            "clients": 50,
            "seconds": 20,
            "warm_seconds": 5,
            "runs": 3,
            "workers": 2,
            "baseline_commit": "82900cda2ebab1652a49942fdee103135e274ff8",
            "database": "postgresql",
            "before": server([31.0, 33.26, 34.0], [3000, 3100, 2900], 295.26),
            "after": server([90.0, 95.0, 99.0], [1200, 1100, 1300], 120.0),
        },
    )
    assert "50 clients on postgresql, 3 runs of 20 s on each server" in text
    assert "| `82900cda2e`, one process | 33.3 [31-34] | 1500 [1450-1550] |" in text
    assert "| `serve --workers 2` | 95 [90-99] | 600 [550-650] | 1200 [1100-1300] | 0 |" in text
    assert "| 295 / 591 |" in text
    assert "| `rubrics` | 400.4 [400.4-400.4] | 901 [901-901] |" in text


def test_the_healthbench_style_verdict_parser() -> None:
    assert parse_verdict('```json\n{"explanation": "ok", "criteria_met": true}\n```') is True
    assert parse_verdict('{"explanation": "no", "criteria_met": false}') is False
    assert parse_verdict('{"explanation": "no", "criteria_met": "false"}') is None
    assert parse_verdict("The response meets the criterion.") is None
    assert parse_verdict('["criteria_met", true]') is None


def test_the_healthbench_grader_template_is_the_published_one() -> None:
    # sha256 of simple-evals' GRADER_TEMPLATE (healthbench_eval.py, commit ee3b0318): an edit
    # to the copy, even of its spelling mistakes, is no longer the published grader.
    digest = hashlib.sha256(GRADER_TEMPLATE.encode()).hexdigest()
    assert digest == PUBLISHED_TEMPLATE_SHA256
    assert GRADER_TEMPLATE.startswith("Your job is to look at a conversation and a rubric item")


def test_the_grader_prompt_puts_the_criterion_after_the_conversation() -> None:
    prompt = grader_prompt("Why is the sky blue?", "Rayleigh scattering.", "Names Rayleigh", 5)
    conversation = prompt.index("assistant: Rayleigh scattering.")
    assert conversation < prompt.index("[5] Names Rayleigh") < prompt.index("# Instructions")
