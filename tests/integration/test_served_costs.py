"""What a reward request's citation checks cost a real `rubricsvc serve`, and how that is
bounded. A bound on judgments alone admitted a report of 2,000 cited claims on four 3 MB
documents (each claim cut and indexed its whole document again), which held the server for
more than ten minutes while one-item rewards for the same judge waited. Now the planner that
every reward request and score job goes through counts what the checks cost besides their
judgments (cited documents indexed once, characters sent to the judge, passages ranked:
``scoring.scorer.EvidenceCost``), and a request past the bound gets 413 naming the figure and
the bound, keeping nothing. The largest request the default bound admits is answered in well
under the second that a one-item reward for the same judge, sent meanwhile, may take.

The judge is the ``scripted`` backend (every check "Yes"): what is timed is the server's work.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.requirements import require_module

require_module("uvicorn", "api")

import httpx  # noqa: E402

from rubricsvc import db  # noqa: E402
from rubricsvc.apikeys import create_key  # noqa: E402
from rubricsvc.config import ApiSettings  # noqa: E402
from rubricsvc.judging.config import JudgeSpec  # noqa: E402
from rubricsvc.models import (  # noqa: E402
    Completion,
    CompletionDocument,
    Document,
    Judgment,
    Score,
    ScoreJob,
)
from rubricsvc.scoring.rewards import RewardRequest  # noqa: E402
from rubricsvc.scoring.workload import reward_work  # noqa: E402
from tests.helpers import approve_rubrics, table_counts  # noqa: E402
from tests.servers import RubricsvcServer  # noqa: E402

PROMPT = "costs-report"
RUBRIC: dict[str, Any] = {
    "name": "costs/report",
    "prompt": {"external_id": PROMPT, "text": "Write a report on the sources, citing them."},
    "criteria": [
        {
            "text": "The cited claims are supported by their sources",
            "kind": "citations",
            "weight": 1,
        }
    ],
}
JUDGE = JudgeSpec(name="scripted-cites", backend="scripted", model="scripted")
BOUND = ApiSettings().max_reward_evidence  # the default: the test sets no bound of its own
JOB_BOUND = 1_000_000  # below what the admitted request's completion costs a job
ROWS = (Completion, Document, CompletionDocument, Judgment, Score, ScoreJob)

_WORDS = random.Random(7)
VOCABULARY = [
    "".join(_WORDS.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(_WORDS.randint(3, 9)))
    for _ in range(3000)
]


def _prose(chars: int, seed: int) -> str:
    """``chars`` characters of sentences of made-up words (a 64 KB block, repeated)."""
    rnd = random.Random(seed)
    sentences = []
    size = 0
    while size < 65_536:
        words = " ".join(rnd.choice(VOCABULARY) for _ in range(rnd.randint(8, 20)))
        sentences.append(words.capitalize() + ".")
        size += len(sentences[-1]) + 1
    block = " ".join(sentences) + " "
    return (block * (chars // len(block) + 1))[:chars]


def report_item(documents: int, doc_chars: int, claims: int, seed: int = 0) -> dict[str, Any]:
    """A reward item: a report of ``claims`` claims of one length, each citing one of
    ``documents`` documents of ``doc_chars`` characters, which the item carries."""
    rnd = random.Random(seed)
    lines = []
    for i in range(claims):
        words = " ".join(rnd.choice(VOCABULARY)[:6].ljust(6, "x") for _ in range(8))
        lines.append(f"Finding {i:05d} is that {words} [{i % documents + 1}].")
    references = [
        f"[{k}] Source {k}. https://example.org/{seed}/{k}" for k in range(1, documents + 1)
    ]
    return {
        "prompt_id": PROMPT,
        "completion": " ".join(lines) + "\n\n## References\n" + "\n".join(references),
        "documents": [
            {
                "label": str(k),
                "url": f"https://example.org/{seed}/{k}",
                "title": f"Source {k}",
                "text": _prose(doc_chars, seed * 100 + k),
            }
            for k in range(1, documents + 1)
        ],
    }


@dataclass
class Served:
    server: RubricsvcServer
    database_url: str
    engine: Any
    headers: dict[str, str]

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.server.base_url, headers=self.headers, timeout=60)

    def evidence(self, item: dict[str, Any]) -> int:
        """What the server's planner counts for ``item`` alone (reads only)."""
        request = RewardRequest(
            completion=item["completion"], prompt_id=item["prompt_id"], documents=item["documents"]
        )
        with db.session_scope(self.engine) as session:
            work = reward_work(session, JUDGE, [request], source="rewards", include_drafts=False)
        return work.evidence.total

    def rows(self) -> dict[str, int]:
        return table_counts(self.database_url, ROWS)


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[Served]:
    approve_rubrics(database_url, RUBRIC, judges=(JUDGE,))
    engine = db.make_engine(database_url)
    with db.session_scope(engine) as session:
        secret = create_key(session, "costs-score", ["score"]).secret
    server = RubricsvcServer(
        database_url,
        log_path=tmp_path / "serve.log",
        env={"RUBRICSVC_API_MAX_JOB_EVIDENCE": str(JOB_BOUND)},
    )
    server.start()
    try:
        yield Served(server, database_url, engine, {"Authorization": f"Bearer {secret}"})
    finally:
        server.stop()
        engine.dispose()


