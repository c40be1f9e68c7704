"""The awaited reward client and verl's async reward function, against a scripted HTTP server
(httpx's mock transport): the test is about the client's retries, waits and concurrency cap,
not the judge. The same client against `rubricsvc serve` is in
tests/integration/test_trainer_rewards.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from rubricsvc.errors import RubricsvcError
from rubricsvc.scoring.rewards import RewardRequest
from trainer.adapters import verl
from trainer.async_rewards import AsyncRewardClient
from trainer.config import ScorerSettings
from trainer.retrying import MAX_RETRY_AFTER, retry_after, retry_wait, worth_retrying

SETTINGS = ScorerSettings(via="http", base_url="http://scorer", retries=3, retry_backoff=0.01)


def ok(request: httpx.Request) -> httpx.Response:
    """A reward per item: its text's length over 100, so each answer names its request."""
    items = json.loads(request.content)["items"]
    results = [{"reward": len(item["completion"]) / 100, "status": "ok"} for item in items]
    return httpx.Response(200, json={"results": results})


def scripted(*answers: Callable[[httpx.Request], httpx.Response]) -> tuple[Any, list[str]]:
    """A transport answering each request with the next of ``answers`` (the last repeats)."""
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return answers[min(len(seen) - 1, len(answers) - 1)](request)

    return httpx.MockTransport(handle), seen


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The client's pauses between tries, recorded instead of slept."""
    recorded: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        recorded.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr("trainer.async_rewards.asyncio.sleep", sleep)
    return recorded


def run(client: AsyncRewardClient, *texts: str) -> list[float | None]:
    async def go() -> list[float | None]:
        try:
            results = await client.score([RewardRequest(t, prompt_id="p") for t in texts])
        finally:
            await client.aclose()
        return [r.reward for r in results]

    return asyncio.run(go())


def test_a_429_is_tried_again_after_the_pause_it_asks_for(waits: list[float]) -> None:
    transport, seen = scripted(
        lambda _: httpx.Response(429, headers={"Retry-After": "2.5"}, text="slow down"),
        lambda _: httpx.Response(503, text="restarting"),
        ok,
    )
    client = AsyncRewardClient(SETTINGS, transport=transport)
    assert run(client, "four", "eleven char") == [0.04, 0.11]
    assert seen == ["/v1/rewards"] * 3
    assert waits == [2.5, 0.02]  # Retry-After, then the backoff of the second try


def test_a_connection_error_is_tried_again_and_the_last_one_is_named(
    waits: list[float],
) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    transport, seen = scripted(refuse, ok)
    assert run(AsyncRewardClient(SETTINGS, transport=transport), "abc") == [0.03]
    assert waits == [0.01]
    transport, seen = scripted(refuse)
    with pytest.raises(RubricsvcError, match=r"POST http://scorer/v1/rewards: ConnectError"):
        run(AsyncRewardClient(SETTINGS, transport=transport), "abc")
    assert len(seen) == SETTINGS.retries + 1


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_a_client_error_is_not_tried_again(waits: list[float], status: int) -> None:
    transport, seen = scripted(lambda _: httpx.Response(status, text="bad request\nmore"))
    with pytest.raises(RubricsvcError, match=rf"HTTP {status} bad request$"):
        run(AsyncRewardClient(SETTINGS, transport=transport), "abc")
    assert (len(seen), waits) == (1, [])


def test_the_last_5xx_is_reported_with_its_status(waits: list[float]) -> None:
    transport, seen = scripted(lambda _: httpx.Response(500, text="boom"))
    with pytest.raises(RubricsvcError, match=r"HTTP 500 boom"):
        run(AsyncRewardClient(SETTINGS, transport=transport), "abc")
    assert len(seen) == SETTINGS.retries + 1 and waits == [0.01, 0.02, 0.04]


