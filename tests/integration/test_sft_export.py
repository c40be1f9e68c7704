"""``rubricsvc completions export-sft``: each prompt's best-scored completions as an SFT set,
on SQLite and PostgreSQL. The scores come from check criteria (no model): two words, one point
each, so the scores are 0, 0.5 or 1 and ties are easy to make; the judge is the scripted one,
needed only to name the judge config the scores are stored under."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.models import Completion, JudgeConfig, RubricVersion, Score
from tests.cli_runner import cli_error, cli_ok, run_cli
from tests.helpers import add_judge_file, add_scripted_judge, approve_rubrics, check_criterion

ALPHA = check_criterion("Says alpha", {"type": "contains", "text": "alpha"})
BETA = check_criterion("Says beta", {"type": "contains", "text": "beta"})


def _rubric(name: str, prompt_id: str, text: str) -> dict[str, Any]:
    return {
        "name": name,
        "prompt": {"external_id": prompt_id, "text": text},
        "criteria": [ALPHA, BETA],
    }


SEA = _rubric("sea/proxy", "sea", "Write about the sea.")
AGENT = _rubric("agent/proxy", "agent", "Find out about alpha and beta.")
SEARCH_CALL = {
    "type": "function",
    # As an OpenAI-style client sends it: the arguments as a JSON string.
    "function": {"name": "search", "arguments": '{"query": "alpha beta"}'},
}
TRAJECTORY = [
    {"role": "assistant", "content": "", "tool_calls": [SEARCH_CALL]},
    {"role": "tool", "name": "search", "content": "[3] Alpha and beta: both letters."},
    {"role": "assistant", "content": "alpha and beta [3]"},
]
COMPLETIONS = [
    # sea: a scores 1; b and c tie at 0.5 (b stored first); d scores 0.
    {"prompt_external_id": "sea", "external_id": "sea/a", "text": "alpha beta", "source": "s1"},
    {"prompt_external_id": "sea", "external_id": "sea/b", "text": "alpha only", "source": "s1"},
    {"prompt_external_id": "sea", "external_id": "sea/c", "text": "beta only", "source": "s2"},
    {"prompt_external_id": "sea", "external_id": "sea/d", "text": "neither", "source": "s2"},
    # agent: e (a trajectory) scores 1, f 0.5.
    {
        "prompt_external_id": "agent",
        "external_id": "agent/e",
        "text": "alpha and beta [3]",
        "source": "agent",
        "trajectory": TRAJECTORY,
    },
    {"prompt_external_id": "agent", "external_id": "agent/f", "text": "alpha", "source": "agent"},
]


def _seeded(url: str, tmp_path: Path) -> None:
    approve_rubrics(url, SEA, AGENT)
    records = tmp_path / "completions.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in COMPLETIONS), encoding="utf-8")
    cli_ok("completions", "add", str(records), database_url=url)
    add_scripted_judge(url, tmp_path)
    cli_ok("score", "--judge", "scripted", "--json", database_url=url)


def _export(url: str, *flags: str) -> list[dict[str, Any]]:
    result = cli_ok("completions", "export-sft", "--judge", "scripted", *flags, database_url=url)
    return [json.loads(line) for line in result.stdout.splitlines()]


def _ids(rows: list[dict[str, Any]]) -> list[str]:
    return [row["provenance"]["completion_external_id"] for row in rows]


def _stored(url: str) -> dict[str, dict[str, Any]]:
    """Per completion external id, its stored score, judge config and rubric version."""
    from rubricsvc import db

    engine = db.make_engine(url)
    try:
        with Session(engine) as session:
            query = (
                select(Completion, Score, JudgeConfig, RubricVersion)
                .join(Score, Score.completion_id == Completion.id)
                .join(JudgeConfig, Score.judge_config_id == JudgeConfig.id)
                .join(RubricVersion, Score.rubric_version_id == RubricVersion.id)
            )
            return {
                c.external_id or "": {
                    "completion_id": c.id,
                    "source": c.source,
                    "prompt_id": c.prompt_id,
                    "score": s.value,
                    "coverage": s.coverage,
                    "judge": j.name,
                    "judge_config_hash": j.config_hash,
                    "rubric": v.ref,
                    "rubric_name": v.rubric.name,
                    "rubric_version": v.number,
                    "rubric_version_id": v.id,
                }
                for c, s, j, v in session.execute(query)
            }
    finally:
        engine.dispose()


def test_best_of_n_min_score_and_provenance(database_url: str, tmp_path: Path) -> None:
    url = database_url
    _seeded(url, tmp_path)

    out = tmp_path / "sft.jsonl"
    result = cli_ok(
        "completions", "export-sft", "--judge", "scripted", "--best", "2", "-o", str(out),
        database_url=url,
    )  # fmt: skip
    assert "4 completion(s) of 2 prompt(s) written to" in result.stderr
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    # Best first within each prompt; the 0.5 tie goes to b, stored before c.
    assert _ids(rows) == ["sea/a", "sea/b", "agent/e", "agent/f"]
    assert [r["provenance"]["rank"] for r in rows] == [1, 2, 1, 2]
    assert [r["provenance"]["score"] for r in rows] == [1.0, 0.5, 1.0, 0.5]

    # Provenance is what the store holds.
    stored = _stored(url)
    for row in rows:
        provenance = row["provenance"]
        expected = stored[provenance["completion_external_id"]]
        assert {k: provenance[k] for k in expected} == expected
        assert provenance["aggregation"] == "rar" and provenance["status"] == "ok"
    assert rows[0]["provenance"]["rubric"] == "sea/proxy@1"

    # A plain answer: the prompt's messages, then one assistant turn.
    assert rows[0]["messages"] == [
        {"role": "user", "content": "Write about the sea."},
        {"role": "assistant", "content": "alpha beta"},
    ]
    # A trajectory: its turns, the call's arguments as a mapping, ending with the answer.
    agent = rows[2]["messages"]
    assert agent[0] == {"role": "user", "content": "Find out about alpha and beta."}
    assert agent[1]["tool_calls"] == [
        {"type": "function", "function": {"name": "search", "arguments": {"query": "alpha beta"}}}
    ]
    assert agent[2] == TRAJECTORY[1]
    assert agent[3:] == [{"role": "assistant", "content": "alpha and beta [3]"}]

    # The minimum score leaves out the 0.5s; the default keeps one per prompt.
    assert _ids(_export(url, "--best", "2", "--min-score", "0.6")) == ["sea/a", "agent/e"]
    assert _ids(_export(url)) == ["sea/a", "agent/e"]
    # A selection: only source s2's completions of sea compete.
    assert _ids(_export(url, "--source", "s2")) == ["sea/c"]
    assert _ids(_export(url, "--prompt", "agent", "--best", "5")) == ["agent/e", "agent/f"]
    # The same store, the same bytes.
    again = cli_ok(
        "completions", "export-sft", "--judge", "scripted", "--best", "2", database_url=url
    )
    assert again.stdout == out.read_text(encoding="utf-8")


def test_errors_say_what_to_do(database_url: str, tmp_path: Path) -> None:
    url = database_url
    _seeded(url, tmp_path)

    unknown = run_cli("completions", "export-sft", "--judge", "nobody", database_url=url)
    assert unknown.code == 3 and "no stored judge config named 'nobody'" in unknown.stderr

    add_judge_file(
        url, tmp_path, {"name": "unused", "backend": "scripted", "backend_options": {"reply": "-"}}
    )
    unscored = cli_error("completions", "export-sft", "--judge", "unused", database_url=url)
    assert "no selected completion has a score by judge 'unused'" in unscored
    assert "score them first" in unscored and "rubricsvc score --judge unused" in unscored

    other = cli_error(
        "completions", "export-sft", "--judge", "scripted", "--aggregation", "healthbench",
        database_url=url,
    )  # fmt: skip
    assert "scores under the aggregation(s) rar: pass --aggregation" in other

    high = cli_error(
        "completions", "export-sft", "--judge", "scripted", "--min-score", "1.5", database_url=url
    )
    assert "no completion scores at least 1.5" in high and "best stored score is 1" in high

    unknown_source = cli_error(
        "completions", "export-sft", "--judge", "scripted", "--source", "nowhere", database_url=url
    )
    assert "no completion has source 'nowhere'" in unknown_source


def test_one_rubric_version_per_prompt(database_url: str, tmp_path: Path) -> None:
    """A prompt scored under two rubrics is not ranked across them: the export says to choose,
    and --rubric (a template naming each prompt's own, or a name) chooses."""
    url = database_url
    _seeded(url, tmp_path)
    # A second rubric of sea, rewarding beta only: c (beta) beats b (alpha) under it.
    gold = _rubric("sea/gold", "sea", "Write about the sea.")
    gold["criteria"] = [BETA]
    approve_rubrics(url, gold)
    cli_ok("score", "--judge", "scripted", database_url=url)

    ambiguous = cli_error("completions", "export-sft", "--judge", "scripted", database_url=url)
    assert "prompt 'sea' has scores under 2 rubric versions (sea/gold@1, sea/proxy@1)" in (
        ambiguous
    )
    proxy = _export(url, "--rubric", "{prompt_id}/proxy", "--best", "2")
    assert _ids(proxy) == ["sea/a", "sea/b", "agent/e", "agent/f"]
    by_gold = _export(url, "--rubric", "sea/gold@1", "--best", "3")
    assert _ids(by_gold) == ["sea/a", "sea/c", "sea/b"]  # a and c score 1, then b (stored first)
    assert {r["provenance"]["rubric"] for r in by_gold} == {"sea/gold@1"}
