"""Rewards for RL loops: ``/v1/rewards`` and the route OpenRLHF's remote reward client calls.

Both score in the server with a judge loaded once and kept; a pair already judged comes from
the cache. The routes are ``async``: concurrent requests of one judge wait on the event loop
to be judged together, on a worker thread (``scoring.coalescing``). A reward is null where
the score is masked (judge failures below the coverage floor) or the prompt has no usable
rubric: never a silent zero. OpenRLHF needs a number for every sample: there a masked score
is sent as the configured value (by default the batch's mean) and counted in ``extra_logs``,
never refused.
"""

from __future__ import annotations

from math import ceil
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from starlette.concurrency import run_in_threadpool

from rubricsvc.api.boundary import CheckedRoute
from rubricsvc.api.deps import app_state, require, require_with_query_key
from rubricsvc.api.drafts import drafts_allowed
from rubricsvc.api.errors import DEFAULT_RETRY_AFTER, ApiError
from rubricsvc.api.schemas import OpenRLHFIn, OpenRLHFOut, RewardsIn, RewardsOut
from rubricsvc.api.state import AppState
from rubricsvc.api.work import check_reward_work, refuse_reward_work, reward_judge
from rubricsvc.apikeys import Scope
from rubricsvc.db import session_scope
from rubricsvc.errors import ValidationFailed
from rubricsvc.judging.aggregation import DEFAULT_MIN_COVERAGE, AggregationName
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.failures import empty_counts
from rubricsvc.models import ApiKey
from rubricsvc.prompts import prompt_hash
from rubricsvc.scoring.coalescing import Ungatherable, compares
from rubricsvc.scoring.options import score_options
from rubricsvc.scoring.rewards import (
    RewardBatch,
    RewardRequest,
    compute_rewards,
    fill_masked_by_prompt,
    parse_masked,
    without_end_tokens,
)
from rubricsvc.scoring.scorer import Workload

router = APIRouter(tags=["rewards"], route_class=CheckedRoute)


async def _rewards(
    state: AppState,
    requests: list[RewardRequest],
    judge: str,
    mode: str | None,
    aggregation: str,
    min_coverage: float,
    drafts: bool,
    source: str,
) -> RewardBatch:
    limit = state.settings.api.max_reward_items
    if len(requests) > limit:
        raise ApiError(413, f"{len(requests)} items: at most {limit} per request", "body.items")
    # The policy's end-of-turn tokens are no part of its response: the same text with or
    # without them is one completion, one reward.
    requests = without_end_tokens(requests, state.settings.api.end_tokens)
    options = score_options(
        state.settings.scoring,
        aggregation=aggregation,
        min_coverage=min_coverage,
        chunk_judgments=state.settings.api.reward_chunk_judgments,
    )

    def check(batch_requests: list[RewardRequest]) -> JudgeSpec:
        # Refused before anything is stored or judged: a judge past the kept set, too much work.
        return check_reward_work(
            state, batch_requests, judge=judge, mode=mode, include_drafts=drafts, source=source
        )

    def judge_batch(batch_requests: list[RewardRequest], gathered: bool) -> RewardBatch:
        spec = reward_judge(state, judge, mode)
        if gathered and compares(spec):
            raise Ungatherable(f"judge {spec.name!r} compares completions")

        def admit(work: Workload) -> None:
            # The batch's work bounded as a whole, as planned for judging, before any judge
            # call; refused, its transaction keeps nothing (when a gathered batch fails,
            # each request is checked alone: ``check``).
            refuse_reward_work(state, work, len(batch_requests))

        with state.reward_lock(judge), session_scope(state.engine) as session:
            batch = compute_rewards(
                session,
                spec,
                batch_requests,
                options,
                state.judges.factory,
                source=source,
                include_drafts=drafts,
                admit=admit,
            )
        # Counted once per batch judged, however many requests it served.
        state.metrics.count_judgments(spec.name, batch.computed, batch.cached, batch.failed)
        state.metrics.count_failures(spec.name, batch.failures)
        nulls = sum(1 for r in batch.rewards if r is None)
        state.metrics.rewards.labels(spec.name, "ok").inc(len(batch.rewards) - nulls)
        state.metrics.rewards.labels(spec.name, "null").inc(nulls)
        return batch

    if not state.rewards.enabled:
        return await run_in_threadpool(judge_batch, requests, False)
    kind = (judge, mode, options, drafts, source)
    return await state.rewards.submit(kind, requests, judge_batch, check)


def _judge_unavailable(batch: RewardBatch) -> ApiError | None:
    """503 with Retry-After when no item got a reward because the judge was unreachable,
    overloaded or rate-limited (every failed judgment gave up on a failure that may pass): a
    client should come back later rather than train on nothing. The OpenRLHF route never
    refuses (masked rewards get a value)."""
    if not batch.failed or batch.unavailable < batch.failed:
        return None
    if any(result.reward is not None for result in batch.results):
        return None
    errors = (c.get("error") for r in batch.results for c in r.criteria if c.get("error"))
    first = next(errors, None) or next((m for r in batch.results for m in r.reasons), "")
    return ApiError(
        503,
        f"the judge failed on every item ({batch.failed} judgment(s)): {first}",
        code="judge_unavailable",
        headers={"Retry-After": str(ceil(batch.retry_after or DEFAULT_RETRY_AFTER))},
    )


