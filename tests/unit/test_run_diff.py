"""``rubricsvc train diff``: a re-run against its record, figure by figure, to the digit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli_runner import run_cli
from trainer.environment import numerics_differences
from trainer.rundiff import diff_runs

STEPS = [
    {"step": 1, "loss": -1.0207295417785645e-06, "grad_norm": 3.081289291381836, "step_time": 27.4},
    {"step": 2, "loss": -4.842877388000488e-07, "grad_norm": 2.723127603530884, "step_time": 25.3},
]


def _run(path: Path, steps: list[dict[str, Any]], environment: dict[str, Any] | None) -> Path:
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    (path / "samples.jsonl").write_text(json.dumps({"step": 1, "completion": "Sleep."}) + "\n")
    if environment is not None:
        (path / "environment.json").write_text(json.dumps(environment))
    return path


def test_a_re_run_equal_but_for_its_times_is_identical(tmp_path: Path) -> None:
    here = {"processor": "AMD EPYC", "cpu_capability": "AVX2", "torch_threads": 1, "packages": {}}
    timed = [{**s, "step_time": s["step_time"] * 2, "train_runtime": 9.0} for s in STEPS]
    result = diff_runs(_run(tmp_path / "a", STEPS, here), _run(tmp_path / "b", timed, here))
    assert result.identical and result.environment == []
    assert result.summary()[0] == (
        "identical to the digit: 2 records of metrics.jsonl, 1 records of samples.jsonl"
    )


def test_the_first_differing_step_and_the_environments_differences_are_named(
    tmp_path: Path,
) -> None:
    avx512 = {
        "processor": "Intel(R) Xeon(R)",
        "cpu_capability": "AVX512",
        "torch_threads": 1,
        "packages": {"torch": "2.13.0+cpu", "trl": "1.16.0", "rubricsvc": "0.1.0"},
    }
    avx2 = {**avx512, "processor": "AMD EPYC", "cpu_capability": "AVX2"}
    drifted = [STEPS[0], {**STEPS[1], "grad_norm": 2.7231340408325195}]
    recorded = _run(tmp_path / "record", STEPS, avx512)
    result = diff_runs(recorded, _run(tmp_path / "rerun", drifted, avx2))
    assert not result.identical
    (difference,) = result.differences
    assert (difference.position, difference.key) == ("step 2", "grad_norm")
    assert result.environment == [
        "cpu_capability AVX512 -> AVX2",
        "processor Intel(R) Xeon(R) -> AMD EPYC",
    ]
    text = "\n".join(result.summary())
    assert "first in metrics.jsonl at step 2" in text
    assert "grad_norm: 2.723127603530884 -> 2.7231340408325195" in text

    # A re-run cut short: the record's later steps are differences too.
    short = diff_runs(recorded, _run(tmp_path / "short", STEPS[:1], None))
    assert [d.line() for d in short.differences] == ["metrics.jsonl step 2: only in the record"]
    assert short.environment is None

    # A figure the code logs since the record was made is listed, not held against it; one
    # the re-run no longer logs is a difference.
    newer = [{**s, "evolution/judge_failures": 0.0} for s in STEPS]
    grown = diff_runs(recorded, _run(tmp_path / "newer", newer, None))
    assert grown.identical and grown.added == {"metrics.jsonl:evolution/judge_failures"}
    assert (
        "figures only the re-run logs (not compared): metrics.jsonl:evolution/judge_failures"
        in (grown.summary())
    )
    fewer = [{k: v for k, v in s.items() if k != "loss"} for s in STEPS]
    lost = diff_runs(recorded, _run(tmp_path / "fewer", fewer, None))
    assert [(d.key, d.rerun) for d in lost.differences] == [("loss", None), ("loss", None)]


def test_numerics_differences_name_library_versions_but_not_rubricsvcs_own() -> None:
    before = {"packages": {"torch": "2.13.0", "transformers": "5.18.0", "rubricsvc": "0.1.0"}}
    after = {"packages": {"torch": "2.13.0", "transformers": "5.19.0", "rubricsvc": "0.2.0"}}
    assert numerics_differences(before, after) == ["transformers 5.18.0 -> 5.19.0"]


def test_numerics_differences_name_another_generation_of_a_like_named_processor() -> None:
    before = {"processor": "AMD EPYC", "processor_id": "cpu family 25 model 17 stepping 1"}
    after = {"processor": "AMD EPYC", "processor_id": "cpu family 25 model 1 stepping 1"}
    assert numerics_differences(before, after) == [
        "processor_id cpu family 25 model 17 stepping 1 -> cpu family 25 model 1 stepping 1"
    ]
    # A record made before the id was kept says nothing about it.
    assert numerics_differences({"processor": "AMD EPYC"}, after) == []


def test_the_command_exits_1_on_a_difference_and_2_on_a_folder_that_is_no_run(
    tmp_path: Path, sqlite_url: str
) -> None:
    recorded = _run(tmp_path / "a", STEPS, None)
    rerun = _run(tmp_path / "b", [STEPS[0], {**STEPS[1], "loss": 0.0}], None)
    differing = run_cli("train", "diff", str(recorded), str(rerun), database_url=sqlite_url)
    assert differing.code == 1
    assert "metrics.jsonl step 2 loss: -4.842877388000488e-07 -> 0.0" in differing.stdout
    missing = run_cli("train", "diff", str(tmp_path), str(rerun), database_url=sqlite_url)
    assert missing.code == 2 and "is not a run directory (no metrics.jsonl)" in missing.stderr
