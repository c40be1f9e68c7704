"""A judge stored by an earlier rubricsvc, whose same settings this rubricsvc hashes anew (a
new neutralizing step, say), becomes the name's next config: scoring goes on under the name,
the old config and its verdicts stay, and no old verdict is replayed for the new config.
Changing the settings under a stored name is still refused. On SQLite and PostgreSQL.

The scripted backend judges: the test is about the configs' bookkeeping.
"""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.completions import CompletionRecord, add_completions
from rubricsvc.config import JobSettings
from rubricsvc.db import session_scope
from rubricsvc.errors import ConflictError
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.models import JudgeConfig, Judgment, Score, ScoreChunk
from rubricsvc.rubrics import versions as rubrics
from rubricsvc.scoring import jobs
from rubricsvc.scoring.chunks import run_chunk
from rubricsvc.scoring.judge_configs import (
    current_judge_configs,
    ensure_judge_config,
    find_judge,
    to_row,
)
from rubricsvc.scoring.scorer import ScoreOptions, score
from rubricsvc.scoring.selection import Selection
from tests.helpers import rubric_spec

JUDGE = JudgeSpec(name="versioned", backend="scripted", mode="criterion-prob")


def _store_as_an_earlier_release(session: Session, spec: JudgeSpec) -> JudgeConfig:
    """The row an earlier rubricsvc stored for ``spec``: the same settings, another hash."""
    row = to_row(spec)
    row.config_hash = "0" * 64  # what the earlier hashing made of the same settings
    row.settings = {**row.settings, "hashed": {**row.settings["hashed"], "neutralizer": "1"}}
    session.add(row)
    session.flush()
    return row


def _seed(session: Session) -> None:
    version = rubrics.save_rubric(session, rubric_spec("t/versions")).version
    rubrics.approve(session, version, "tests")
    record = CompletionRecord(prompt_external_id="t/versions-prompt", text="Sleep at ten.")
    add_completions(session, [("tests", record)])


def _score(session: Session, spec: JudgeSpec) -> int:
    backend = ScriptedBackend()
    report = score(session, spec, Selection(), ScoreOptions(), lambda: backend)
    assert report.failed == 0
    return report.computed


def test_the_same_settings_hashed_anew_become_the_names_next_config(session: Session) -> None:
    _seed(session)
    old = _store_as_an_earlier_release(session, JUDGE)
    stored = find_judge(session, JUDGE.name)
    assert stored == JUDGE  # the stored settings, read back
    assert _score(session, stored) == 3  # judged afresh by the name's new config

    query = select(JudgeConfig).where(JudgeConfig.name == JUDGE.name).order_by(JudgeConfig.id)
    first, new = session.scalars(query).all()  # exactly two configs of the name
    assert first.id == old.id
    assert new.config_hash == JUDGE.config_hash() != old.config_hash
    # Every verdict and score is the new config's; the old row stays for its lineage.
    by_config = {
        config_id: session.scalars(
            select(Judgment).where(Judgment.judge_config_id == config_id)
        ).all()
        for config_id in (old.id, new.id)
    }
    assert len(by_config[old.id]) == 0 and len(by_config[new.id]) == 3
    assert {s.judge_config_id for s in session.scalars(select(Score))} == {new.id}
    # The name answers with its newest config; lists show each name once.
    assert ensure_judge_config(session, JUDGE).id == new.id
    assert [r.id for r in current_judge_configs(session) if r.name == JUDGE.name] == [new.id]
    assert _score(session, JUDGE) == 0  # a second run: all from the new config's cache


def test_other_settings_under_a_stored_name_are_still_refused(session: Session) -> None:
    ensure_judge_config(session, JUDGE)
    changed = JUDGE.model_copy(update={"template": "criterion_text"})
    changed = JudgeSpec.model_validate(changed.model_dump())
    with pytest.raises(ConflictError, match="already stored with other settings"):
        ensure_judge_config(session, changed)


def test_a_job_submitted_before_the_rehash_fails_rather_than_score_under_another_config(
    engine: Engine,
) -> None:
    """Its scores are read under the job's own config: none may be written under a newer one."""
    with session_scope(engine) as session:
        _seed(session)
        old = _store_as_an_earlier_release(session, JUDGE)
        submission = jobs.submit(session, JUDGE, Selection(), ScoreOptions(), 12)
        submission.job.judge_config_id = old.id  # as an earlier rubricsvc submitted it
        (chunk_id,) = session.scalars(select(ScoreChunk.id)).all()
    settings = JobSettings(heartbeat_interval=0.2, heartbeat_timeout=30, max_attempts=3)
    run = run_chunk(engine, chunk_id, lambda _spec: ScriptedBackend(), settings)
    assert run.outcome == "failed"
    assert run.error is not None and "submit the work again" in run.error
    with session_scope(engine) as session:
        assert session.scalars(select(Score)).all() == []
        assert session.scalars(select(Judgment)).all() == []


def test_an_older_config_of_the_name_hashed_alike_again_is_reused(session: Session) -> None:
    """A process of the older rubricsvc beside a newer one (or a rollback) finds its config."""
    current = ensure_judge_config(session, JUDGE)
    newer = _store_as_an_earlier_release(session, JUDGE)  # a row another release wrote last
    assert newer.id > current.id
    assert ensure_judge_config(session, JUDGE).id == current.id


def test_judges_differing_only_in_precision_share_no_cached_verdict(session: Session) -> None:
    """Precision changes verdicts: a judge at bfloat16 is judged afresh, not served the float32
    judge's verdicts; ``dtype: auto`` on this CPU is float32 and shares them."""
    _seed(session)
    options: dict[str, str] = {"device": "cpu"}
    float32 = JudgeSpec(
        name="cpu-f32", backend="transformers", backend_options={**options, "dtype": "float32"}
    )
    bfloat16 = JudgeSpec(
        name="cpu-bf16", backend="transformers", backend_options={**options, "dtype": "bfloat16"}
    )
    auto = JudgeSpec(name="cpu-auto", backend="transformers", backend_options=options)
    assert float32.config_hash() != bfloat16.config_hash()
    assert _score(session, float32) == 3
    assert _score(session, bfloat16) == 3  # nothing replayed across precisions
    assert auto.config_hash() == float32.config_hash()
    with pytest.raises(ConflictError, match="same settings as the stored judge 'cpu-f32'"):
        ensure_judge_config(session, auto)  # one config: the same settings, by another name