def reward_requests(body: RewardsIn) -> list[RewardRequest]:
    """The requests of a ``/v1/rewards`` body, one per item."""
    return [
        RewardRequest(
            completion=item.completion,
            prompt_id=item.prompt_id,
            prompt=(
                item.prompt
                if isinstance(item.prompt, str) or item.prompt is None
                else [m.model_dump() for m in item.prompt]
            ),
            rubric=item.rubric,
            trajectory=(
                None
                if item.trajectory is None
                else [m.model_dump(exclude_none=True) for m in item.trajectory]
            ),
            documents=(
                None
                if item.documents is None
                else [d.model_dump(exclude_none=True, mode="json") for d in item.documents]
            ),
        )
        for item in body.items
    ]


async def serve_rewards(state: AppState, body: RewardsIn, key: ApiKey | None) -> RewardsOut:
    """The answer to a ``/v1/rewards`` body sent with ``key``: the route's, and
    ``api.direct``'s for the same route served without FastAPI's per-request layers."""
    drafts = drafts_allowed(state.settings.scoring, key, body.include_drafts, "body.include_drafts")
    batch = await _rewards(state, reward_requests(body), body.judge, body.mode, body.aggregation,
                           body.min_coverage, drafts, body.source)  # fmt: skip
    unavailable = _judge_unavailable(batch)
    if unavailable is not None:
        raise unavailable
    return RewardsOut.model_validate(batch, from_attributes=True)


@router.post("/v1/rewards", response_model=RewardsOut)
async def rewards(
    body: RewardsIn,
    state: AppState = Depends(app_state),
    key: ApiKey = Depends(require(Scope.SCORE)),
) -> RewardsOut:
    """One reward (or null) per (prompt, completion) pair, scored against the prompt's rubric.
    ``include_drafts: true`` needs the review scope unless the server scores drafts anyway."""
    # A well-formed request is served by ``api.direct`` in front of the app, with this
    # function's answer; this route answers the rest (and describes the route in /docs).
    return await serve_rewards(state, body, key)


async def serve_openrlhf(
    state: AppState,
    body: OpenRLHFIn,
    *,
    judge: str,
    aggregation: str,
    min_coverage: float,
    masked: str | None,
) -> OpenRLHFOut:
    """The answer to an OpenRLHF request (the route's query parameters as keywords): the
    route's, and ``api.direct``'s."""
    try:
        policy = state.settings.scoring.masked_reward if masked is None else parse_masked(masked)
    except ValidationFailed as err:
        raise ApiError(422, str(err), "query.masked") from None
    requests = []
    for index, (text, prompt) in enumerate(zip(body.query, body.prompts, strict=True)):
        if not text.startswith(prompt):
            raise ApiError(
                422, f"query {index} does not start with its prompt", f"body.query.{index}"
            )
        label = body.labels[index] if body.labels else None
        response = text[len(prompt) :]
        if label:
            requests.append(RewardRequest(completion=response, prompt_id=label))
        else:
            requests.append(RewardRequest(completion=response, prompt=prompt))
    drafts = state.settings.scoring.use_drafts  # the client cannot ask: the server's setting
    batch = await _rewards(
        state, requests, judge, None, aggregation, min_coverage, drafts, "openrlhf"
    )
    # A masked score never stops the run: it is sent as the configured value and counted.
    # One rollout per request (as OpenRLHF sends them) has no other rewards of its prompt
    # to take the mean of: its prompt's stored mean stands in.
    keys = [r.prompt_id if r.prompt_id is not None else prompt_hash(r.messages()) for r in requests]
    stored = {
        r.completion_id: r.prompt_mean
        for r in batch.results
        if r.completion_id is not None and r.prompt_mean is not None
    }
    filled = fill_masked_by_prompt(batch.results, keys, policy, stored)
    return OpenRLHFOut(
        rewards=filled,
        scores=filled,
        extra_logs={
            "rubric_coverage": [r.coverage for r in batch.results],
            "rubric_masked": [1.0 if r.reward is None else 0.0 for r in batch.results],
            **{
                f"rubric_failures_{name}": [float(r.failures[name]) for r in batch.results]
                for name in empty_counts()
            },
        },
    )


@router.post(
    "/v1/openrlhf/reward",
    response_model=OpenRLHFOut,
    dependencies=[Depends(require_with_query_key(Scope.SCORE))],
)
async def openrlhf_reward(
    body: OpenRLHFIn,
    state: AppState = Depends(app_state),
    judge: str = Query("embedded", min_length=1, description="The judge config to score with."),
    aggregation: Annotated[AggregationName, Query()] = "rar",
    min_coverage: float = Query(DEFAULT_MIN_COVERAGE, ge=0, le=1),
    masked: str | None = Query(
        None,
        max_length=40,
        description="The reward to send for a masked score: 'mean' (the mean of the batch's "
        "other rewards, so the sample moves nothing under group-normalized advantages) or a "
        "finite number. OpenRLHF needs a number for every sample. Default: the setting "
        "RUBRICSVC_SCORING_MASKED_REWARD ('mean').",
    ),
) -> OpenRLHFOut:
    """OpenRLHF's remote reward model contract: ``{"query", "prompts", "labels"}`` in,
    ``{"rewards", "scores", "extra_logs"}`` out. Each query is the prompt followed by the
    response; each label is the prompt's external id (``--data.label_key``), else the prompt
    text is looked up by its hash as one user message."""
    # Served by ``api.direct`` when well-formed, as ``/v1/rewards`` is.
    return await serve_openrlhf(
        state, body, judge=judge, aggregation=aggregation, min_coverage=min_coverage, masked=masked
    )
