"""LoRA adapters on a judge's model: a folder that peft's ``save_pretrained`` wrote.

A judge with an adapter is its base model with the adapter merged in, so its verdicts depend
on the adapter's bytes as much as on the base's: the config hash covers the sha256 of the
adapter's config and weight files (``adapter_sha256``), never only its path, so an adapter
retrained or replaced at the same path is another judge and no cached verdict is replayed
for it. The backend merges the adapter into the base once when it loads (``merge_adapter``):
serving then costs what the base costs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rubricsvc.backends.weights_hash import kept_files_sha256
from rubricsvc.errors import ValidationFailed, missing_extra

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def adapter_files(folder: Path) -> list[Path]:
    """The files that make an adapter (its config, then its weights); a folder that is not an
    adapter is refused in one line."""
    if not folder.is_dir():
        raise ValidationFailed(
            f"adapter {folder}: no such folder (one peft's save_pretrained wrote)"
        )
    config = folder / ADAPTER_CONFIG
    weights = [folder / name for name in ADAPTER_WEIGHTS if (folder / name).is_file()]
    if not config.is_file() or not weights:
        raise ValidationFailed(
            f"adapter {folder} is not a LoRA adapter folder: it needs {ADAPTER_CONFIG} and "
            f"{' or '.join(ADAPTER_WEIGHTS)}"
        )
    return [config, *weights]


def adapter_sha256(folder: Path) -> str:
    """The sha256 over the adapter's config and weight files' names and bytes (read once per
    machine while they stay as they are: ``weights_hash``)."""
    return kept_files_sha256(adapter_files(folder))


def adapter_bytes(folder: Path) -> int:
    """What the adapter takes on disk: its config and weight files."""
    return sum(path.stat().st_size for path in adapter_files(folder))


def merge_adapter(model: Any, folder: Path) -> Any:
    """``model`` with the adapter in ``folder`` merged into its weights (in place: the caller
    gives a model of its own, never one shared with another judge)."""
    try:
        from peft import PeftModel
    except ImportError as err:
        raise missing_extra(
            err, "a judge with an adapter needs peft (the transformers extra)", "transformers"
        ) from None
    adapter_files(folder)
    with_adapter = PeftModel.from_pretrained(model, str(folder), is_trainable=False)
    return with_adapter.merge_and_unload()
