"""A run with an evolving reward leaves its evolution history in the run directory whether its
training finishes or fails (trainer.grpo.train_keeping_history). The trainer and the evolution
are stand-ins: what is tested is the order of what is done with them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from trainer.grpo import train_keeping_history


class Trainer:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    def train(self) -> None:
        if self.error is not None:
            raise self.error


class Evolution:
    """Records the calls; ``write_history`` raises ``failure`` when given."""

    def __init__(self, failure: Exception | None = None) -> None:
        self.calls: list[str] = []
        self.failure = failure

    def write_history(self, path: Path) -> bool:
        self.calls.append(f"write {path.name}")
        if self.failure is not None:
            raise self.failure
        return True

    def close(self) -> None:
        self.calls.append("close")


def test_the_history_is_written_after_training_and_the_evolution_closed(tmp_path: Path) -> None:
    evolution = Evolution()
    train_keeping_history(Trainer(), cast(Any, evolution), tmp_path / "evolution.json")
    assert evolution.calls == ["write evolution.json", "close"]
    train_keeping_history(Trainer(), None, tmp_path / "evolution.json")  # no evolving reward


def test_a_failed_run_still_writes_its_history_and_raises_the_training_error(
    tmp_path: Path,
) -> None:
    evolution = Evolution()
    with pytest.raises(RuntimeError, match="step 35 failed"):
        train_keeping_history(
            Trainer(RuntimeError("step 35 failed")), cast(Any, evolution), tmp_path / "h.json"
        )
    assert evolution.calls == ["write h.json", "close"]


def test_a_history_that_cannot_be_written_after_a_failure_does_not_hide_the_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    evolution = Evolution(failure=OSError("disk full"))
    with pytest.raises(RuntimeError, match="step 35 failed"):
        train_keeping_history(
            Trainer(RuntimeError("step 35 failed")), cast(Any, evolution), tmp_path / "h.json"
        )
    assert evolution.calls == ["write h.json", "close"]
    assert "evolution history could not be written" in caplog.text
    # After a finished run the same failure is the run's error: nothing was lost but the file.
    with pytest.raises(OSError, match="disk full"):
        train_keeping_history(Trainer(), cast(Any, Evolution(OSError("disk full"))), tmp_path)
