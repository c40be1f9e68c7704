"""Rewards for frameworks that await one rollout at a time (verl's reward loop, TRL's async
reward functions): many small requests in flight at once, on one event loop.

``AsyncRewardClient`` posts to the API's ``POST /v1/rewards`` over one pooled
``httpx.AsyncClient``, with at most ``max_concurrency`` requests in flight (the rest wait
their turn rather than open more connections), and tries again only what another try can
fix (``trainer/retrying.py``: connection errors, time-outs, 429 and 5xx, honouring
``Retry-After``). Without ``via: http`` the platform scores in this process, each call in a
worker thread so the event loop keeps going.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rubricsvc.errors import DependencyMissing
from rubricsvc.scoring.rewards import RewardRequest, RewardResult
from trainer.config import ScorerSettings, ScorerVia
from trainer.retrying import next_wait
from trainer.scorers import (
    REWARDS_ROUTE,
    Scorer,
    api_headers,
    json_answer,
    make_scorer,
    results_from_json,
    rewards_body,
)

if TYPE_CHECKING:
    import httpx

DEFAULT_MAX_CONCURRENCY = 64


def _httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise DependencyMissing(
            "rewards over HTTP need httpx: pip install 'rubricsvc[trainer]'"
        ) from None
    return httpx


class AsyncRewardClient:
    """Rewards under one ``ScorerSettings``, awaited; make one per event loop."""

    def __init__(
        self,
        settings: ScorerSettings,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        transport: httpx.AsyncBaseTransport | None = None,
        local: Scorer | None = None,
    ) -> None:
        """``local``: the scorer for a ``via`` other than http, when the caller keeps one
        already (its judge loaded once per process); else one is made."""
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, not {max_concurrency}")
        self.settings = settings
        self.max_concurrency = max_concurrency
        self._gate = asyncio.Semaphore(max_concurrency)
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        if settings.via == ScorerVia.HTTP:
            self._local = None
        else:
            self._local = local if local is not None else make_scorer(settings)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            httpx = _httpx()
            self._client = httpx.AsyncClient(
                base_url=(self.settings.base_url or "").rstrip("/"),
                headers=api_headers(self.settings),
                timeout=self.settings.timeout,
                # As many pooled connections as requests may be in flight, no more.
                limits=httpx.Limits(max_connections=self.max_concurrency),
                transport=self._transport,
            )
        return self._client

    async def score(self, requests: Sequence[RewardRequest]) -> list[RewardResult]:
        async with self._gate:
            if self._local is not None:
                return await asyncio.to_thread(self._local.score, list(requests))
            return await self._post(requests)

    async def _post(self, requests: Sequence[RewardRequest]) -> list[RewardResult]:
        httpx = _httpx()
        settings = self.settings
        url = f"{settings.base_url}{REWARDS_ROUTE}"
        body = rewards_body(settings, requests)
        for attempt in range(settings.retries + 1):
            response, error = None, None
            try:
                response = await self._http().post(REWARDS_ROUTE, json=body)
            except httpx.TransportError as err:
                error = err
            wait = next_wait(
                url, attempt, settings.retries, settings.retry_backoff, response, error
            )
            if wait is None:
                break
            await asyncio.sleep(wait)
        return results_from_json(settings, json_answer(url, response), len(requests))

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
