"""``rubricsvc train eval-agent`` on a policy: its rollouts run in the gold monitor's tool loop
and are measured as stored trajectories are (trainer/agent_eval.py). A scripted policy that
searches, opens and cites what it opened gets every tool figure's best, and a resumed
evaluation runs nothing it already has; the tiny random policy (tests/tiny_model.py) on two
held-out questions, sampled, gives a report whose figures are consistent with its rollouts and
the same rollouts again for the same seed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli_runner import run_cli
from tests.requirements import require_module
from tests.tiny_model import tiny_model_dir
from tests.unit.test_gold_monitor_environment import ScriptedModel

pytestmark = [pytest.mark.model]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deepresearch"
CONFIG = EXAMPLE / "train.yaml"
QUESTIONS = ("dr-loop-exits", "dr-xor-shift")


class Silent(ScriptedModel):
    """A model that must not be asked for anything (every rollout is already kept)."""

    def generate(self, input_ids: Any, max_new_tokens: int, **kwargs: Any) -> Any:
        raise AssertionError("a kept rollout was generated again")


def test_a_scripted_policy_gets_every_tool_figures_best_and_resumes(tmp_path: Path) -> None:
    require_module("bm25s", "trainer")
    from transformers import AutoTokenizer

    from trainer.agent_eval import (
        Decoding,
        EvaluationFolder,
        evaluate_model,
        policy_settings,
        select_tasks,
    )
    from trainer.config import load_config
    from trainer.environments.chat_template import with_tool_format
    from trainer.overopt import Split

    config = load_config(CONFIG)
    tasks, ids = select_tasks(EXAMPLE / "tasks.yaml", EXAMPLE / "corpus.jsonl", None, QUESTIONS)
    tokenizer = with_tool_format(AutoTokenizer.from_pretrained(tiny_model_dir()))
    decoding = Decoding()
    settings = policy_settings(
        config, CONFIG, tmp_path, EXAMPLE / "tasks.yaml", tasks, Split.HELD_OUT, decoding, 512
    )
    # The scripted policy searches "break loop", opens [17] and cites it, whatever it is asked.
    model = ScriptedModel(tokenizer)
    first = evaluate_model(
        config, model, tokenizer, tasks, ids, decoding, 512, EvaluationFolder(tmp_path, settings)
    )
    figures = {k: v["value"] for k, v in first["overall"].items()}
    assert figures["tool_call_rate"] == 1.0 and figures["valid_call_rate"] == 1.0
    assert figures["documents_opened"] == 1.0 and figures["citation_precision"] == 1.0
    assert figures["tool_calls"] == 2.0 and figures["answered_rate"] == 1.0
    # Its answer (break, cited [17]) meets two of dr-loop-exits' four gold checks (the break
    # fact, the [17] citation), none of dr-xor-shift's.
    by_question = first["by_question"]
    assert by_question["dr-loop-exits"]["gold_criteria_met"] == 0.5
    assert by_question["dr-xor-shift"]["gold_criteria_met"] == 0.0
    assert model.training  # restored after the evaluation

    again = evaluate_model(
        config,
        Silent(tokenizer),
        tokenizer,
        tasks,
        ids,
        decoding,
        512,
        EvaluationFolder(tmp_path, settings),
    )
    assert again["overall"] == first["overall"] and again["by_question"] == by_question


def test_the_tiny_policys_report_is_consistent_with_its_rollouts(
    sqlite_url: str, tmp_path: Path
) -> None:
    require_module("trl", "trainer")
    require_module("bm25s", "trainer")
    questions = [arg for q in ("dr-dict-keys", "dr-try-finally") for arg in ("--question", q)]

    def evaluate(folder: str) -> dict[str, Any]:
        result = run_cli(
            "train", "eval-agent", "--config", str(CONFIG), "--policy", str(tiny_model_dir()),
            *questions, "--samples", "2", "--temperature", "1.0", "--seed", "3",
            "--max-new-tokens", "40", "--threads", "1", "-o", str(tmp_path / folder),
            database_url=sqlite_url, timeout=600,
        )  # fmt: skip
        assert result.code == 0, result.stderr[-3000:]
        assert "| valid-call rate" in result.stdout
        return json.loads((tmp_path / folder / "evaluation.json").read_text(encoding="utf-8"))

    evaluation = evaluate("first")
    records = [
        json.loads(line)
        for line in (tmp_path / "first" / "rollouts.jsonl").read_text().splitlines()
    ]
    assert evaluation["rollouts"] == len(records) == 4 and evaluation["questions"] == 2
    assert sorted((r["prompt_id"], r["sample"]) for r in records) == [
        ("dr-dict-keys", 0), ("dr-dict-keys", 1), ("dr-try-finally", 0), ("dr-try-finally", 1),
    ]  # fmt: skip
    assert sum(q["rollouts"] for q in evaluation["by_question"].values()) == 4
    settings = evaluation["settings"]
    assert (settings["decoding"], settings["temperature"], settings["max_turns"]) == (
        "sampled",
        1.0,
        5,
    )
    overall = evaluation["overall"]
    assert {m for m in overall} >= {
        "tool_call_rate",
        "valid_call_rate",
        "documents_opened",
        "citation_precision",
        "gold_criteria_met",
    }
    for name, figure in overall.items():
        value, interval = figure["value"], figure["interval"]
        if value is None:
            assert interval is None, name
            continue
        if name not in ("documents_opened", "tool_calls", "citations"):
            assert 0.0 <= value <= 1.0, name
        if interval is not None:
            assert interval[0] <= value <= interval[1], name
    # The pooled figures are the rollouts' own counts.
    with_calls = sum(1 for r in records if r["metrics"]["tool_calls"])
    assert overall["tool_call_rate"]["value"] == with_calls / 4
    opened = sum(len(r["documents"]) for r in records)
    assert overall["documents_opened"]["value"] == opened / 4
    criteria = sum(r["metrics"]["gold_criteria"] for r in records)
    assert criteria == 2 * (5 + 4)  # dr-dict-keys has 5 gold checks, dr-try-finally 4
    for r in records:
        calls = sum(len(m.get("tool_calls") or ()) for m in r.get("generated", r["trajectory"]))
        assert r["metrics"]["tool_calls"] == calls

    # Seeded rollouts: the same evaluation in another folder is the same, rollout for rollout.
    evaluate("second")
    again = [
        json.loads(line)
        for line in (tmp_path / "second" / "rollouts.jsonl").read_text().splitlines()
    ]
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in records]
    assert strip == [{k: v for k, v in r.items() if k != "seconds"} for r in again]
    compared = run_cli(
        "train", "eval-agent-compare", str(tmp_path / "first"), str(tmp_path / "second"),
        "-o", str(tmp_path / "side.md"), database_url=sqlite_url,
    )  # fmt: skip
    assert compared.code == 0, compared.stderr[-2000:]
    side = json.loads((tmp_path / "side.json").read_text(encoding="utf-8"))
    assert side["differences"]["second"]["gold_criteria_met"]["value"] == 0.0
