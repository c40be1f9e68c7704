"""Refresh settings that could never run are refused before the run starts, against the
database (the judges they name); no model is loaded. The refresh itself:
tests/integration/test_trainer_refresh.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rubricsvc.errors import NotFoundError, ValidationFailed
from rubricsvc.judging.config import JudgeSpec, JurySpec
from tests.helpers import approve_rubrics
from tests.integration.test_trainer_refresh import _rubrics
from tests.integration.test_trainer_rewards import FAILING_JUDGE, seed
from trainer.config import TrainConfig
from trainer.refresh import JudgeRefresh, check_refresh
from trainer.rundir import REFRESHES, RunDirectory


def _refresh_config(tmp_path: Path, database_url: str, judge: str, **refresh: Any) -> Any:
    return TrainConfig.model_validate(
        {
            "name": "checked",
            "prompts": ["rf-greet"],
            "reward": {"judge": judge, "database_url": database_url},
            "grpo": {"max_steps": 4},
            "refresh": {"every": 2, "labeller": {"judge": "always-fails"}, **refresh},
            "output_dir": str(tmp_path / "runs"),
        }
    )


def test_a_refresh_that_could_never_run_is_refused_before_the_run_starts(
    sqlite_url: str, tmp_path: Path
) -> None:
    """A reward judge with no weights of its own here, a labeller that is no judge, a student
    name an earlier run took: each refused, saying why, before a run directory is made."""
    weights = tmp_path / "student-folder"  # never loaded: the check only finds the folder
    local = JudgeSpec(name="local", backend="transformers", model=str(weights), revision="r1")
    jury = JudgeSpec(name="panel", jury=JurySpec(members=[FAILING_JUDGE, local]))
    taken = JudgeSpec(name="checked-refresh-2", backend="transformers", model=str(weights))
    seed(sqlite_url, *_rubrics()[:2])
    approve_rubrics(sqlite_url, judges=[local, jury])

    check_refresh(_refresh_config(tmp_path, sqlite_url, "local"))  # fits: nothing raised
    cases = [
        ("panel", {}, ValidationFailed, "the reward's judge 'panel' is a jury"),
        ("always-fails", {"labeller": "gold"}, ValidationFailed, "configure monitors.gold"),
        ("always-fails", {"labeller": {"judge": "local"}}, ValidationFailed, "backend 'faulty'"),
        ("local", {"labeller": {"judge": "no-such"}}, NotFoundError, "no judge named 'no-such'"),
    ]
    for judge, refresh, error, said in cases:
        with pytest.raises((error, ValueError)) as refused:
            check_refresh(_refresh_config(tmp_path, sqlite_url, judge, **refresh))
        assert said in str(refused.value), str(refused.value)
    approve_rubrics(sqlite_url, judges=[taken])
    with pytest.raises(ValidationFailed, match="'checked-refresh-2', which is stored already"):
        check_refresh(_refresh_config(tmp_path, sqlite_url, "local"))
    assert not (tmp_path / "runs").exists()


def test_a_distillation_that_fails_skips_the_refresh_and_leaves_its_log(
    sqlite_url: str, tmp_path: Path
) -> None:
    """The judge's model folder is gone when the refresh comes: ``judges distill`` (a real
    child process) fails, the refresh is skipped with the distillation's own last line, its
    log is in the step's folder, and the reward keeps its judge. No model is loaded."""
    local = JudgeSpec(name="local", backend="transformers", model=str(tmp_path / "w"))
    seed(sqlite_url, *_rubrics()[:2])
    approve_rubrics(sqlite_url, judges=[local])
    config = _refresh_config(tmp_path, sqlite_url, "local", labeller={"labels": "people/{step}"})
    run = RunDirectory(tmp_path / "run")
    scorer = SimpleNamespace(settings=config.reward)
    record = JudgeRefresh(config, run, [scorer]).refresh(2)  # type: ignore[list-item]
    assert record["skipped"].startswith("judges distill failed: "), record
    assert f"--base {tmp_path / 'w'}: no such folder" in record["skipped"]
    distill_log = (run.path / "refresh" / "step-2" / "distill.log").read_text()
    assert f"--base {tmp_path / 'w'}: no such folder" in distill_log
    assert record["swapped"] is False and scorer.settings.judge == "local"
    logged = [json.loads(line) for line in (run.path / REFRESHES).read_text().splitlines()]
    assert [r["skipped"] for r in logged] == [record["skipped"]]
