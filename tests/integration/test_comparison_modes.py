"""The modes that compare completions of a prompt, end to end with the bundled judge model.

``pairwise`` judges each ordered pair of a prompt's completions once (one forward pass per
order); ``group`` scores a prompt's group of completions in one decoded JSON answer, repeated
in shuffled orders. Both are cached by content like every judgment and reachable from the CLI
and the reward route (the trainer's side: test_trainer_rewards.py, test_trainer_celery.py).
Expectations are recomputed from the stored judgments, never from what the model said.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from rubricsvc.judging import keys
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.modes.pairwise import MIRRORED
from rubricsvc.models import Completion, JudgeConfig, Judgment, Prompt, RubricVersion, Score
from tests.cli_runner import EXAMPLES, add_examples, cli_ok
from tests.helpers import read_database
from tests.requirements import prepared_model_dir, require_module

require_module("transformers", "transformers")

pytestmark = [pytest.mark.model, pytest.mark.slow]

HAIKU = "demo-haiku"  # the demo prompt with the shortest completions: the cheapest to judge
# Eight distinct responses to the haiku prompt: a GRPO group of 8.
HAIKUS = [
    "Red leaves drift and fall\ncool wind over empty fields\nthe harvest is in",
    "Golden maple leaves\nswirl along the quiet lane\nautumn says goodbye",
    "Autumn is a season that comes after summer.",
    "Pumpkins on the porch\nsmoke rising from the chimney\nnights grow long and cold",
    "Crisp air, apple scent\ngeese calling across grey skies\nthe year turning old",
    "Leaves.",
    "Rain on fallen leaves\nthe garden sleeps in the mist\nlast rose bending low\n\n"
    "This haiku is about autumn because it mentions leaves.",
    "Under the harvest moon\nwheat sheaves stand in silent rows\nfrost creeps on the glass",
]


@dataclass
class Stored:
    """What one judge config stored for one prompt's completions."""

    judge_hash: str
    version_hash: str
    prompt_hash: str
    hashes: dict[int, str]  # completion id -> content hash
    judgments: list[Judgment]
    scores: dict[int, Score]  # completion id -> its score


def stored(database_url: str, judge: str, prompt: str) -> Stored:
    def read(session: Session) -> Stored:
        config = session.scalars(select(JudgeConfig).where(JudgeConfig.name == judge)).one()
        prompt_row = session.scalars(select(Prompt).where(Prompt.external_id == prompt)).one()
        completions = session.scalars(
            select(Completion).where(Completion.prompt_id == prompt_row.id)
        ).all()
        ids = [c.id for c in completions]
        judgments = session.scalars(
            select(Judgment)
            .where(Judgment.judge_config_id == config.id, Judgment.completion_id.in_(ids))
            .order_by(Judgment.id)
        ).all()
        scores = session.scalars(
            select(Score).where(Score.judge_config_id == config.id, Score.completion_id.in_(ids))
        ).all()
        (version_id,) = {s.rubric_version_id for s in scores}  # the prompt's one version
        version = session.get(RubricVersion, version_id)
        assert version is not None
        return Stored(
            config.config_hash,
            version.content_hash,
            prompt_row.content_hash,
            {c.id: c.content_hash for c in completions},
            list(judgments),
            {s.completion_id: s for s in scores},
        )

    return read_database(database_url, read)


def completion_ids(database_url: str, source: str) -> list[int]:
    def read(session: Session) -> list[int]:
        query = select(Completion.id).where(Completion.source == source).order_by(Completion.id)
        return list(session.scalars(query))

    return read_database(database_url, read)


def write_haikus(path: Path, texts: list[str], source: str) -> Path:
    lines = [
        json.dumps(
            {
                "external_id": f"{source}/{n}",
                "prompt_external_id": HAIKU,
                "source": source,
                "text": text,
            }
        )
        for n, text in enumerate(texts)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def score_json(database_url: str, *args: str) -> dict[str, Any]:
    report: dict[str, Any] = cli_ok("score", "--json", *args, database_url=database_url).json()
    return report


# --- pairwise -------------------------------------------------------------------------------


def test_pairwise_judges_each_ordered_pair_once_and_scores_the_mean_win_share(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prepared_model_dir()
    add_examples(sqlite_url)
    first = score_json(sqlite_url, "--mode", "pairwise", "--prompt", HAIKU)
    data = stored(sqlite_url, "embedded:pairwise", HAIKU)
    ids = sorted(data.hashes)
    n = len(ids)
    assert n == 3
    # Each completion plans both orders against each peer; each ordered pair is one judgment,
    # counted and asked once (the two completions it compares share it).
    assert first["judgments"] == first["backend_requests"] == first["computed"] == n * (n - 1)
    assert first["failed"] == 0

    # One judgment per ordered pair, stored with the completion shown first and the second,
    # and keyed on the order shown.
    by_pair = {(j.completion_id, j.other_completion_id): j for j in data.judgments}
    assert len(data.judgments) == len(by_pair) == n * (n - 1)
    assert set(by_pair) == {(a, b) for a in ids for b in ids if a != b}
    for (a, b), judgment in by_pair.items():
        assert judgment.cache_key == keys.pairwise_key(
            data.judge_hash, data.version_hash, data.prompt_hash, data.hashes[a], data.hashes[b]
        )
        assert judgment.value is not None and 0.0 <= judgment.value <= 1.0
        probs = judgment.detail
        assert math.fsum([probs["p_first"], probs["p_second"], probs["p_tie"]]) == pytest.approx(1)
        assert judgment.value == pytest.approx(probs["p_first"] + probs["p_tie"] / 2)

    # A completion's score: the mean over its peers of its chance of winning, each pair read
    # from both orders; an order whose verdict the other contradicts is inconsistent.
    reported = {s["completion_id"]: s for s in first["scores"]}
    for a in ids:
        peers = [b for b in ids if b != a]
        shares = [
            (by_pair[(a, b)].value + (1 - by_pair[(b, a)].value)) / 2  # type: ignore[operator]
            for b in peers
        ]
        score = data.scores[a]
        assert score.aggregation == "pairwise" and score.status == "ok"
        assert score.value == pytest.approx(math.fsum(shares) / len(shares))
        assert reported[a]["value"] == pytest.approx(score.value)
        consistent = [
            by_pair[(a, b)].verdict == MIRRORED[by_pair[(b, a)].verdict or ""] for b in peers
        ]
        rows = score.details["criteria"]
        assert [row["peer"] for row in rows] == peers
        assert [row["consistent"] for row in rows] == consistent
        inconsistent = [r for r in score.details["reasons"] if "position inconsistency" in r]
        if all(consistent):
            assert inconsistent == []
        else:
            assert inconsistent == [
                f"{consistent.count(False)} of {len(peers)} comparisons changed verdict with "
                "the order shown (position inconsistency)"
            ]

    with capsys.disabled():  # what the bundled judge made of the pairs, for the docs
        print(f"\npairwise, embedded judge: scores {[data.scores[a].value for a in ids]}")
        for (a, b), judgment in sorted(by_pair.items()):
            print(f"  ({a}, {b}): {judgment.verdict} {judgment.detail}")

    # Again: every judgment comes from the cache, and the scores are the same.
    again = score_json(sqlite_url, "--mode", "pairwise", "--prompt", HAIKU)
    assert (again["backend_requests"], again["computed"], again["failed"]) == (0, 0, 0)
    assert again["cached"] == again["judgments"] == first["judgments"]
    assert {s["completion_id"]: s["value"] for s in again["scores"]} == {
        a: pytest.approx(reported[a]["value"]) for a in ids
    }
    assert len(stored(sqlite_url, "embedded:pairwise", HAIKU).judgments) == n * (n - 1)

    # A prompt with a single completion has nothing to compare with: masked, with the reason.
    solo = {
        "rubrics": [
            {
                "name": "solo/one",
                "prompt": {"external_id": "solo", "text": "Name a colour."},
                "criteria": [{"text": "Names a colour", "weight": 1}],
            }
        ]
    }
    (tmp_path / "solo.yaml").write_text(yaml.safe_dump(solo), encoding="utf-8")
    cli_ok("rubrics", "add", str(tmp_path / "solo.yaml"), database_url=sqlite_url)
    cli_ok("rubrics", "approve", "solo/one", database_url=sqlite_url)
    one = {"external_id": "solo/a", "prompt_external_id": "solo", "text": "Blue."}
    (tmp_path / "solo.jsonl").write_text(json.dumps(one) + "\n", encoding="utf-8")
    cli_ok("completions", "add", str(tmp_path / "solo.jsonl"), database_url=sqlite_url)
    alone = score_json(sqlite_url, "--mode", "pairwise", "--prompt", "solo")
    assert (alone["judgments"], alone["backend_requests"]) == (0, 0)
    (entry,) = alone["scores"]
    assert entry["value"] is None and entry["status"] == "masked"
    assert any("needs another completion of the prompt" in r for r in entry["reasons"])
    (masked,) = stored(sqlite_url, "embedded:pairwise", "solo").scores.values()
    assert masked.value is None and masked.status == "masked"


# --- group ----------------------------------------------------------------------------------


def check_group(data: Stored, judgments: list[Judgment], members: list[int]) -> None:
    """``judgments`` are one group's repeats over exactly ``members``: each shows them all, in
    orders that differ, and is keyed on the group's content and the repeat."""
    repeats = JudgeSpec.model_fields["group_repeats"].default
    assert len(judgments) == repeats
    hashes = [data.hashes[m] for m in members]
    orders = [j.detail["order"] for j in judgments]
    for judgment in judgments:
        assert judgment.status == "ok", judgment.error
        assert sorted(judgment.detail["order"]) == sorted(members)
        assert set(judgment.detail["scores"]) == set(hashes)  # one score per distinct response
        assert all(0.0 <= s <= 1.0 for s in judgment.detail["scores"].values())
        assert judgment.other_completion_id is None
    assert {j.cache_key for j in judgments} == {
        keys.group_key(data.judge_hash, data.version_hash, data.prompt_hash, hashes, r)
        for r in range(repeats)
    }
    assert len({tuple(order) for order in orders}) == repeats  # shuffled: no order twice
    for member in members:
        score = data.scores[member]
        values = [j.detail["scores"][data.hashes[member]] for j in judgments]
        assert score.aggregation == "group" and score.status == "ok"
        assert score.value == pytest.approx(math.fsum(values) / len(values))
        # Every member reads the group's judgments: none of its own.
        used = {row["judgment_id"] for row in score.details["criteria"]}
        assert used == {j.id for j in judgments}


def test_group_scores_eight_completions_together_in_shuffled_repeats(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prepared_model_dir()
    add_examples(sqlite_url)
    path = write_haikus(tmp_path / "group.jsonl", HAIKUS, "g8")
    cli_ok("completions", "add", str(path), database_url=sqlite_url)
    members = completion_ids(sqlite_url, "g8")
    assert len(members) == 8

    report = score_json(sqlite_url, "--mode", "group", "--source", "g8")
    repeats = JudgeSpec.model_fields["group_repeats"].default
    assert (report["backend_requests"], report["computed"]) == (repeats, repeats)
    assert report["judgments"] == repeats  # each member plans the group's repeats: counted once
    data = stored(sqlite_url, "embedded:group", HAIKU)
    assert len(data.judgments) == repeats
    check_group(data, data.judgments, members)
    reported = {s["completion_id"]: s["value"] for s in report["scores"]}
    assert reported == {m: pytest.approx(data.scores[m].value) for m in members}

    # Cached by content: again, nothing is asked.
    again = score_json(sqlite_url, "--mode", "group", "--source", "g8")
    assert (again["backend_requests"], again["computed"]) == (0, 0)
    assert {s["completion_id"]: s["value"] for s in again["scores"]} == reported

    values = [data.scores[m].value for m in members]
    with capsys.disabled():  # what the bundled judge made of the group, for the docs
        print(f"\ngroup of 8, embedded judge: scores {values}")
        for judgment in data.judgments:
            print(f"  order {judgment.detail['order']}: raw {judgment.raw_output}")


def test_a_group_larger_than_group_size_is_split(sqlite_url: str, tmp_path: Path) -> None:
    prepared_model_dir()
    add_examples(sqlite_url)
    path = write_haikus(tmp_path / "group.jsonl", HAIKUS, "g8")
    cli_ok("completions", "add", str(path), database_url=sqlite_url)
    judge = {"name": "grouped-by-4", "backend": "transformers", "mode": "group", "group_size": 4}
    (tmp_path / "judges.yaml").write_text(yaml.safe_dump({"judges": [judge]}), encoding="utf-8")
    cli_ok("judges", "add", str(tmp_path / "judges.yaml"), database_url=sqlite_url)
    members = completion_ids(sqlite_url, "g8")

    report = score_json(sqlite_url, "--judge", "grouped-by-4", "--source", "g8")
    repeats = JudgeSpec.model_fields["group_repeats"].default
    assert report["backend_requests"] == 2 * repeats  # two groups of 4
    data = stored(sqlite_url, "grouped-by-4", HAIKU)
    assert len(data.judgments) == 2 * repeats
    # Consecutive groups of the prompt's completions in id order.
    halves = [members[:4], members[4:]]
    for half in halves:
        judgments = [j for j in data.judgments if set(j.detail["order"]) == set(half)]
        check_group(data, judgments, half)


# --- the reward route -----------------------------------------------------------------------


def test_the_reward_route_scores_a_batch_of_one_prompt_as_a_group(sqlite_url: str) -> None:
    prepared_model_dir()
    require_module("fastapi", "api")
    from tests.api_harness import api_client, bearer

    rubrics = yaml.safe_load((EXAMPLES / "rubrics.yaml").read_text())["rubrics"]
    haiku = [r for r in rubrics if r["prompt"]["external_id"] == HAIKU]
    batch = HAIKUS[:4]
    with api_client(sqlite_url, rubrics=haiku) as (client, api_keys):
        body = {
            "judge": "embedded",
            "mode": "group",
            "items": [{"prompt_id": HAIKU, "completion": text} for text in batch],
        }
        response = client.post("/v1/rewards", json=body, headers=bearer(api_keys["score"]))
        assert response.status_code == 200, response.text
        answer = response.json()
    repeats = JudgeSpec.model_fields["group_repeats"].default
    assert answer["computed"] == repeats  # the four are one group
    results = answer["results"]
    assert len(results) == len(answer["rewards"]) == 4
    data = stored(sqlite_url, "embedded:group", HAIKU)
    members = [r["completion_id"] for r in results]
    assert len(set(members)) == 4
    check_group(data, data.judgments, sorted(members))
    assert answer["rewards"] == [pytest.approx(data.scores[m].value) for m in members]
    assert all(r["status"] == "ok" for r in results)
