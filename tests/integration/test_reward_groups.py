"""Reward groups gathered by the API (``scoring.groups``): a claim whose claimer died is taken
over and judged once, a group that never fills is judged under the current set after its
time-out and evolves nothing, and ``/v1/rewards`` gathers by its items' ``group``.

The rubric is check criteria (no model), the judge scripted: the route is what is tested."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from rubricsvc.db import make_engine, session_scope
from rubricsvc.models import RewardGroupMember
from rubricsvc.models.base import utcnow
from tests.api_harness import api_client, bearer
from tests.helpers import approve_rubrics
from tests.integration.test_trainer_evolution import BLUE, BLUE_JUDGE, PROPOSAL

EVOLUTION: dict[str, Any] = {
    "every": 1,
    "max_active": 2,
    "max_new": 3,
    "generator": {"backend": "scripted", "backend_options": {"reply": PROPOSAL}},
}
PROMPT = "Write one sentence about the sea."


def _items(texts: list[str], group: str | None) -> list[dict[str, Any]]:
    return [{"prompt_id": "ev-sea", "completion": t, "group": group} for t in texts]


def _body(texts: list[str], group: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"judge": "blue-judge", "items": _items(texts, group), **extra}


@pytest.fixture
def url(database_url: str) -> str:
    approve_rubrics(database_url, judges=[BLUE_JUDGE])
    return database_url


def test_a_claim_left_by_a_dead_process_is_taken_over_and_its_group_judged(url: str) -> None:
    engine = make_engine(url)
    with api_client(url, [BLUE], reward_group_stale_claim_s=30) as (client, keys):
        auth = bearer(keys["score"])
        first = client.post(
            "/v1/rewards", json=_body(["Blue sea.", "Grey sea."], "g", group_size=2), headers=auth
        )
        assert first.status_code == 200, first.text
        with session_scope(engine) as session:
            template = session.scalars(select(RewardGroupMember)).first()
            assert template is not None
            key, request = template.group_key, dict(template.request)
            # A process claimed a group of "g" an hour ago and died before answering it;
            # another's claim is a second old: still its claimer's.
            long_ago = utcnow() - timedelta(hours=1)
            dead = [
                RewardGroupMember(
                    group_key=key,
                    group_size=2,
                    request={**request, "completion": text},
                    created_at=long_ago,
                    batch="dead-claimer",
                    claimed_at=long_ago,
                )
                for text in ("A blue wave.", "A grey wave.")
            ]
            live = RewardGroupMember(
                group_key=key,
                group_size=2,
                request={**request, "completion": "A calm sea."},
                created_at=utcnow(),
                batch="live-claimer",
                claimed_at=utcnow() - timedelta(seconds=1),
            )
            session.add_all([*dead, live])
            session.flush()
            dead_ids, live_id = [row.id for row in dead], live.id
        # A caller of the same group takes the dead claim over, judges that group, then its own.
        second = client.post(
            "/v1/rewards",
            json=_body(["Blue water.", "Grey water."], "g", group_size=2),
            headers=auth,
        )
        assert second.status_code == 200, second.text
        assert [r["group_status"] for r in second.json()["results"]] == ["complete"] * 2
    try:
        with session_scope(engine) as session:
            rows = session.scalars(
                select(RewardGroupMember).where(RewardGroupMember.id.in_(dead_ids))
            ).all()
            batches = {row.batch for row in rows}
            assert len(batches) == 1 and batches != {"dead-claimer"}  # claimed again, together
            answers = {row.request["completion"]: row.answer for row in rows}
            assert all(
                a is not None and a["result"]["group_status"] == "complete"
                for a in answers.values()
            )
            # Judged as any rollout is: the blue one scores above the grey one, nothing masked.
            blue, grey = (answers[t]["result"]["reward"] for t in ("A blue wave.", "A grey wave."))  # type: ignore[index]
            assert blue is not None and grey is not None and blue > grey
            # The live claim is left to its claimer.
            still = session.get(RewardGroupMember, live_id)
            assert still is not None and still.batch == "live-claimer" and still.answer is None
            # Three groups judged, each in one batch, and the live claim.
            assert len(set(session.scalars(select(RewardGroupMember.batch)).all())) == 4
    finally:
        engine.dispose()
