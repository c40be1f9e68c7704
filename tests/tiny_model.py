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
from typing import Any

from rubricsvc.backends.embedded import embedded_model_dir
from rubricsvc.config import get_settings
from rubricsvc.judging.config import JudgeSpec
from tests.requirements import prepared_model_dir

TINY_NAME = "SmolLM2-tiny-random-v2"
# The recipe's version is in the name: a machine that made an older recipe makes this one anew.
TINY_JUDGE_NAME = "SmolLM2-tiny-judge-v2"
# The verdict tokens the tiny judge's head can say, with how far each moves along the direction
# that tells texts apart: criterion-prob reads "Yes" and "No", a criterion with levels the
# digits.
VERDICT_COEFFICIENTS = {"Yes": 0.5, "No": -0.5, **{str(d): (d - 4.5) / 9 for d in range(10)}}
# The judge's constant unit: hidden dimension 0 holds CONSTANT_UNIT at every position (the
# embeddings put it there; no layer reads or writes it), and every verdict row weighs it by
# VERDICT_BIAS, so the verdict tokens together always carry nearly all the probability. What
# decides between them is the direction in which calibration prompts' last states differ,
# scaled to a logit spread of VERDICT_SPREAD: P(Yes) varies with the judged text and the
# criterion, mostly between 0.2 and 0.8, never pinned to 0 or 1.
CONSTANT_UNIT = 1.0
# The policy's chance of ending its reply (<|im_end|>) at each token, about: a random model's
# next token is nearly uniform over 49,152, so it would never end, and a trainer that masks
# truncated completions (the default) would learn from none of them.
END_PROBABILITY = 0.1
VERDICT_BIAS = 2.5
VERDICT_SPREAD = 1.5
# Shrunk where the cost is (layers, widths); the vocabulary stays so the tokenizer fits, and so
# does the head size (64), one vLLM's CPU attention supports.
TINY_SHAPE = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
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
    """A tiny model whose head says only "Yes", "No" or a digit (every other row of its untied
    output layer is zero), so that a criterion-prob verdict, which needs most of the probability
    on Yes and No (or on a criterion's levels), is a graded, input-dependent verdict rather than
    a failure: rewards that differ between the completions of a group, as a trainer's loop
    needs. It cannot write text: modes that parse a generated reply need the embedded model."""
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
    # Untied: each model's head is set apart from its embeddings below.
    config.tie_word_embeddings = False
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    _add_constant_unit(model)
    if judge:
        _say_only_yes_or_no(model, source)
    else:
        _end_replies_sometimes(model, source)
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


# What the verdict rows are calibrated on: criterion-prob prompts (the platform's own template)
# over these prompts, responses and criteria.
CALIBRATION_PROMPTS = (
    "How can I sleep better?",
    "Say hello to a friend, briefly.",
    "Describe a storm in a few words.",
    "Explain recursion to a beginner.",
)
CALIBRATION_CRITERIA = ("Mentions the wind", "Gives a concrete example", "Is polite")
CALIBRATION_TEXTS = (
    "The cat sat on the mat.",
    "Sleep eight hours, keep a regular schedule and avoid caffeine after noon.",
    "hello friend, how are you?",
    "Rain and wind battered the coast all night.",
    "asdf qwer zxcv uiop",
    "I cannot help with that request.",
    "Go for a run every morning to reduce stress and clear your head.",
    "Recursion is a function calling itself on a smaller problem.",
    "1. Drink water 2. Stretch 3. Rest",
    "The report cites three studies [1] [2] [3] on the topic.",
    "Yes yes yes yes yes",
    "Autumn leaves fall, quiet wind, a cold moon rises.",
)


def _add_constant_unit(model: Any) -> None:
    """Dimension 0 of the residual stream made a constant that no layer reads (its norms'
    weight 0) or writes (the rows of their output projections 0): the head can then give a
    token a logit that holds at every position, whatever the text."""
    import torch

    inner = model.model
    with torch.no_grad():
        inner.embed_tokens.weight[:, 0] = CONSTANT_UNIT
        for layer in inner.layers:
            layer.input_layernorm.weight[0] = 0.0
            layer.post_attention_layernorm.weight[0] = 0.0
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        head = model.get_output_embeddings().weight
        head.copy_(inner.embed_tokens.weight)
        head[:, 0] = 0.0


