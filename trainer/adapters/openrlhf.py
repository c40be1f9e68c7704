"""OpenRLHF's custom reward function, backed by the rubricsvc API.

OpenRLHF loads a Python file given as ``--reward.remote_url /path/to/openrlhf.py`` and calls its
``reward_func(queries, prompts, labels)``: queries are prompt + response strings, prompts the
prompt strings, labels the ``--data.label_key`` column (here: each prompt's external id). This
file forwards them to the API's ``POST /v1/openrlhf/reward`` and returns what OpenRLHF
expects: ``{"rewards": tensor, "scores": tensor, "extra_logs": {name: tensor}}``.

Settings come from environment variables (set them for OpenRLHF's workers):
``RUBRICSVC_REWARD_URL`` (e.g. ``http://scorer:8000``, required), ``RUBRICSVC_REWARD_API_KEY``,
``RUBRICSVC_REWARD_JUDGE`` (default ``embedded``), ``RUBRICSVC_REWARD_AGGREGATION`` (``rar``),
``RUBRICSVC_REWARD_MASKED`` (the reward sent for a masked score: ``mean``, the mean of the
batch's other rewards, or a number; unset, the server's RUBRICSVC_SCORING_MASKED_REWARD,
``mean`` by default: a masked score never stops the run), ``RUBRICSVC_REWARD_TIMEOUT``
(seconds, default 600) and
``RUBRICSVC_REWARD_RETRIES`` (tries after a connection error, a time-out, HTTP 429 or a 5xx,
waiting as a ``Retry-After`` asks or with growing waits; default 3).

It judges nothing itself, so it loads no plugins: the server (and its workers) judging behind
the API load the ones a judge needs (``RUBRICSVC_PLUGINS``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from rubricsvc.errors import ValidationFailed
from trainer.config import ScorerSettings, ScorerVia
from trainer.scorers import post_json

ROUTE = "/v1/openrlhf/reward"


def api_settings() -> ScorerSettings:
    base_url = os.environ.get("RUBRICSVC_REWARD_URL")
    if not base_url:
        raise ValidationFailed(
            "set RUBRICSVC_REWARD_URL to the rubricsvc API (e.g. http://host:8000)"
        )
    timeout = float(os.environ.get("RUBRICSVC_REWARD_TIMEOUT", "600"))
    retries = int(os.environ.get("RUBRICSVC_REWARD_RETRIES", "3"))
    return ScorerSettings(via=ScorerVia.HTTP, base_url=base_url, timeout=timeout, retries=retries)


def query_params() -> dict[str, str]:
    params = {
        "judge": os.environ.get("RUBRICSVC_REWARD_JUDGE", "embedded"),
        "aggregation": os.environ.get("RUBRICSVC_REWARD_AGGREGATION", "rar"),
    }
    if os.environ.get("RUBRICSVC_REWARD_MASKED"):
        params["masked"] = os.environ["RUBRICSVC_REWARD_MASKED"]
    return params


def reward_func(
    queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], **kwargs: Any
) -> dict[str, Any]:
    """OpenRLHF's reward-function signature; see the module docstring."""
    import torch

    body = {"query": list(queries), "prompts": list(prompts), "labels": list(labels)}
    data = post_json(api_settings(), ROUTE, body, query_params())
    rewards = torch.tensor([float(r) for r in data["rewards"]], dtype=torch.float32)
    scores = torch.tensor([float(s) for s in data.get("scores", data["rewards"])])
    extra = {
        name: torch.tensor(values, dtype=torch.float32)
        for name, values in (data.get("extra_logs") or {}).items()
    }
    return {"rewards": rewards, "scores": scores, "extra_logs": extra}
