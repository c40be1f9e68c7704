"""The gold monitor on a constructed divergence, scored by the platform on a real database: the
training reward is a rubric that rewards length, the gold one rewards a concise answer that
names the topic (check criteria: these tests are about the monitor, not a judge). The run
callback's test lets the real model write the held-out answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rubricsvc.db import make_engine, session_scope
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.service import approve, save_rubric
from tests.requirements import prepared_model_dir, require_module
from trainer.callbacks import RunCallback
from trainer.config import ScorerSettings
from trainer.monitors import GoldMonitor, SaturationTracker
from trainer.rundir import ALARMS, GOLD, METRICS, RunDirectory

PROMPT = {"external_id": "mon-sleep", "text": "How can I sleep better?"}
# Shared rubrics (no prompt of their own), chosen per scorer with `rubric`.
LENGTH = {
    "name": "mon/length",
    "criteria": [
        {
            "text": f"At least {n} words",
            "weight": 1,
            "kind": "check",
            "check": {"type": "word_count", "min": n},
        }
        for n in (5, 10, 20, 40)
    ],
}
GOLD_RUBRIC = {
    "name": "mon/gold",
    "criteria": [
        {
            "text": "Mentions a regular schedule",
            "weight": 2,
            "kind": "check",
            "check": {"type": "contains", "text": "schedule"},
        },
        {
            "text": "At most 25 words",
            "weight": 1,
            "kind": "check",
            "check": {"type": "word_count", "max": 25},
        },
    ],
}
OWN = {"name": "mon/own", "prompt": PROMPT, "criteria": GOLD_RUBRIC["criteria"]}
# Any answer of a word or more passes the first; none passes the second.
ANY_WORDS = {
    "name": "mon/any-words",
    "criteria": [
        {
            "text": "Says something",
            "weight": 1,
            "kind": "check",
            "check": {"type": "word_count", "min": 1},
        }
    ],
}
NEVER = {
    "name": "mon/never",
    "criteria": [
        {
            "text": "Says the magic word",
            "weight": 1,
            "kind": "check",
            "check": {"type": "contains", "text": "xyzzy-plugh"},
        }
    ],
}


def _seed(database_url: str) -> None:
    engine = make_engine(database_url)
    with session_scope(engine) as session:
        for data in (OWN, LENGTH, GOLD_RUBRIC):
            approve(session, save_rubric(session, RubricSpec.model_validate(data)).version)
    engine.dispose()


def _monitor(database_url: str) -> GoldMonitor:
    from trainer.scorers import InProcessScorer

    train = InProcessScorer(ScorerSettings(database_url=database_url, rubric="mon/length"))
    gold = InProcessScorer(
        ScorerSettings(database_url=database_url, judge="embedded-text", rubric="mon/gold")
    )
    return GoldMonitor(train, gold, window=3)


def test_the_gold_monitor_fires_when_training_reward_rises_and_gold_falls(sqlite_url: str) -> None:
    _seed(sqlite_url)
    monitor = _monitor(sqlite_url)
    # A policy that learns to pad: longer and longer, and it loses the point on the way.
    answers = [
        "Keep a regular schedule.",
        "Keep a regular schedule, and also " + "really " * 8 + "try hard.",
        "Sleep is " + "very " * 40 + "important for everyone.",
    ]
    points = [
        monitor.evaluate(step, [PROMPT["external_id"]], [a]) for step, a in enumerate(answers)
    ]
    assert [p.train_score for p in points] == sorted(p.train_score or 0 for p in points)
    assert points[-1].train_score > points[0].train_score  # type: ignore[operator]
    assert points[-1].gold_score < points[0].gold_score  # type: ignore[operator]
    assert [p.alarm for p in points] == [False, False, True]
    assert points[-1].train_slope > 0 > points[-1].gold_slope


def test_no_alarm_while_gold_agrees(sqlite_url: str) -> None:
    _seed(sqlite_url)
    monitor = _monitor(sqlite_url)
    answers = ["Sleep.", "Keep a regular sleep schedule.", "Keep a regular schedule, every day."]
    points = [
        monitor.evaluate(step, [PROMPT["external_id"]], [a]) for step, a in enumerate(answers)
    ]
    assert points[-1].train_score > points[0].train_score  # type: ignore[operator]
    assert not any(p.alarm for p in points)


def test_the_run_callback_keeps_metrics_and_raises_the_saturation_alarm(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path / "run")
    callback = RunCallback(run, SaturationTracker(threshold=0.9, steps=2))

    class State:
        global_step = 0

    state = State()
    for step, rate in enumerate([0.5, 0.95, 1.0], start=1):
        state.global_step = step
        logs: dict[str, Any] = {"reward": rate, "criteria/Uses the word hello": rate}
        callback.on_log(None, state, None, logs=logs)
    callback.on_log(None, state, None, logs={"train_runtime": 1.0})  # the summary: not a step
    metrics = run.read(METRICS)
    assert [m["step"] for m in metrics] == [1, 2, 3]
    alarms = run.read(ALARMS)
    assert [(a["step"], a["kind"]) for a in alarms] == [(3, "saturated_criterion")]
    assert "Uses the word hello" in alarms[0]["message"]
    assert not (run.path / GOLD).exists()
    json.dumps(metrics)  # what was written is plain JSON


def test_the_run_callback_generates_held_out_answers_and_records_the_alarm(
    sqlite_url: str, tmp_path: Path
) -> None:
    """The callback's path with the real model: answers generated by the policy, scored by both
    scorers, the alarm written to alarms.jsonl and the gold scores merged into metrics.jsonl."""
    require_module("transformers", "transformers")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.callbacks import HeldOut
    from trainer.monitors import GoldPoint
    from trainer.scorers import InProcessScorer

    model_dir = prepared_model_dir()
    _seed(sqlite_url)
    engine = make_engine(sqlite_url)
    with session_scope(engine) as session:
        for data in (ANY_WORDS, NEVER):
            approve(session, save_rubric(session, RubricSpec.model_validate(data)).version)
    engine.dispose()
    train = InProcessScorer(ScorerSettings(database_url=sqlite_url, rubric="mon/any-words"))
    gold = InProcessScorer(ScorerSettings(database_url=sqlite_url, rubric="mon/never"))
    monitor = GoldMonitor(train, gold, window=3)
    # Two earlier evaluations already diverging; the third, of the real answers, continues it.
    monitor.points = [GoldPoint(0, 0.0, 1.0), GoldPoint(5, 0.2, 0.8)]
    run = RunDirectory(tmp_path / "run")
    held_out = HeldOut([PROMPT["external_id"]], [[{"role": "user", "content": PROMPT["text"]}]])
    callback = RunCallback(run, SaturationTracker(), monitor, held_out, 5, max_new_tokens=12)

    class State:
        global_step = 10

    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    callback.on_step_end(None, State(), None, model=model, processing_class=tokenizer)
    callback.on_log(None, State(), None, logs={"reward": 0.5})

    (point,) = run.read(GOLD)
    assert point["step"] == 10 and point["alarm"] is True
    assert (point["train_score"], point["gold_score"]) == (1.0, 0.0)
    assert point["samples"][0]["completion"].strip()  # the model's own answer
    (alarm,) = run.read(ALARMS)
    assert alarm["kind"] == "gold_divergence" and alarm["step"] == 10
    (row,) = run.read(METRICS)
    assert (row["gold/train_score"], row["gold/gold_score"], row["gold/alarm"]) == (1.0, 0.0, 1.0)