def _end_replies_sometimes(model: Any, source: Path) -> None:
    """<|im_end|> given the logit at which it takes about END_PROBABILITY of each step."""
    import math

    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source)
    inner = model.model
    head = model.get_output_embeddings().weight
    with torch.no_grad():
        chat = [{"role": "user", "content": "Say hello to a friend, briefly."}]
        encoded = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_dict=True)
        hidden = inner(input_ids=torch.tensor([list(encoded["input_ids"])])).last_hidden_state[0]
        others = hidden[:, 1:] @ head[:, 1:].T  # every token's logit, the constant left out
        rest = torch.logsumexp(others, dim=-1).mean()
        wanted = float(rest) + math.log(END_PROBABILITY / (1 - END_PROBABILITY))
        head[tokenizer.eos_token_id, 0] = wanted / float(hidden[:, 0].mean())


def _calibration_prompts(tokenizer: Any) -> list[list[int]]:
    from rubricsvc.judging.templates import load_template

    template = load_template("criterion_prob")
    prompts = []
    for prompt in CALIBRATION_PROMPTS:
        for text in CALIBRATION_TEXTS:
            for criterion in CALIBRATION_CRITERIA:
                chat = template.render(
                    conversation=f"user: {prompt}",
                    reference="",
                    response=text,
                    question=f"Criterion: {criterion}. Is it met? Answer with one word: Yes or No.",
                )
                encoded = tokenizer.apply_chat_template(
                    chat, add_generation_prompt=True, return_dict=True
                )
                prompts.append(list(encoded["input_ids"]))
    return prompts


def _say_only_yes_or_no(model: object, source: Path) -> None:
    """Only Yes, No and the digits carry probability; which of them depends on the judged text.

    A random model's last hidden state is nearly the same whatever the text (the chat
    template's closing tokens dominate it), so random verdict rows would give one verdict to
    every text. Instead: a constant unit in the residual stream carries the pair's shared
    logit, and the rows' difference lies along the direction in which the calibration texts'
    last states differ, centred on their mean and scaled to a logit spread of VERDICT_SPREAD."""
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source)
    inner = model.model  # type: ignore[attr-defined]
    head = model.get_output_embeddings().weight  # type: ignore[attr-defined]
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        states = [
            inner(input_ids=torch.tensor([ids])).last_hidden_state[0, -1]
            for ids in _calibration_prompts(tokenizer)
        ]
        hidden = torch.stack(states)
        centred = hidden - hidden.mean(dim=0)
        centred[:, 0] = 0.0
        # A random mix of the texts' differences: a direction along which they spread.
        direction = centred.T @ torch.randn(len(states), generator=generator)
        spread = (centred @ direction).std()
        direction = direction / spread * VERDICT_SPREAD
        shared_unit = hidden[:, 0].mean()
        offset = float(hidden.mean(dim=0) @ direction) / float(shared_unit)
        head.zero_()
        # Each verdict token's logit moves along the direction by its own coefficient: Yes up,
        # No down, the levels in their order (a higher level for what Yes favours too).
        # Centred: the mean calibration text is even between Yes and No.
        for token, coefficient in VERDICT_COEFFICIENTS.items():
            (token_id,) = tokenizer.encode(token, add_special_tokens=False)
            row = direction * coefficient
            row[0] = VERDICT_BIAS - offset * coefficient
            head[token_id] = row


def tiny_judge_spec(name: str = "tiny") -> JudgeSpec:
    """The tiny judge as judge ``name``: the transformers backend on its folder."""
    return JudgeSpec(name=name, backend="transformers", model=str(tiny_judge_dir()))


def add_tiny_judge(database_url: str, folder: Path, name: str = "tiny") -> str:
    """Register the tiny judge as judge ``name`` with ``judges add``; return the name."""
    from tests.helpers import add_judge_file

    entry = tiny_judge_spec(name).model_dump(mode="json", include={"name", "backend", "model"})
    return add_judge_file(database_url, folder, entry)


if __name__ == "__main__":
    # `make test` makes both before the suite starts (tests would otherwise make them on first use).
    for made in (tiny_model_dir(), tiny_judge_dir()):
        print(f"Tiny test model ready: {made}")
