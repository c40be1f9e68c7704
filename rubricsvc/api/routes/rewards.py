"""Rewards for RL loops: ``/v1/rewards`` and the route OpenRLHF's remote reward client calls.

Both parse their input, call the reward pipeline (``scoring.pipeline``, the server's own:
``AppState.rewards``) and serialize its answer; its refusals become HTTP errors here
(``answered``). The server judges with a judge loaded once and kept; a pair already judged
comes from the cache; concurrent requests of one judge wait on the event loop to be judged
together, on a worker thread. A reward is null where
the score is masked (judge failures below the coverage floor) or the prompt has no usable
rubric: never a silent zero. OpenRLHF needs a number for every sample: there a masked score
is sent as the configured value (by default the batch's mean) and counted in ``extra_logs``,
never refused.

A request may ask the server to gather groups (``group_size``, ``evolution``; the OpenRLHF
route takes them in its URL's query string, which ``--reward.remote_url`` can carry): each
prompt's rollouts, sent one per request, are held until the group is complete and judged
together (``scoring.groups``), under the evolution run's current set where one is named.
"""

from __future__ import annotations

from collections.abc import Awaitable
from math import ceil
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from starlette.concurrency import run_in_threadpool

from rubricsvc.api.boundary import CheckedRoute
from rubricsvc.api.deps import app_state, require, require_with_query_key
from rubricsvc.api.drafts import drafts_allowed
from rubricsvc.api.errors import DEFAULT_RETRY_AFTER, ApiError
from rubricsvc.api.schemas import (
    EVOLUTION_RUN,
    OpenRLHFIn,
    OpenRLHFOut,
    RewardsIn,
    RewardsOut,
)
from rubricsvc.api.state import AppState
from rubricsvc.apikeys import Scope
from rubricsvc.db import session_scope
from rubricsvc.judging.aggregation import DEFAULT_MIN_COVERAGE, AggregationName
from rubricsvc.judging.failures import empty_counts
from rubricsvc.models import ApiKey
from rubricsvc.scoring.pipeline import (
    BadMaskedValue,
    GroupPolicy,
    GroupsNotGathered,
    JudgeCannotBeKept,
    JudgeUnavailable,
    RewardAnswer,
    RewardRequest,
    TooManyItems,
    TooMuchWork,
    masked_policy,
)

router = APIRouter(tags=["rewards"], route_class=CheckedRoute)


async def answered(
    pipeline_run: Awaitable[RewardAnswer], group_size_in: str = "body"
) -> RewardAnswer:
    """The reward pipeline's answer, its refusals made HTTP errors: the edge's one table.
    ``group_size_in``: where the call's group size came from (``body`` or ``query``)."""
    try:
        return await pipeline_run
    except TooManyItems as err:
        raise ApiError(413, str(err), "body.items") from None
    except TooMuchWork as err:
        where = group_size_in if err.field == "group_size" else "body"
        raise ApiError(
            413, str(err), "body" if err.field is None else f"{where}.{err.field}"
        ) from None
    except (JudgeCannotBeKept, GroupsNotGathered) as err:
        raise ApiError(422, str(err)) from None
    except JudgeUnavailable as err:
        # A client should come back later rather than train on nothing.
        raise ApiError(
            503,
            str(err),
            code="judge_unavailable",
            headers={"Retry-After": str(ceil(err.retry_after or DEFAULT_RETRY_AFTER))},
        ) from None


def group_policy(
    state: AppState,
    size: int | None,
    evolution: str | None,
    gathers: bool,
    where: str,
    key: ApiKey | None,
) -> GroupPolicy | None:
    """How a call's rollouts are gathered: by ``size`` (else the server's group size where the
    call ``gathers`` or names an evolution run), or not at all; into groups of ``key``'s
    rollouts only, so that no client joins (or reads its rollouts into) another's group."""
    api = state.settings.api
    if size is None and (gathers or evolution is not None):
        size = api.reward_group_size
    if size is None:
        if evolution is not None:
            raise ApiError(
                422,
                "an evolution run evolves each prompt's group: give group_size (or set "
                "RUBRICSVC_API_REWARD_GROUP_SIZE)",
                f"{where}.group_size",
            )
        return None
    return GroupPolicy(
        size,
        api.reward_group_timeout_s,
        evolution,
        owner=None if key is None else f"key:{key.id}",
        stale_after=api.reward_group_stale_claim_s,
    )


