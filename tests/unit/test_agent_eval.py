"""The agent evaluation's figures (trainer/agent_metrics.py) and its stored-trajectory path
(trainer/agent_eval.py): the committed demonstrations, replayed in the environment, are every
figure's best; a row the environment does not answer as stored is refused; each figure counts
what its definition says on scripted rollouts; intervals resample questions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import trainer.environments  # noqa: F401  (registers deepresearch)
from rubricsvc.errors import ValidationFailed
from trainer.agent_eval import (
    EVALUATION,
    REPORT,
    ROLLOUTS,
    Decoding,
    EvaluationFolder,
    compare_evaluations,
    evaluate_stored,
    select_tasks,
    stored_settings,
)
from trainer.agent_metrics import (
    BY_NAME,
    MEASURES,
    RolloutMetrics,
    measure,
    overall,
    paired_difference,
)
from trainer.config import load_config
from trainer.environments.deepresearch import DeepResearchEnv, DeepResearchSettings
from trainer.environments.held_out import run_in_environment
from trainer.environments.rollouts import rollout

pytest.importorskip("bm25s")

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "deepresearch"
CONFIG = EXAMPLE / "train.yaml"
DEMONSTRATIONS = EXAMPLE / "demonstrations.jsonl"
TASK = "dr-loop-exits"  # supported by "break" [17] and "continue" [24]


def _stored(tmp_path: Path, rows: Path, folder: str = "eval") -> dict[str, Any]:
    config = load_config(CONFIG)
    tasks, ids = select_tasks(EXAMPLE / "tasks.yaml", EXAMPLE / "corpus.jsonl", None, [])
    settings = stored_settings(config, CONFIG, rows, EXAMPLE / "tasks.yaml", tasks, None, 0)
    return evaluate_stored(config, rows, tasks, ids, EvaluationFolder(tmp_path / folder, settings))


def test_the_demonstrations_replayed_call_read_and_cite_everything_they_should(
    tmp_path: Path,
) -> None:
    evaluation = _stored(tmp_path, DEMONSTRATIONS)
    assert evaluation["rollouts"] == 126 and evaluation["questions"] == 42
    figures = {k: v["value"] for k, v in evaluation["overall"].items()}
    for name in ("tool_call_rate", "valid_call_rate", "citation_precision", "gold_criteria_met"):
        assert figures[name] == 1.0, name
        assert evaluation["overall"][name]["interval"] == [1.0, 1.0], name
    # Two supporting documents a question, sometimes an extra one opened.
    assert 2.0 < figures["documents_opened"] < 3.0
    low, high = evaluation["overall"]["documents_opened"]["interval"]
    assert low <= figures["documents_opened"] <= high
    assert all(q["rollouts"] == 3 for q in evaluation["by_question"].values())

    folder = tmp_path / "eval"
    lines = (folder / ROLLOUTS).read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 126 and not any("generated" in r for r in records)
    # The figures are the rows' own: provenance says which documents each opened.
    rows = [json.loads(line) for line in DEMONSTRATIONS.read_text().splitlines()]
    assert [len(r["provenance"]["opened"]) for r in rows] == [
        r["metrics"]["documents_opened"] for r in records
    ]
    assert json.loads((folder / EVALUATION).read_text())["rollouts"] == 126
    report = (folder / REPORT).read_text(encoding="utf-8")
    assert (
        "| tool-call rate (rollouts with a parsed tool call) | 1.000 | [1.000, 1.000] |" in report
    )


def test_a_row_the_environment_answers_otherwise_is_refused(tmp_path: Path) -> None:
    row = json.loads(DEMONSTRATIONS.read_text(encoding="utf-8").splitlines()[0])
    tool = next(m for m in row["messages"] if m["role"] == "tool")
    tool["content"] = "[99] a document the corpus never had"
    rows = tmp_path / "altered.jsonl"
    rows.write_text(json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(ValidationFailed, match="row 1: message 2 after the prompt"):
        _stored(tmp_path, rows)


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}],
    }


def _measured(*replies: dict[str, Any], sample: int = 0, task: str = TASK) -> RolloutMetrics:
    """A scripted rollout of ``task`` in the environment, measured."""
    tasks, ids = select_tasks(EXAMPLE / "tasks.yaml", EXAMPLE / "corpus.jsonl", None, [task])
    env = DeepResearchEnv(DeepResearchSettings(corpus=EXAMPLE / "corpus.jsonl", tool_budget=3))
    left = list(replies)
    prompt = [{"role": "user", "content": tasks[0].prompt}]
    generated = run_in_environment(
        lambda conversation, tools: left.pop(0) if left else None, env, {}, prompt, 4
    )
    return measure(tasks[0], ids, rollout(generated, env.record), generated, sample)


def test_each_figure_counts_what_it_says() -> None:
    good = _measured(
        _call("search", query="break loop"),
        _call("open", doc_id="17"),
        {"role": "assistant", "content": "break ends the loop [17], unlike [24]."},
    )
    assert (good.tool_calls, good.valid_calls, good.documents_opened) == (2, 2, 1)
    assert (good.cited, good.cited_opened, good.answered) == (2, 1, True)
    assert good.gold_criteria == 4 and 0 < good.gold_met < 4
    # A bad call ends the research: it and the call after it are calls, neither valid.
    ended = _measured(
        _call("open", doc_id="nope"),
        _call("search", query="break"),
        {"role": "assistant", "content": "No idea."},
    )
    assert (ended.tool_calls, ended.valid_calls, ended.documents_opened) == (2, 0, 0)
    # A call the parser could not read is left in the text: written, not parsed, not valid.
    unparsed = _measured(
        {"role": "assistant", "content": '<tool_call>\n{"name": "search", "argum'},
    )
    assert (unparsed.tool_calls, unparsed.unparsed_calls, unparsed.cited) == (0, 1, 0)

    rollouts = [good, ended, unparsed]
    of = {m.name: m.of(rollouts) for m in MEASURES}
    assert of["tool_call_rate"] == pytest.approx(2 / 3)
    assert of["valid_call_rate"] == pytest.approx(2 / 5)  # 2 valid of 4 parsed + 1 unparsed
    assert of["documents_opened"] == pytest.approx(1 / 3)
    assert of["citation_precision"] == pytest.approx(1 / 2)
    assert of["answered_rate"] == 1.0  # the unread call's text is that rollout's answer
    # No call, no citation: no rate at all, not a zero.
    assert BY_NAME["valid_call_rate"].of([unparsed]) == 0.0
    assert BY_NAME["citation_precision"].of([ended]) is None
    assert BY_NAME["valid_call_rate"].of([_measured({"role": "assistant", "content": "x"})]) is None


def _fake(prompt_id: str, sample: int, calls: int, valid: int) -> RolloutMetrics:
    return RolloutMetrics(prompt_id, sample, calls, 0, valid, 0, 0, 0, True, 0, 2, 0.0)


def test_intervals_resample_questions_and_differences_pair_them() -> None:
    one = [_fake("a", 0, 1, 1), _fake("a", 1, 0, 0)]
    assert overall(one, seed=0)["tool_call_rate"].interval is None  # one question: none
    metrics = [_fake(q, s, int(q < "c"), int(q < "c")) for q in "abcd" for s in range(2)]
    figure = overall(metrics, seed=0)["tool_call_rate"]
    assert figure.value == 0.5 and figure.interval is not None
    low, high = figure.interval
    assert 0.0 <= low < 0.5 < high <= 1.0
    assert overall(metrics, seed=0)["tool_call_rate"] == figure  # seeded

    same, shared = paired_difference(metrics, metrics, BY_NAME["tool_call_rate"], seed=0)
    assert shared == 4 and same.value == 0.0 and same.interval == (0.0, 0.0)
    better = [_fake(q, s, 1, 1) for q in "abcde" for s in range(2)]
    gain, shared = paired_difference(metrics, better, BY_NAME["tool_call_rate"], seed=0)
    assert shared == 4 and gain.value == 0.5  # on the four questions both have
    assert gain.interval is not None and 0.0 <= gain.interval[0] <= 0.5 <= gain.interval[1]


def test_a_folder_resumes_only_the_same_evaluation(tmp_path: Path) -> None:
    folder = EvaluationFolder(tmp_path, {"seed": 0, "samples": 1})
    folder.add({"prompt_id": "a", "sample": 0, "metrics": {}})
    with (tmp_path / ROLLOUTS).open("a") as out:
        out.write('{"prompt_id": "b", "sam')  # cut short by an interruption
    assert list(EvaluationFolder(tmp_path, {"seed": 0, "samples": 1}).finished()) == [("a", 0)]
    with pytest.raises(ValidationFailed, match=r"other settings \(samples\)"):
        EvaluationFolder(tmp_path, {"seed": 0, "samples": 2})
    with pytest.raises(ValidationFailed, match="give a temperature"):
        Decoding(samples=4)


def test_side_by_side_of_an_evaluation_with_itself_differs_by_nothing(tmp_path: Path) -> None:
    rows = tmp_path / "some.jsonl"
    rows.write_text("".join(DEMONSTRATIONS.read_text().splitlines(keepends=True)[:12]))
    _stored(tmp_path, rows, "first")
    _stored(tmp_path, rows, "second")
    comparison, markdown = compare_evaluations([tmp_path / "first", tmp_path / "second"])
    differences = comparison["differences"]["second"]
    assert differences["tool_call_rate"] == {"value": 0.0, "interval": [0.0, 0.0], "questions": 4}
    assert "## `second` minus `first` (4 question(s) in both, paired)" in markdown
