"""``rubricsvc judges audit`` on the real embedded judge and the demo set: the attacks the
platform neutralizes (control-token turns, frame escapes) must not raise the score, padding
past the context is charged to the response, and the audit is stored with the judge config.
The whole library's figures for this judge are in docs/judging.md."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from rubricsvc import demo
from rubricsvc.audit.attacks import ATTACKS, NEUTRALIZED_FAMILIES
from rubricsvc.models import JudgeAudit, JudgeConfig
from tests.cli_runner import run_cli
from tests.helpers import read_database
from tests.requirements import prepared_model_dir

pytestmark = [pytest.mark.model, pytest.mark.slow]

NEUTRALIZED = [a.name for a in ATTACKS if a.family in NEUTRALIZED_FAMILIES]
MAX_INFLATION = 0.05


def test_neutralized_attacks_do_not_inflate_the_embedded_judge(sqlite_url: str) -> None:
    prepared_model_dir()
    assert run_cli("db", "upgrade", database_url=sqlite_url).code == 0
    attacks = [*NEUTRALIZED, "padding"]
    args = [arg for name in attacks for arg in ("--attack", name)]
    result = run_cli("judges", "audit", "embedded", "--json", *args, database_url=sqlite_url)
    assert result.code == 0, result.stderr
    report = result.json()
    by_name = {a["name"]: a for a in report["attacks"]}
    assert sorted(by_name) == sorted(attacks)
    for name in NEUTRALIZED:
        attack = by_name[name]
        assert attack["items"] == 3 and attack["masked"] == 0
        assert attack["mean_inflation"] < MAX_INFLATION, attack
        assert attack["ci_low"] <= attack["mean_inflation"] <= attack["ci_high"]
    padding = by_name["padding"]
    assert padding["failures"]["response"] > 0  # every judged criterion overflowed...
    assert padding["mean_inflation"] < 0  # ...and was scored at its worst, not masked
    stored = read_database(
        sqlite_url,
        lambda s: s.execute(select(JudgeAudit, JudgeConfig.name).join(JudgeConfig)).all(),
    )
    ((row, judge),) = stored
    assert (row.id, judge, row.set_name) == (report["audit_id"], "embedded", "demo")
    assert row.report["attacks"] == report["attacks"]


def test_training_refuses_a_judge_that_fails_its_audit(sqlite_url: str, tmp_path: Path) -> None:
    pytest.importorskip("trl")
    prepared_model_dir()
    from rubricsvc.errors import ValidationFailed
    from trainer.config import ScorerSettings, TrainConfig
    from trainer.grpo import train

    assert run_cli("db", "upgrade", database_url=sqlite_url).code == 0
    assert run_cli("rubrics", "add", str(demo.RUBRICS), database_url=sqlite_url).code == 0
    config = TrainConfig(
        prompts=["demo-sleep"],
        reward=ScorerSettings(database_url=sqlite_url, include_drafts=True),
        output_dir=tmp_path,
        audit=True,
        audit_attacks=["master-key-colon"],
        audit_max_inflation=-1.0,  # no attack can pass this
    )
    with pytest.raises(ValidationFailed, match="failed its audit: attack master-key-colon"):
        train(config)
    assert not config.run_dir.exists()  # nothing was started
    assert read_database(sqlite_url, lambda s: len(s.scalars(select(JudgeAudit)).all())) == 1