async def check_run(state: AppState, policy: GroupPolicy | None, key: ApiKey | None) -> None:
    """403 where ``key`` may not create or use the call's evolution run (``store.served_run``):
    decided before any rollout waits. A server without evolution refuses the run itself."""
    run = policy.evolution if policy is not None else None
    evolution = state.evolution
    if run is None or evolution is None:
        return
    who = None if key is None else (key.name, list(key.scopes))

    def check() -> None:
        with session_scope(state.engine) as session:
            evolution.run_for(session, run, who)

    await run_in_threadpool(check)


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
            group=item.group,
        )
        for item in body.items
    ]


async def serve_rewards(state: AppState, body: RewardsIn, key: ApiKey | None) -> RewardsOut:
    """The answer to a ``/v1/rewards`` body sent with ``key``: the route's, and
    ``api.direct``'s for the same route served without FastAPI's per-request layers. No item
    rewarded because the judge was unavailable: 503 with Retry-After."""
    drafts = drafts_allowed(state.settings.scoring, key, body.include_drafts, "body.include_drafts")
    pipeline = state.rewards
    policy = group_policy(
        state,
        body.group_size,
        body.evolution,
        any(item.group is not None for item in body.items),
        "body",
        key,
    )
    await check_run(state, policy, key)
    call = pipeline.call(
        body.judge,
        body.mode,
        aggregation=body.aggregation,
        min_coverage=body.min_coverage,
        include_drafts=drafts,
        source=body.source,
        group=policy,
    )
    answer = await answered(pipeline.serve(call, reward_requests(body), refuse_unavailable=True))
    return RewardsOut.model_validate(answer.batch, from_attributes=True)


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
    key: ApiKey | None,
    *,
    judge: str,
    aggregation: str,
    min_coverage: float,
    masked: str | None,
    group_size: int | None = None,
    evolution: str | None = None,
) -> OpenRLHFOut:
    """The answer to an OpenRLHF request (the route's query parameters as keywords): the
    route's, and ``api.direct``'s. A masked score never stops the run: it is sent as the
    configured value (``masked``, else the server's setting) and counted."""
    try:
        policy = masked_policy(masked, state.settings.scoring.masked_reward)
    except BadMaskedValue as err:
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
    pipeline = state.rewards
    # One rollout per request: the server's group size applies to every request.
    gathering = group_policy(state, group_size, evolution, True, "query", key)
    await check_run(state, gathering, key)
    call = pipeline.call(
        judge,
        None,
        aggregation=aggregation,
        min_coverage=min_coverage,
        include_drafts=state.settings.scoring.use_drafts,  # the client cannot ask
        source="openrlhf",
        group=gathering,
    )
    answer = await answered(pipeline.serve(call, requests, fill_masked=policy), "query")
    results = answer.batch.results
    assert answer.filled is not None  # asked for
    return OpenRLHFOut(
        rewards=answer.filled,
        scores=answer.filled,
        extra_logs={
            "rubric_coverage": [r.coverage for r in results],
            "rubric_masked": [1.0 if r.reward is None else 0.0 for r in results],
            **{
                f"rubric_failures_{name}": [float(r.failures[name]) for r in results]
                for name in empty_counts()
            },
            **(
                {}
                if call.group is None
                else {
                    "rubric_group_timed_out": [
                        float(r.group_status == "timed_out") for r in results
                    ]
                }
            ),
        },
    )


@router.post("/v1/openrlhf/reward", response_model=OpenRLHFOut)
async def openrlhf_reward(
    body: OpenRLHFIn,
    state: AppState = Depends(app_state),
    key: ApiKey = Depends(require_with_query_key(Scope.SCORE)),
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
    group_size: int | None = Query(
        None,
        ge=2,
        le=1024,
        description="Gather each prompt's rollouts (by label, else prompt) until this many "
        "have come, then judge them as one group. Default: RUBRICSVC_API_REWARD_GROUP_SIZE "
        "(unset: each request judged as it comes).",
    ),
    evolution: str | None = Query(
        None,
        pattern=EVOLUTION_RUN,
        description="An evolution run: each group judged under its prompt's current evolved "
        "set, each complete group evolves it by one step.",
    ),
) -> OpenRLHFOut:
    """OpenRLHF's remote reward model contract: ``{"query", "prompts", "labels"}`` in,
    ``{"rewards", "scores", "extra_logs"}`` out. Each query is the prompt followed by the
    response; each label is the prompt's external id (``--data.label_key``), else the prompt
    text is looked up by its hash as one user message."""
    # Served by ``api.direct`` when well-formed, as ``/v1/rewards`` is.
    return await serve_openrlhf(
        state,
        body,
        key,
        judge=judge,
        aggregation=aggregation,
        min_coverage=min_coverage,
        masked=masked,
        group_size=group_size,
        evolution=evolution,
    )
