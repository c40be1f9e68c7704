"""One-rollout reward requests sent at once, as OpenRLHF and verl send them, over a real
server: judged in a few backend batches, not one each, and every request answered with the
reward and counts it would have got alone; an unknown prompt fails its own request only.

The judge is a scripted backend that runs one batch at a time (as one GPU engine does) and
answers each criterion with a probability drawn from what it was shown; the test is about the
server's batching, not the model's verdicts.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from rubricsvc.api import create_app
from rubricsvc.apikeys import Scope, create_key
from rubricsvc.backends.scripted import ScriptedBackend
from rubricsvc.backends.types import ChoiceRequest
from rubricsvc.db import make_engine, session_scope
from rubricsvc.rubrics.schemas import RubricSpec
from rubricsvc.rubrics.versions import approve, save_rubric
from tests.api_harness import bearer, settings_for
from tests.requirements import require_module
from tests.servers import free_port

require_module("uvicorn", "api")

RUBRIC: dict[str, Any] = {
    "name": "t/coalesce",
    "prompt": {"external_id": "p-coalesce", "text": "How can I sleep better?"},
    "criteria": [
        {"text": "Recommends a regular sleep schedule", "weight": 2},
        {"text": "Mentions limiting caffeine", "weight": 1},
        {"text": "Recommends sleeping pills without a doctor", "weight": -1},
    ],
}
TEXTS = [
    f"Go to bed at the same time each night. Tip {i}: {'less coffee ' * (i % 4)}" for i in range(23)
]
TEXTS.append(TEXTS[0])  # a rollout sent twice: judged once


def drawn(request: ChoiceRequest) -> dict[str, float]:
    """A probability that depends only on what the judge was shown."""
    digest = hashlib.sha256(json.dumps(request.chat).encode()).digest()
    yes = 0.05 + 0.9 * digest[0] / 255
    return {"Yes": yes, "No": 1 - yes}


CRASH_MARKER = "Marker-crash"


def drawn_or_crash(request: ChoiceRequest) -> dict[str, float]:
    """``drawn``, but the backend raises for its whole batch when shown the marker."""
    if CRASH_MARKER in request.chat[-1]["content"]:
        raise RuntimeError("index out of range in self")
    return drawn(request)


@contextmanager
def serving(
    database_url: str, probs: Any = drawn, **api: Any
) -> Iterator[tuple[str, str, ScriptedBackend]]:
    """A real HTTP server (uvicorn, in a thread) on ``database_url`` with the rubric approved;
    its base URL, a scoring key, and its judge backend."""
    import uvicorn

    engine = make_engine(database_url)
    with session_scope(engine) as session:
        key = create_key(session, "coalesce", [Scope.SCORE.value]).secret
        approve(session, save_rubric(session, RubricSpec.model_validate(RUBRIC)).version)
    backend = ScriptedBackend(probs=probs, delay=0.05, exclusive=True)
    app = create_app(settings_for(database_url, **api), engine, build_backend=lambda _: backend)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", key, backend
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        engine.dispose()


def reward_request(base: str, key: str, items: list[dict[str, Any]]) -> httpx.Response:
    return httpx.post(f"{base}/v1/rewards", json={"items": items}, headers=bearer(key), timeout=120)


def one_at_a_time(base: str, key: str, items: list[dict[str, Any]]) -> list[httpx.Response]:
    """Each item in its own request, all sent at once."""
    start = threading.Barrier(len(items))

    def send(item: dict[str, Any]) -> httpx.Response:
        start.wait()
        return reward_request(base, key, [item])

    with ThreadPoolExecutor(len(items)) as pool:
        return list(pool.map(send, items))


def test_concurrent_one_rollout_requests_are_judged_in_few_batches(
    database_url: str, migrated_sqlite_template: Path, tmp_path: Path
) -> None:
    items = [{"prompt_id": "p-coalesce", "completion": text} for text in TEXTS]
    unknown = {"prompt_id": "p-nowhere", "completion": "Sleep more."}
    # A burst is gathered while requests keep arriving less than 50 ms apart (up to 2 s):
    # a busy machine that parses the 25 requests slowly still makes few batches.
    settings = {"reward_batch_window_ms": 50, "reward_batch_max_wait_ms": 2000}
    with serving(database_url, **settings) as (base, key, backend):
        answers = one_at_a_time(base, key, [*items, unknown])
    *replies, refused = answers
    assert refused.status_code == 404, refused.text
    assert "p-nowhere" in refused.text
    assert [r.status_code for r in replies] == [200] * len(items), [r.text for r in replies]
    bodies = [r.json() for r in replies]

    criteria = len(RUBRIC["criteria"])
    distinct = len(set(TEXTS))
    # 25 requests at once: a few batches, where each alone would be one call (25 calls).
    assert len(backend.batch_sizes) <= 6, backend.batch_sizes
    assert sum(backend.batch_sizes) == distinct * criteria
    # Each request is told its own work; the rollout sent twice was judged once.
    assert [b["judgments"] for b in bodies] == [criteria] * len(items)
    assert sum(b["computed"] for b in bodies) == distinct * criteria
    assert sum(b["cached"] for b in bodies) == criteria
    assert all(b["failed"] == 0 for b in bodies)

    # The same rewards as one request of every rollout, on a server that judges each request
    # alone, on a database of its own.
    alone = tmp_path / "alone.sqlite"
    shutil.copy(migrated_sqlite_template, alone)
    with serving(f"sqlite:///{alone}", reward_batch_max_items=1) as (base, key, backend):
        together = reward_request(base, key, items)
    assert together.status_code == 200, together.text
    assert backend.batch_sizes == [distinct * criteria]
    assert [b["rewards"][0] for b in bodies] == pytest.approx(together.json()["rewards"])
    assert len(set(together.json()["rewards"])) > 3  # the rewards tell the rollouts apart


def test_a_rollout_that_crashes_the_judge_pays_and_spares_the_rollouts_gathered_with_it(
    database_url: str, migrated_sqlite_template: Path, tmp_path: Path
) -> None:
    """A rollout gathered with other callers' rollouts into one backend batch makes the backend
    raise: the others still get their rewards (the batch is halved until the crash stands
    alone), and it gets the worst reward, not a masked one it could hide behind."""
    texts = TEXTS[:11]
    crashing = f"{CRASH_MARKER}: go to bed whenever."
    items = [{"prompt_id": "p-coalesce", "completion": text} for text in [*texts, crashing]]
    settings = {"reward_batch_window_ms": 50, "reward_batch_max_wait_ms": 2000}
    with serving(database_url, probs=drawn_or_crash, **settings) as (base, key, backend):
        answers = one_at_a_time(base, key, items)
    assert [a.status_code for a in answers] == [200] * len(items), [a.text for a in answers]
    criteria = len(RUBRIC["criteria"])
    assert max(backend.batch_sizes) >= 2 * criteria  # callers' rollouts were gathered
    bodies = [a.json() for a in answers]
    *spared, charged = bodies
    assert all(b["failed"] == 0 for b in spared)
    assert charged["failed"] == criteria
    # Nothing met, the pitfall present: the rubric's worst reward, -1 of 4 weight units.
    assert charged["rewards"] == [pytest.approx(-1 / 4)]

    alone = tmp_path / "alone.sqlite"
    shutil.copy(migrated_sqlite_template, alone)
    with serving(f"sqlite:///{alone}", reward_batch_max_items=1) as (base, key, _):
        together = reward_request(base, key, items[:-1])
    assert together.status_code == 200, together.text
    assert [b["rewards"][0] for b in spared] == pytest.approx(together.json()["rewards"])
