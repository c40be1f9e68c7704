"""The embedded judge model: the bundled GGUF converts into a working float32 transformers folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from rubricsvc.backends.embedded import (
    embedded_model_dir,
    is_prepared,
    locate_gguf,
    prepare_embedded_model,
)
from tests.requirements import prepared_model_dir, require_module

torch = require_module("torch", "transformers")
transformers = require_module("transformers", "transformers")


def test_gguf_is_found_without_importing_its_package() -> None:
    path = locate_gguf()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 50_000_000


@pytest.mark.slow
def test_prepare_converts_once(tmp_path: Path) -> None:
    target = prepare_embedded_model(tmp_path)
    assert target == embedded_model_dir(tmp_path)
    assert is_prepared(target)
    stamp = (target / "model.safetensors").stat().st_mtime_ns
    assert prepare_embedded_model(tmp_path) == target  # second call: nothing converted again
    assert (target / "model.safetensors").stat().st_mtime_ns == stamp
    config = transformers.AutoConfig.from_pretrained(target)
    assert getattr(config, "quantization_config", None) is None


@pytest.mark.model
def test_prepared_model_answers() -> None:
    """The folder `make test` prepared loads in float32 and answers a question sensibly."""
    target = prepared_model_dir()
    tokenizer = transformers.AutoTokenizer.from_pretrained(target)
    model = transformers.AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    assert model.dtype == torch.float32
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(
        chat, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    output = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(output[0][inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer
