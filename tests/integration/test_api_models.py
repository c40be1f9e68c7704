"""The API's model routes with the bundled judge: rewards equal CLI scores, drafting works.

Each path computes on a database of its own (nothing comes from another path's cache): the
CLI scores the example completions, the reward endpoint scores the same pairs, and so does
the OpenRLHF-shaped route, which receives each pair as OpenRLHF sends it (prompt + response).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli_runner import EXAMPLES, add_examples, cli_ok
from tests.requirements import prepared_model_dir, require_module

require_module("fastapi", "api")
require_module("transformers", "transformers")

from tests.api_harness import api_client, bearer  # noqa: E402

pytestmark = [pytest.mark.model, pytest.mark.slow]

# The same pairs batched alike give the same float32 forward passes; the margin only allows
# for a different batch composition between the CLI and the server.
TOLERANCE = 1e-5


@pytest.fixture
def databases(migrated_sqlite_template: Path, tmp_path: Path) -> list[str]:
    prepared_model_dir()
    urls = []
    for name in ("cli", "rewards", "openrlhf"):
        path = tmp_path / f"{name}.sqlite"
        shutil.copy(migrated_sqlite_template, path)
        urls.append(f"sqlite:///{path}")
    return urls


def _examples() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rubrics = yaml.safe_load((EXAMPLES / "rubrics.yaml").read_text())["rubrics"]
    completions = [
        json.loads(line)
        for line in (EXAMPLES / "completions.jsonl").read_text().splitlines()
        if line.strip()
    ]
    return rubrics, completions


def _cli_scores(database_url: str) -> dict[tuple[str, str], float]:
    add_examples(database_url)
    report = cli_ok("score", "--judge", "embedded", "--json", database_url=database_url).json()
    texts = {
        json.loads(line)["external_id"]: json.loads(line)["text"]
        for line in (EXAMPLES / "completions.jsonl").read_text().splitlines()
        if line.strip()
    }
    return {
        (s["prompt_external_id"], texts[s["completion_external_id"]]): s["value"]
        for s in report["scores"]
    }


def test_reward_routes_equal_cli_scores(databases: list[str]) -> None:
    cli_url, rewards_url, openrlhf_url = databases
    expected = _cli_scores(cli_url)
    rubrics, completions = _examples()
    assert len(expected) == len(completions) == 9

    with api_client(rewards_url, rubrics=rubrics) as (client, keys):
        items = [
            {"prompt_id": c["prompt_external_id"], "completion": c["text"]} for c in completions
        ]
        response = client.post("/v1/rewards", json={"items": items}, headers=bearer(keys["score"]))
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["computed"] > 0 and body["cached"] == 0  # judged here, not read back
        rewards = body["rewards"]
        again = client.post("/v1/rewards", json={"items": items}, headers=bearer(keys["score"]))
        assert again.json()["rewards"] == rewards and again.json()["computed"] == 0
        metrics = client.get("/metrics", headers=bearer(keys["read"])).text
        computed = (
            f'rubricsvc_judgments_total{{judge="embedded",outcome="computed"}} {body["computed"]}.0'
        )
        cached = (
            f'rubricsvc_judgments_total{{judge="embedded",outcome="cached"}} {body["computed"]}.0'
        )
        assert computed in metrics and cached in metrics  # the second batch: all cache hits
        assert 'rubricsvc_rewards_total{judge="embedded",outcome="ok"} 18.0' in metrics

    with api_client(openrlhf_url, rubrics=rubrics) as (client, keys):
        prompts = {r["prompt"]["external_id"]: r["prompt"]["text"] for r in rubrics}
        templated = [
            f"<|user|>{prompts[c['prompt_external_id']]}<|assistant|>" for c in completions
        ]
        response = client.post(
            "/v1/openrlhf/reward",
            params={"api_key": keys["score"]},  # OpenRLHF's client sends no headers of its own
            json={
                "query": [p + c["text"] for p, c in zip(templated, completions, strict=True)],
                "prompts": templated,
                "labels": [c["prompt_external_id"] for c in completions],
            },
        )
        assert response.status_code == 200, response.text
        openrlhf = response.json()["rewards"]

    for index, completion in enumerate(completions):
        want = expected[(completion["prompt_external_id"], completion["text"])]
        assert rewards[index] == pytest.approx(want, abs=TOLERANCE), completion["external_id"]
        assert openrlhf[index] == pytest.approx(want, abs=TOLERANCE), completion["external_id"]
    # Not all alike: the scores separate the completions, so equality above means something.
    assert max(rewards) - min(rewards) > 0.05


def test_generate_drafts_a_rubric_with_the_bundled_model(databases: list[str]) -> None:
    rubrics, _ = _examples()
    with api_client(databases[0], rubrics=rubrics[:1]) as (client, keys):
        response = client.post(
            "/v1/rubrics/generate",
            json={"prompt_ids": ["demo-sleep"], "min_criteria": 2, "max_criteria": 4},
            headers=bearer(keys["author"]),
        )
        assert response.status_code == 200, response.text
        (draft,) = response.json()["drafts"]
        assert draft["status"] == "created", draft
        version = client.get(
            "/v1/rubrics/" + draft["ref"].replace("@", "/versions/"), headers=bearer(keys["read"])
        ).json()
        assert version["status"] == "draft" and version["origin"] == "llm"
        assert 2 <= len(version["rubric_spec"]["criteria"]) <= 4
