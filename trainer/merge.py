"""A policy folder from a LoRA adapter and its base: what ``rubricsvc train merge-adapter`` and
a warm start with ``lora`` (trainer/sft.py) write.

A fine-tuned policy is as large as its base (538 MB for the bundled 135M model in
float32), too large to keep in a repository; its LoRA adapter is a few MB. Keeping the adapter
and merging it into the base where the policy is needed gives the same folder, weight for
weight, on the same machine and library versions: the merged weights are the base's plus the
adapter's low-rank product, computed the same way in both places. The adapter is read, checked
and hashed as a judge's adapter is (``rubricsvc.backends.adapters``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rubricsvc.backends.adapters import adapter_sha256, merge_adapter
from rubricsvc.errors import ValidationFailed

# Written beside the merged weights: where they came from.
MERGED_FROM = "merged_from.json"


@dataclass(frozen=True)
class MergeResult:
    output: Path
    base: str
    adapter_sha256: str
    parameters: int  # in the merged policy


def save_merged(peft_model: Any, output: Path) -> None:
    """``peft_model`` with its adapter merged into the base weights, saved to ``output`` as a
    plain model folder (no peft needed to load it)."""
    peft_model.merge_and_unload().save_pretrained(str(output))


def merge_into_policy(
    adapter: Path, output: Path, base: str, threads: int | None = None
) -> MergeResult:
    """Merge the LoRA ``adapter`` into ``base`` (a model folder) and save the policy, with the
    base's tokenizer and ``merged_from.json``, to ``output``."""
    digest = adapter_sha256(adapter)  # refuses a folder that is no adapter, before any load
    if output.exists() and any(output.iterdir()):
        raise ValidationFailed(f"{output} is not empty: choose another --output")
    from trainer.training_stack import import_training_stack

    torch, transformers, _, _ = import_training_stack(threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    merged = merge_adapter(model, adapter)
    merged.save_pretrained(str(output))
    transformers.AutoTokenizer.from_pretrained(base).save_pretrained(str(output))
    record = {"adapter": str(adapter), "adapter_sha256": digest, "base": base}
    (output / MERGED_FROM).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return MergeResult(output, base, digest, sum(p.numel() for p in merged.parameters()))