def test_no_more_requests_are_in_flight_than_the_cap() -> None:
    in_flight = peak = 0

    async def handle(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return ok(request)

    async def go() -> list[float | None]:
        client = AsyncRewardClient(
            SETTINGS, max_concurrency=4, transport=httpx.MockTransport(handle)
        )
        texts = ["x" * n for n in range(1, 21)]
        try:
            found = await asyncio.gather(
                *(client.score([RewardRequest(t, prompt_id="p")]) for t in texts)
            )
        finally:
            await client.aclose()
        return [results[0].reward for results in found]

    rewards = asyncio.run(go())
    assert rewards == pytest.approx([n / 100 for n in range(1, 21)])  # each its own answer
    assert peak == 4


def test_retry_after_reads_seconds_and_dates_and_is_bounded() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert retry_after({"Retry-After": "3"}) == 3.0
    assert retry_after({"retry-after": format_datetime(now + timedelta(seconds=30))}, now) == 30.0
    assert retry_after({"Retry-After": format_datetime(now - timedelta(seconds=5))}, now) == 0.0
    assert retry_after({"Retry-After": "86400"}) == MAX_RETRY_AFTER
    assert retry_after({"Retry-After": "soon"}) is None and retry_after({}) is None
    assert retry_wait(2, 0.5) == 2.0 and retry_wait(2, 0.5, {"Retry-After": "1"}) == 1.0
    assert [s for s in (400, 404, 409, 422, 429, 500, 502, 503, 504) if worth_retrying(s)] == [
        429,
        500,
        502,
        503,
        504,
    ]


def test_verl_async_compute_score_ignores_verls_own_keywords(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    transport, seen = scripted(ok)
    real = AsyncRewardClient

    def with_transport(
        settings: ScorerSettings, max_concurrency: int, local: Any = None
    ) -> AsyncRewardClient:
        return real(settings, max_concurrency, transport=transport, local=local)

    monkeypatch.setattr(verl, "AsyncRewardClient", with_transport)
    monkeypatch.setattr(verl, "_clients", {})
    kwargs: dict[str, Any] = {"via": "http", "base_url": "http://scorer"}

    async def go() -> list[dict[str, Any]]:
        return list(
            await asyncio.gather(
                *(
                    verl.compute_score_async(
                        "rubrics",
                        text,
                        "p",
                        None,
                        reward_router_address="10.0.0.1:9000",  # verl's reward loop adds these
                        reward_model_tokenizer=object(),
                        **kwargs,
                    )
                    for text in ("ab", "abcd")
                )
            )
        )

    first, second = asyncio.run(go())
    assert (first["score"], second["score"], first["masked"]) == (0.02, 0.04, 0.0)
    assert len(seen) == 2 and len(verl._clients) == 1  # one pooled client for the loop
    with pytest.raises(ValueError, match="judje"):
        asyncio.run(verl.compute_score_async("rubrics", "ab", "p", judje="embedded", **kwargs))


def test_verl_sends_its_uid_as_the_group_and_the_group_settings_in_the_body(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bodies: list[dict[str, Any]] = []

    def recorded(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        answer = ok(request)
        if json.loads(request.content).get("group_size"):  # the server's answer for a group
            results = answer.json()["results"]
            return httpx.Response(
                200, json={"results": [{**r, "group_status": "timed_out"} for r in results]}
            )
        return answer

    transport, _ = scripted(recorded)
    real = AsyncRewardClient

    def with_transport(
        settings: ScorerSettings, max_concurrency: int, local: Any = None
    ) -> AsyncRewardClient:
        return real(settings, max_concurrency, transport=transport, local=local)

    monkeypatch.setattr(verl, "AsyncRewardClient", with_transport)
    monkeypatch.setattr(verl, "_clients", {})
    kwargs: dict[str, Any] = {"via": "http", "base_url": "http://scorer"}
    info = {"uid": "3f2a-uid", "prompt_id": "p"}
    timed_out = asyncio.run(
        verl.compute_score_async(
            "rubrics", "ab", None, info, group_size=8, evolution_run="my-run", **kwargs
        )
    )
    alone = asyncio.run(verl.compute_score_async("rubrics", "ab", "p", None, **kwargs))
    # The server's group status reaches verl's logs: 1.0 where the group timed out.
    assert (timed_out["group_timed_out"], alone["group_timed_out"]) == (1.0, 0.0)
    assert timed_out["score"] == alone["score"] == 0.02
    gathered, plain = bodies
    assert gathered["items"][0]["group"] == "3f2a-uid"
    assert (gathered["group_size"], gathered["evolution"]) == (8, "my-run")
    # Without them the body is as before: the server's own setting decides.
    assert plain["items"][0]["group"] is None
    assert "group_size" not in plain and "evolution" not in plain
    # Only the server gathers: in-process settings refuse them.
    with pytest.raises(ValueError, match="group_size: the server gathers groups"):
        ScorerSettings.model_validate({"group_size": 8})
    with pytest.raises(ValueError, match="evolution_run"):
        ScorerSettings.model_validate({**kwargs, "evolution_run": "not a name!"})


def test_the_plain_client_retries_and_waits_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """post_json (TRL's and OpenRLHF's path) follows the same rule as the awaited client."""
    from trainer.scorers import HttpScorer

    answers = iter(
        [
            httpx.Response(429, headers={"Retry-After": "1.5"}),
            httpx.Response(502),
            httpx.Response(200, json={"results": [{"reward": 0.5, "status": "ok"}]}),
            httpx.Response(409, text="conflict"),
        ]
    )
    slept: list[float] = []
    monkeypatch.setattr("trainer.scorers.time.sleep", slept.append)
    monkeypatch.setattr(httpx, "post", lambda *args, **kwargs: next(answers))
    scorer = HttpScorer(SETTINGS)
    (result,) = scorer.score([RewardRequest("abc", prompt_id="p")])
    assert result.reward == 0.5 and slept == [1.5, 0.02]
    with pytest.raises(RubricsvcError, match=r"HTTP 409 conflict"):
        scorer.score([RewardRequest("abc", prompt_id="p")])
    assert slept == [1.5, 0.02]  # a 409 is not tried again
