"""verl's custom reward function, backed by rubric rewards.

In a verl config::

    custom_reward_function:
      path: /path/to/rubricsvc/trainer/adapters/verl.py
      name: compute_score
      reward_kwargs: {judge: embedded, via: http, base_url: "http://scorer:8000"}

verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info)`` once per
response; ``reward_kwargs`` arrive as keyword arguments and are the fields of the trainer's
reward settings (judge, mode, aggregation, via, base_url, database_url, ...). The keyword
arguments verl's reward loop adds of its own (``reward_router_address``,
``reward_model_tokenizer``) are ignored; any other unknown one is an error naming it.

verl's reward loop awaits a coroutine function in its event loop and runs a plain one in a
thread pool: ``compute_score_async`` is the same reward, awaited, for ``name:
compute_score_async``. Over ``via: http`` it keeps one pooled client per event loop with at
most ``max_concurrency`` requests in flight (default 64) and tries again only connection
errors, time-outs, 429 and 5xx (``trainer/async_rewards.py``). The prompt is
``extra_info["prompt_id"]`` (an external id) when the data set has it, else ``ground_truth``
(put the prompt's external id in the reward model's ground-truth column), else
``extra_info["prompt"]`` (found by the hash of its messages).

verl needs a number for every response, so a masked score (no usable rubric, or judge
failures outside the response's reach below the coverage floor) is returned as
``masked_score`` with ``masked: 1.0`` beside it in the result dict, which verl logs with the
other extra keys, as it does the failed judgments by class (``failures_infrastructure``,
``failures_judge``, ``failures_response``). By default (``"mean"``) that is the mean of the
scores its prompt's responses have under this judge (the rollouts of its group judged so far
included; over ``via: http`` with a group size, its group's mean: the server gathered the
group and judged it under one set), so the response moves nothing under GRPO's
group-normalized advantages. When
nothing of its prompt has a score yet (the first rollout of a prompt, sent alone), the mean of
every score under this judge stands in, the nearest estimate of its group's mean; 0.0 only
when the judge has no score at all (``masked_fallback: 1.0`` says either). A number
sends that number. A failure the response provoked (it overflows the judge, or breaks it
where the judge answers without it) gets its worst value, never a mask.

Over ``via: http`` each response's request names its group by ``extra_info["uid"]`` (verl's
id of a prompt's rollouts), and ``group_size`` (``rollout.n``) and ``evolution_run`` in
``reward_kwargs`` go with it: the server gathers the uid's rollouts, judges them as one group
and evolves the prompt's rubric under the run (docs/evolving-rubrics.md). Without a size, the
server's ``RUBRICSVC_API_REWARD_GROUP_SIZE`` applies (unset: each response judged alone).

verl runs this file in its own processes: the first call imports the plugins
``RUBRICSVC_PLUGINS`` names (and the installed entry points), as the CLI and the workers do,
so a judge may use a plugin's backend or mode (``via: inprocess`` judges here; over ``http``
and ``celery`` the server and its workers need the plugin too).
"""

from __future__ import annotations

import asyncio
from functools import lru_cache
from typing import Any

from rubricsvc.errors import ValidationFailed
from rubricsvc.scoring.rewards import MaskedReward, RewardRequest, RewardResult, parse_masked
from trainer.async_rewards import DEFAULT_MAX_CONCURRENCY, AsyncRewardClient
from trainer.config import ScorerSettings, ScorerVia, load_configured_plugins
from trainer.scorers import Scorer, make_scorer

# Passed by verl's reward loop to every reward function, whatever its reward_kwargs.
VERL_KEYWORDS = frozenset({"reward_router_address", "reward_model_tokenizer"})


def scorer_settings(kwargs: dict[str, Any]) -> ScorerSettings:
    """The reward settings among ``kwargs``, without the ones verl adds of its own; the
    plugins are loaded first (once), since the settings may name a plugin's mode."""
    load_configured_plugins()
    return ScorerSettings.model_validate(
        {key: value for key, value in kwargs.items() if key not in VERL_KEYWORDS}
    )


@lru_cache(maxsize=8)
def _scorer(settings_json: str) -> Scorer:
    # One scorer per distinct settings for the life of the worker: the judge loads once.
    return make_scorer(ScorerSettings.model_validate_json(settings_json))


# One client per (settings, cap, event loop): a pooled HTTP client belongs to its loop.
_clients: dict[tuple[str, int, int], AsyncRewardClient] = {}


def _client(settings: ScorerSettings, max_concurrency: int) -> AsyncRewardClient:
    key = (settings.model_dump_json(), max_concurrency, id(asyncio.get_running_loop()))
    if key not in _clients:
        # Not over http: the plain function's scorer, so the judge loads once per worker.
        local = None if settings.via == ScorerVia.HTTP else _scorer(settings.model_dump_json())
        _clients[key] = AsyncRewardClient(settings, max_concurrency, local=local)
    return _clients[key]


def reward_request(
    solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None
) -> RewardRequest:
    """The response's request: its prompt (see the module docstring) and its group, verl's
    ``uid`` (the server gathers a uid's rollouts where it gathers groups)."""
    info = extra_info or {}
    group = str(info["uid"]) if info.get("uid") is not None else None
    if info.get("prompt_id"):
        return RewardRequest(solution_str, prompt_id=str(info["prompt_id"]), group=group)
    if isinstance(ground_truth, str) and ground_truth:
        return RewardRequest(solution_str, prompt_id=ground_truth, group=group)
    if info.get("prompt"):
        return RewardRequest(solution_str, prompt=info["prompt"], group=group)
    raise ValidationFailed(
        "no prompt to find a rubric for: set extra_info.prompt_id, ground_truth or extra_info.prompt"
    )


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    masked_score: float | str = "mean",
    **settings: Any,
) -> dict[str, Any]:
    """verl's reward signature; ``score`` is the rubric reward, the other keys are logged."""
    masked = parse_masked(str(masked_score))
    scorer = _scorer(scorer_settings(settings).model_dump_json())
    result = scorer.score([reward_request(solution_str, ground_truth, extra_info)])[0]
    return verl_result(result, masked)


async def compute_score_async(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    masked_score: float | str = "mean",
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    **settings: Any,
) -> dict[str, Any]:
    """``compute_score``, awaited: for verl's reward loop, which awaits a coroutine function."""
    masked = parse_masked(str(masked_score))
    client = _client(scorer_settings(settings), max_concurrency)
    request = reward_request(solution_str, ground_truth, extra_info)
    (result,) = await client.score([request])
    return verl_result(result, masked)


def verl_result(result: RewardResult, masked_score: MaskedReward) -> dict[str, Any]:
    """The dict verl takes: ``score``, and what it logs beside it."""
    masked = result.reward is None
    fallback = masked and masked_score == "mean" and result.prompt_mean is None
    if not masked:
        score = float(result.reward or 0.0)
    elif masked_score == "mean":
        stand_in = result.prompt_mean if result.prompt_mean is not None else result.judge_mean
        score = 0.0 if stand_in is None else stand_in
    else:
        score = float(masked_score)
    return {
        "score": score,
        "masked": 1.0 if masked else 0.0,
        "masked_fallback": 1.0 if fallback else 0.0,
        "coverage": result.coverage,
        # 1.0 where the server judged the response's group short of its size, after its
        # time-out (under the current set, nothing evolved); 0.0 otherwise.
        "group_timed_out": 1.0 if result.group_status == "timed_out" else 0.0,
        **{f"failures_{name}": float(n) for name, n in result.failures.items()},
    }