def _reward(client: httpx.Client, item: dict[str, Any]) -> httpx.Response:
    return client.post("/v1/rewards", json={"judge": JUDGE.name, "items": [item]})


LONG_DOCUMENT = 1_900_000  # characters: the shape that costs the server most per unit


def _largest_admitted(served: Served) -> tuple[int, int, int]:
    """How many claims of one length on one long document the bound admits at most, what that
    report costs, and what each claim adds (the same for each)."""
    one = served.evidence(report_item(1, LONG_DOCUMENT, 1))
    step = served.evidence(report_item(1, LONG_DOCUMENT, 2)) - one
    claims = 1 + (BOUND - one) // step
    return claims, one + (claims - 1) * step, step


def test_a_reward_past_the_evidence_bound_is_413_and_the_largest_admitted_is_quick(
    served: Served,
) -> None:
    before = served.rows()
    with served.client() as client:
        # The issue's request: 2,000 cited claims on four 3 MB documents, a 12 MB body.
        issue = report_item(documents=4, doc_chars=3_000_000, claims=2000, seed=1)
        started = time.monotonic()
        response = _reward(client, issue)
        refused_in = time.monotonic() - started
        assert response.status_code == 413, response.text[:500]
        error = response.json()["error"]
        assert (error["code"], error["field"]) == ("too_large", "body.items")
        figure = served.evidence(issue)
        assert error["message"].startswith(
            f"{figure} evidence cost of citation checks (document characters indexed: "
            "12000000 in 4 document(s); "
        )
        assert f"): at most {BOUND} per reward request;" in error["message"]
        assert refused_in < 10
        assert served.rows() == before  # nothing of it stored

        claims, cost, step = _largest_admitted(served)
        largest = report_item(1, LONG_DOCUMENT, claims)
        assert served.evidence(largest) == cost and BOUND - step < cost <= BOUND
        # One claim more is refused, naming its figure.
        response = _reward(client, report_item(1, LONG_DOCUMENT, claims + 1))
        assert response.status_code == 413, response.text[:500]
        assert response.json()["error"]["message"].startswith(f"{cost + step} evidence cost")
        assert served.rows() == before

        # The largest admitted request, and a one-item reward for the same judge meanwhile
        # (it waits for the judge: one batch of a judge at a time).
        one_item = report_item(documents=1, doc_chars=3000, claims=2, seed=2)
        timed: dict[str, Any] = {}

        def send_largest() -> None:
            with served.client() as own:
                started = time.monotonic()
                timed["response"] = _reward(own, largest)
                timed["answered"] = time.monotonic()
                timed["seconds"] = timed["answered"] - started

        sender = threading.Thread(target=send_largest)
        sender.start()
        time.sleep(0.1)  # its body is in: the server is working on it
        started = time.monotonic()
        small = _reward(client, one_item)
        small_answered = time.monotonic()
        small_seconds = small_answered - started
        sender.join(timeout=60)
        assert started < timed["answered"]  # sent while the largest was being judged
        assert small.status_code == 200, small.text[:500]
        assert small.json()["results"][0]["reward"] is not None
        # It waits for the largest (one batch of a judge at a time) and for nothing else: its
        # answer comes within a second of the largest's, however busy the machine (its own
        # work is a 3,000-character document's two checks).
        after = small_answered - timed["answered"]
        assert after < 1.0, f"a one-item reward came {after:.2f} s after the largest's answer"
        response = timed["response"]
        assert response.status_code == 200, response.text[:500]
        result = response.json()["results"][0]
        assert result["reward"] == pytest.approx(0.9)  # every check "Yes" at 0.9
        print(
            f"\nlargest admitted: evidence {cost} of {BOUND}, {claims} claims, answered in "
            f"{timed['seconds']:.2f} s; a one-item reward meanwhile in {small_seconds:.2f} s; "
            f"the issue's request refused in {refused_in:.2f} s"
        )
        assert timed["seconds"] < 5

        # A score job over the two stored reports costs what their checks do: past its bound.
        stored = served.rows()
        job_cost = cost + served.evidence(one_item)
        response = client.post("/v1/score-jobs", json={"judge": JUDGE.name, "prompt_ids": [PROMPT]})
        assert response.status_code == 413, response.text[:500]
        error = response.json()["error"]
        assert error["field"] == "body"
        assert error["message"].startswith(f"{job_cost} evidence cost of citation checks")
        assert f"at most {JOB_BOUND} per score job" in error["message"]
        assert served.rows() == stored
