"""A judge served as its base model with a LoRA adapter merged in: written here with peft on the
tiny judge (tests/tiny_model.py), its LoRA B weights set non-zero so each adapter moves the
verdicts, it scores through the transformers backend with its own verdicts and its own config
hash, and merging it leaves the base that other judges serve as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from rubricsvc.backends import backend_from_spec
from rubricsvc.backends.types import ChoiceRequest, ChoiceResult
from rubricsvc.judging.config import JudgeSpec
from tests.requirements import require_module
from tests.tiny_model import tiny_judge_dir

CHAT = [
    {"role": "system", "content": "Answer with one word: Yes or No."},
    {"role": "user", "content": "Does the response name a doctor? Response: See Dr Lee."},
]


def write_adapter(base: Path, folder: Path, seed: int) -> Path:
    """A LoRA adapter on ``base`` whose B weights are seeded noise (peft starts them at zero,
    an adapter that changes nothing). On the attention's queries and values only: the tiny
    judge's verdicts rest on a constant in the residual stream (tests/tiny_model.py) that an
    adapter on the MLP's output would overwrite, leaving every P(Yes) near 0 or 1."""
    require_module("peft", "transformers")
    import peft
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
    )
    with_adapter = peft.get_peft_model(model, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in with_adapter.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)
    with_adapter.save_pretrained(folder)
    return folder


def p_yes(spec: JudgeSpec) -> float:
    backend = backend_from_spec(spec)
    try:
        (result,) = backend.choice_probs([ChoiceRequest(CHAT, ("Yes", "No"))])
    finally:
        backend.close()
    assert isinstance(result, ChoiceResult), result
    return result.probs["Yes"]


@pytest.mark.model
def test_a_lora_judge_scores_with_its_own_verdicts_and_hash(tmp_path: Path) -> None:
    base_dir = tiny_judge_dir()
    folder = write_adapter(base_dir, tmp_path / "adapter", seed=1)
    assert {p.name for p in folder.iterdir()} >= {
        "adapter_config.json",
        "adapter_model.safetensors",
    }
    base = JudgeSpec(name="tiny", model=str(base_dir))
    first = JudgeSpec(name="tiny-lora", model=str(base_dir), adapter=str(folder))
    assert first.config_hash() != base.config_hash()

    from_base = p_yes(base)
    from_first = p_yes(first)
    assert from_first != pytest.approx(from_base, abs=1e-4)
    # The merge wrote into a model of the adapter judge's own: the base serves as before (the
    # test process's shared loads of the base, tests/model_loads.py, are untouched).
    assert p_yes(base) == pytest.approx(from_base, abs=1e-7)

    # Other weights at the same path: another config hash, other verdicts.
    write_adapter(base_dir, folder, seed=2)
    second = JudgeSpec(name="tiny-lora", model=str(base_dir), adapter=str(folder))
    assert second.config_hash() not in {first.config_hash(), base.config_hash()}
    assert p_yes(second) != pytest.approx(from_first, abs=1e-4)
