"""`python -m benchmarks.gpu_check` on the CPU at its smallest: the 135M shape with random
weights, loaded by the transformers backend, judged with and without prefix reuse and through
`score()` against the floor. No figure is held to a speed here: the record's fields are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.requirements import prepared_model_dir

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.model
def test_the_gpu_check_runs_on_the_cpu_and_writes_its_record(tmp_path: Path) -> None:
    prepared_model_dir()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_check", "--device", "cpu", "--judgments", "2",
         "--repeats", "1", "--report-tokens", "64", "--output", str(tmp_path)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "gpu_check-latest.json").read_text())
    assert record["benchmark"] == "gpu_check"
    assert record["command"].startswith("python -m benchmarks.gpu_check --device cpu")
    assert (record["device"], record["dtype"]) == ("cpu", "float32")
    assert record["device_name"].startswith("CPU: ") and record["torch"]
    assert "random" in record["weights"] and "49,152" in record["weights"]
    assert record["workload"]["judgments"] == 2 and record["workload"]["repeats"] == 1
    assert record["grpo_step_split"] == "not measured by this version"
    (shape,) = record["shapes"].items()
    name, figures = shape
    assert name == "smollm2-135m" and figures["parameters"] > 100_000_000
    judging = figures["judging"]
    assert judging["judgments"] == 2 and judging["parse_failures_and_errors"] == 0
    for key in ("judgments_per_s_prefix_reuse", "judgments_per_s_no_prefix_reuse"):
        assert judging[key]["median"] > 0 and len(judging[key]["runs"]) == 1
    assert judging["prefix_reuse_ratio"]["median"] > 0
    versus = figures["score_vs_floor"]
    assert versus["judgments"] == 2 and versus["score_over_floor"]["median"] > 0
