"""How verl's reward loop finds and calls a custom reward function, for tests of the verl
adapter against ``rubricsvc serve``.

verl's own ``load_extern_object`` is loaded from its installed file
(``verl/utils/import_utils.py``, which imports nothing of verl); ``make setup`` installs verl's
code without its dependencies (torch builds, ray, tensordict: a GPU training stack). The two
pieces below import verl's ``DataProto`` (and so that stack) where they live, so they are
copied from verl 0.9.1:

- ``_call_with_kwargs_async`` and ``get_custom_reward_fn``: ``verl/trainer/ppo/reward.py``,
  Copyright 2025 Individual Contributor: Thibaut Barroyer, Apache License 2.0
  (http://www.apache.org/licenses/LICENSE-2.0); the config is a plain dict here, not
  OmegaConf's ``DictConfig`` (the same ``.get`` calls).
- ``call_as_naive_reward_manager``: the call in
  ``verl/experimental/reward_loop/reward_manager/naive.py``, ``NaiveRewardManager.run_single``
  (Copyright the verl authors, Apache License 2.0), from the decoded response on.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

VERL = "verl==0.9.1"  # as the Makefile installs it, without its dependencies


def verl_import_utils() -> ModuleType | None:
    """verl's ``verl/utils/import_utils.py``, loaded from its file (None: verl not installed)."""
    found = importlib.util.find_spec("verl")
    if found is None or not found.submodule_search_locations:
        return None
    path = Path(next(iter(found.submodule_search_locations))) / "utils" / "import_utils.py"
    spec = importlib.util.spec_from_file_location("verl_import_utils", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("verl_import_utils", module)
    spec.loader.exec_module(module)
    return module


# --- copied from verl 0.9.1, verl/trainer/ppo/reward.py (Apache License 2.0) ---------------


def _call_with_kwargs(raw_fn, extra_kwargs, *args, **kwargs):  # type: ignore[no-untyped-def]
    merged_kwargs = {**kwargs, **extra_kwargs}
    return raw_fn(*args, **merged_kwargs)


async def _call_with_kwargs_async(raw_fn, extra_kwargs, *args, **kwargs):  # type: ignore[no-untyped-def]
    merged_kwargs = {**kwargs, **extra_kwargs}
    return await raw_fn(*args, **merged_kwargs)


def get_custom_reward_fn(config: dict[str, Any], load_extern_object: Callable[..., Any]) -> Any:
    reward_fn_config = config["reward"].get("custom_reward_function") or {}
    module_path = reward_fn_config.get("path")
    if not module_path:
        return None

    fn_name = reward_fn_config.get("name")
    assert fn_name is not None

    raw_fn = load_extern_object(module_path=module_path, object_name=fn_name)

    reward_kwargs = dict(reward_fn_config.get("reward_kwargs", {}))
    if not inspect.iscoroutinefunction(raw_fn):
        return partial(_call_with_kwargs, raw_fn, reward_kwargs)
    else:
        return partial(_call_with_kwargs_async, raw_fn, reward_kwargs)


# --- NaiveRewardManager.run_single's call (verl 0.9.1, naive.py; Apache License 2.0) ----------


async def call_as_naive_reward_manager(
    compute_score: Any,
    *,
    data_source: str,
    response_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any],
    reward_router_address: str | None = None,
    reward_model_tokenizer: Any = None,
) -> dict[str, Any]:
    extra_reward_kwargs = (
        {
            "reward_router_address": reward_router_address,
            "reward_model_tokenizer": reward_model_tokenizer,
        }
        if reward_router_address is not None
        else {}
    )
    result = await compute_score(
        data_source=data_source,
        solution_str=response_str,
        ground_truth=ground_truth,
        extra_info=extra_info,
        **extra_reward_kwargs,
    )
    reward_extra_info = {}
    if isinstance(result, dict):
        score = result["score"]
        for key, value in result.items():
            reward_extra_info[key] = value
    else:
        score = result
        reward_extra_info["acc"] = score
    return {"reward_score": score, "reward_extra_info": reward_extra_info}
