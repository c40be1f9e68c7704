"""A tiny model of the embedded model's architecture and tokenizer, for tests that are about
something else than what the model says (a trainer's loop, batching, reproducibility).

Made on first use from the prepared SmolLM2-135M-Instruct folder (its config shrunk to two
layers and a 64-wide hidden state, its tokenizer and chat template kept) with seeded random
weights, so every machine makes the same model without a download. A forward pass takes
milliseconds; its verdicts and completions are noise, which such tests must not depend on.
"""

from __future__ import annotations

import fcntl
import shutil
from pathlib import Path

from rubricsvc.backends.embedded import embedded_model_dir
from rubricsvc.config import get_settings
from tests.requirements import prepared_model_dir

TINY_NAME = "SmolLM2-tiny-random"
TINY_JUDGE_NAME = "SmolLM2-tiny-judge"
# The verdict tokens the tiny judge's head can say (criterion-prob reads "Yes" and "No").
JUDGE_TOKENS = ("Yes", "No")
JUDGE_HEAD_SCALE = 5.0
# Shrunk where the cost is (layers, widths); the vocabulary stays so the tokenizer fits.
TINY_SHAPE = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "generation_config.json",
)


def tiny_model_dir() -> Path:
    """The tiny model's folder, made once per machine (test processes may race: a lock)."""
    return _made(TINY_NAME, judge=False)


def tiny_judge_dir() -> Path:
    """A tiny model whose head says only "Yes" or "No" (every other row of its untied output
    layer is zero, those two random and large), so that a criterion-prob verdict, which
    needs most of the probability on the two, is a noisy yes/no rather than a failure."""
    return _made(TINY_JUDGE_NAME, judge=True)


def _made(name: str, judge: bool) -> Path:
    source = prepared_model_dir()
    target = embedded_model_dir(get_settings().judge.model_dir).parent / name
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f".{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "config.json").exists():
            _make(source, target, judge)
    return target


def _make(source: Path, target: Path, judge: bool) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(source)
    for key, value in TINY_SHAPE.items():
        setattr(config, key, value)
    config.tie_word_embeddings = config.tie_word_embeddings and not judge
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if judge:
        _say_only_yes_or_no(model, source)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    for name in TOKENIZER_FILES:
        if (source / name).exists():
            shutil.copy2(source / name, partial / name)
    # config.json last: its presence is what says the folder is whole.
    (partial / "config.json").rename(partial / "config.json.tmp")
    shutil.rmtree(target, ignore_errors=True)  # a folder a killed process left half-made
    partial.rename(target)
    (target / "config.json.tmp").rename(target / "config.json")


def _say_only_yes_or_no(model: object, source: Path) -> None:
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source)
    head = model.get_output_embeddings().weight  # type: ignore[attr-defined]
    with torch.no_grad():
        rows = head.data.clone()
        head.data.zero_()
        for token in JUDGE_TOKENS:
            (token_id,) = tokenizer.encode(token, add_special_tokens=False)
            head.data[token_id] = rows[token_id] / rows[token_id].std() * JUDGE_HEAD_SCALE
