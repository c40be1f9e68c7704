"""The verifiers example environment (examples/verifiers/) against verifiers' own package and a
real `rubricsvc serve`: its rewards, per rollout and per group, equal `rubricsvc score` of the
same rollouts, and failures follow verifiers' rule.

verifiers pins other versions of libraries the platform uses (openai < 3), so it lives in its
own environment, ``.venv-verifiers`` (``make verifiers-env``; ``make test`` makes it): the
example runs there, as a subprocess, and reaches the platform over HTTP. The judge is a fake
OpenAI-compatible server scripted by content: "Yes" when the response holds the criterion's
word, a 500 for a response saying OUTAGE (the infrastructure fails: the reward is masked), an
unparseable reply for a response saying GARBLE (the response broke the judge, which answers
without it: charged) and for every call of a criterion saying GARBLE (the judge itself fails:
masked).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from rubricsvc.apikeys import create_key
from rubricsvc.db import make_engine, session_scope
from tests.cli_runner import cli_ok
from tests.fake_openai import FakeOpenAI, chat_completion, openai_judge, serving
from tests.helpers import approve_rubrics
from tests.requirements import unavailable
from tests.servers import RubricsvcServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "verifiers"
VERIFIERS_PYTHON = ROOT / ".venv-verifiers" / "bin" / "python"
JUDGE = "vf-judge"
# The word a response must hold for each criterion of examples/verifiers/rubrics.yaml.
WORDS = {
    "Forecasts clear skies": "sunny",
    "Gives a temperature": "degrees",
    "Includes sun protection": "sunscreen",
    "Includes something to drink": "water",
}
BROKEN = {
    "name": "vf/broken",
    "prompt": {"external_id": "vf-broken", "text": "Say anything at all."},
    "criteria": [{"text": "Avoids the GARBLE word", "weight": 1}],
}
# (prompt, reply, group): the reward by hand (rar: the met criteria's weight over the total).
ROLLOUTS: list[tuple[str, str, str, float | None]] = [
    ("vf-weather", "It will be sunny, 25 degrees.", "weather", 1.0),
    ("vf-weather", "Expect rain all day.", "weather", 0.0),
    ("vf-weather", "It will be sunny.", "weather", 2 / 3),
    ("vf-packing", "Sunscreen, water and a towel.", "packing", 1.0),
    ("vf-packing", "A towel, a book and sandals.", "packing", 0.0),
    # The response breaks the judge (it answers without it): charged, its criteria not met.
    ("vf-weather", "GARBLE GARBLE sunny.", "charged", 0.0),
    ("vf-weather", "It will be sunny and mild.", "charged", 2 / 3),
    # The judge's server fails: no reward, the rollout errors.
    ("vf-weather", "OUTAGE: sunny, 20 degrees.", "outage", None),
    ("vf-weather", "Sunny, 19 degrees.", "outage", 1.0),
    # The judge fails on this criterion whatever the response: no reward.
    ("vf-broken", "Hello.", "broken", None),
]


def _answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    text = "\n".join(str(m.get("content")) for m in body["messages"])
    if "OUTAGE" in text:
        return 500, {"error": {"message": "the judge's server is down"}}
    if "GARBLE" in text:
        return 200, chat_completion("I would rather not say.")
    met = any(criterion in text and word in text.lower() for criterion, word in WORDS.items())
    return 200, chat_completion(f"Checked.\nVERDICT: {'YES' if met else 'NO'}")


@pytest.fixture
def verifiers_python() -> Path:
    if not VERIFIERS_PYTHON.is_file():
        unavailable(f"{VERIFIERS_PYTHON} is missing: `make verifiers-env` makes it")
    return VERIFIERS_PYTHON


def _run_example(python: Path, rollouts: Path, tasks: Path, base_url: str, key: str) -> Any:
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{EXAMPLE}",
        "RUBRICSVC_REWARD_API_KEY": key,
    }
    command = [
        str(python),
        str(EXAMPLE / "score_rollouts.py"),
        str(rollouts),
        "--tasks",
        str(tasks),
        "--base-url",
        base_url,
        "--judge",
        JUDGE,
        "--groups",
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_the_example_environment_is_rewarded_as_rubricsvc_scores(
    verifiers_python: Path, sqlite_url: str, tmp_path: Path
) -> None:
    rubrics = yaml.safe_load((EXAMPLE / "rubrics.yaml").read_text(encoding="utf-8"))["rubrics"]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        (EXAMPLE / "tasks.jsonl").read_text(encoding="utf-8")
        + json.dumps({"prompt_id": "vf-broken", "prompt": BROKEN["prompt"]["text"]})
        + "\n",
        encoding="utf-8",
    )
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(
        "".join(
            json.dumps({"prompt_id": p, "reply": r, "group": g}) + "\n" for p, r, g, _ in ROLLOUTS
        ),
        encoding="utf-8",
    )
    with serving(FakeOpenAI(_answer)) as fake:
        approve_rubrics(sqlite_url, *rubrics, BROKEN, judges=[openai_judge(fake, JUDGE)])
        engine = make_engine(sqlite_url)
        with session_scope(engine) as session:
            key = create_key(session, "verifiers", ["score"]).secret
        engine.dispose()
        server = RubricsvcServer(
            sqlite_url, log_path=tmp_path / "serve.log", env={"RUBRICSVC_BROKER_URL": ""}
        )
        server.start()
        try:
            answer = _run_example(verifiers_python, rollouts, tasks, server.base_url, key)
        finally:
            server.stop()
        # The platform's own scores of the same rollouts (stored by the reward route).
        scored = cli_ok(
            "score", "--judge", JUDGE, "--source", "verifiers", "--json", database_url=sqlite_url
        ).json()
    platform = {s["completion_id"]: s for s in scored["scores"]}

    per_rollout = answer["rollouts"]
    for (prompt, reply, _, expected), result in zip(ROLLOUTS, per_rollout, strict=True):
        if expected is None:
            # verifiers' rule: no verdict, no reward; the rollout errors (never a 0).
            assert not result["ok"], (prompt, reply)
            assert "RubricRewardUnavailable" in result["error"]
            assert result["reward"] is None
            continue
        assert result["ok"], (reply, result["error"])
        assert result["rewards"] == {"rubric": pytest.approx(expected)}
        (made,) = result["rubricsvc"]
        # The reward is the platform's score of that stored rollout, to the digit.
        assert platform[made["completion_id"]]["value"] == result["reward"]
    charged = per_rollout[5]["rubricsvc"][0]
    assert charged["failures"]["response"] == 2 and charged["status"] != "masked"
    masked = [s for s in platform.values() if s["value"] is None]
    assert len(masked) == 2  # OUTAGE and the broken criterion: masked there too

    groups = answer["groups"]
    for name in ("weather", "packing", "charged"):
        group = groups[name]
        assert group["ok"] and group["error"] is None
        members = [r for r in ROLLOUTS if r[2] == name]
        rewards = [member["rewards"]["rubric"] for member in group["rollouts"]]
        assert rewards == pytest.approx([expected for *_, expected in members])
        # Rewarded as one group, and each reward the platform's score of the rollout.
        for member in group["rollouts"]:
            (made,) = member["rubricsvc"]
            assert platform[made["completion_id"]]["value"] == member["rewards"]["rubric"]
    for name in ("outage", "broken"):
        # One masked reward fails the whole episode; no guess is recorded on any rollout.
        assert not groups[name]["ok"]
        assert "RubricRewardUnavailable" in groups[name]["error"]
        assert all(member["rewards"] == {} for member in groups[name]["rollouts"])
