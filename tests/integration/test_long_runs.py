"""Long runs: progress on stderr in every output mode, Ctrl-C keeps every finished batch and
says how to resume, and a slow judge still checkpoints every ``checkpoint_seconds``.

The CLI runs as a subprocess (``python -m rubricsvc``) with a scripted judge that sleeps on
every batch (``backend_options: {delay: ...}``): the tests are about interruption and
cadence, not verdicts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.completions import CompletionRecord, add_completions
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import Judgment, Score
from rubricsvc.rubrics import versions as rubrics
from rubricsvc.scoring.scorer import ScoreOptions, score
from rubricsvc.scoring.selection import Selection
from tests.cli_runner import cli_ok
from tests.helpers import read_database, rubric_spec

CRITERIA = ["Is friendly", "Is short", "Names a colour", "Ends with a question"]
COMPLETIONS = 12  # x 4 criteria = 48 judgments


def _setup_cli(database_url: str, tmp_path: Path, delay: float) -> None:
    rubric_file = tmp_path / "rubrics.yaml"
    rubric_file.write_text(
        yaml.safe_dump(
            {
                "rubrics": [
                    {
                        "name": "long/greeting",
                        "prompt": {"external_id": "greet", "text": "Say hello."},
                        "criteria": [{"text": text, "weight": 1} for text in CRITERIA],
                    }
                ]
            }
        )
    )
    completions = tmp_path / "completions.jsonl"
    completions.write_text(
        "".join(
            json.dumps(
                {
                    "prompt_external_id": "greet",
                    "external_id": f"greet/{n}",
                    "source": "long",
                    "text": f"Hello number {n}!",
                }
            )
            + "\n"
            for n in range(COMPLETIONS)
        )
    )
    judges = tmp_path / "judges.yaml"
    judges.write_text(
        yaml.safe_dump(
            {
                "judges": [
                    {
                        "name": "slow",
                        "backend": "scripted",
                        "mode": "criterion-prob",
                        "backend_options": {"delay": delay},
                    }
                ]
            }
        )
    )
    cli_ok("rubrics", "add", str(rubric_file), database_url=database_url)
    cli_ok("rubrics", "approve", "long/greeting", database_url=database_url)
    cli_ok("completions", "add", str(completions), database_url=database_url)
    cli_ok("judges", "add", str(judges), database_url=database_url)


def _judgments(database_url: str) -> tuple[int, int]:
    """(judgment rows, distinct cache keys) stored."""
    return read_database(  # type: ignore[no-any-return]
        database_url,
        lambda s: (
            s.scalar(select(func.count()).select_from(Judgment)),
            s.scalar(select(func.count(func.distinct(Judgment.cache_key)))),
        ),
    )


def _env(database_url: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "RUBRICSVC_DATABASE_URL": database_url, "COLUMNS": "200", **extra}


@pytest.mark.slow
def test_ctrl_c_keeps_finished_batches_and_a_rerun_completes_them(
    database_url: str, tmp_path: Path
) -> None:
    # 0.8 s per batch (a chunk is one batch); checkpoints every 0.2 s of judging: after the
    # first chunk (16 judgments, 0.05 s each) each chunk is sized to 0.2 s, one completion's 4
    # judgments, so 8 more chunks follow the first: the Ctrl-C sent once the first is stored
    # has 6.4 s to land before the run would end (a loaded machine delays it; a window of one
    # chunk was missed in CI).
    _setup_cli(database_url, tmp_path, delay=0.8)
    args = ["score", "--judge", "slow", "--json", "--no-breakdown"]
    env = _env(database_url, RUBRICSVC_SCORING_CHECKPOINT_SECONDS="0.2")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rubricsvc", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while _judgments(database_url)[0] == 0:  # the first batch is committed
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no batch was stored in 120 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert stdout == ""  # no report: the run did not finish
    assert "stopping after the batch in flight" in stderr
    kept, keys = _judgments(database_url)
    assert 0 < kept < COMPLETIONS * len(CRITERIA) and kept == keys
    assert f"interrupted: {kept} of {COMPLETIONS * len(CRITERIA)} judgments done and stored" in (
        stderr
    )
    assert f"resume: rubricsvc {' '.join(args)}" in stderr
    # Every stored judgment's completion is fully judged and scored: a chunk is whole
    # completions, committed with their scores.
    scored = read_database(
        database_url, lambda s: s.scalar(select(func.count()).select_from(Score))
    )
    assert scored * len(CRITERIA) == kept

    again = subprocess.run(
        [sys.executable, "-m", "rubricsvc", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["judgments"] == COMPLETIONS * len(CRITERIA)
    assert report["cached"] == kept  # what the interrupted run stored is not judged again
    assert report["computed"] == COMPLETIONS * len(CRITERIA) - kept
    assert len(report["scores"]) == COMPLETIONS
    assert all(s["value"] is not None for s in report["scores"])
    total, distinct = _judgments(database_url)
    assert total == distinct == COMPLETIONS * len(CRITERIA)  # no duplicates
    assert (
        read_database(database_url, lambda s: s.scalar(select(func.count()).select_from(Score)))
        == COMPLETIONS
    )


def test_json_runs_print_progress_lines_on_stderr(sqlite_url: str, tmp_path: Path) -> None:
    _setup_cli(sqlite_url, tmp_path, delay=0.0)
    result = cli_ok("score", "--judge", "slow", "--json", database_url=sqlite_url)
    report = json.loads(result.stdout)  # stdout stays pure JSON
    assert report["computed"] == COMPLETIONS * len(CRITERIA)
    lines = [line for line in result.stderr.splitlines() if line.startswith("judging: ")]
    assert lines[0].startswith("judging: 0/48 (0%)")
    assert lines[-1].startswith("judging: 48/48 (100%)")
    # One line per 10% step at most: never more than 11.
    assert 2 <= len(lines) <= 11


def _setup(session: Session, completions: int) -> None:
    spec = rubric_spec(
        "pace/r",
        criteria=[{"text": text, "weight": 1} for text in CRITERIA],
        prompt={"text": "Say hello.", "external_id": "p"},
    )
    rubrics.approve(session, rubrics.save_rubric(session, spec).version, "tester")
    records = [
        ("t", CompletionRecord(prompt_external_id="p", text=f"Hello {n}", external_id=f"c{n}"))
        for n in range(completions)
    ]
    add_completions(session, records)
    session.commit()


@pytest.mark.parametrize(
    ("checkpoint_seconds", "expected_checkpoints"),
    [
        # 0.1 s per batch: the first chunk (2 judgments, rounded up to a whole completion:
        # 4) takes 0.1 s, 0.025 s a judgment, so 0.05 s is 2 judgments: one completion a chunk.
        (0.05, 8),
        # A patient run: the first completion, then everything else in one batch.
        (1000.0, 2),
    ],
)
def test_a_slow_judge_checkpoints_every_checkpoint_seconds(
    session: Session, checkpoint_seconds: float, expected_checkpoints: int
) -> None:
    _setup(session, 8)
    backend = ScriptedBackend(delay=0.1)
    commits: list[int] = []

    def checkpoint() -> None:
        session.commit()
        commits.append(session.scalar(select(func.count()).select_from(Judgment)) or 0)

    options = ScoreOptions(checkpoint_seconds=checkpoint_seconds, first_chunk_judgments=2)
    spec = JudgeSpec(name="paced", backend="scripted", mode="criterion-prob")
    report = score(session, spec, Selection(), options, lambda: backend, checkpoint=checkpoint)
    assert report.computed == 32
    assert len(commits) == expected_checkpoints
    assert backend.choice_calls == expected_checkpoints  # one backend batch per chunk
    assert commits[0] == 4 and commits[-1] == 32 and commits == sorted(commits)
