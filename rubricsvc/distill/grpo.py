"""RL on a judge: GRPO on TRL's GRPOTrainer, the judge its own policy (J1, RM-R1 style).

The policy is a criterion-prob judge with a LoRA adapter (an SFT student of ``judges
distill``). Its prompt is the chat the judge is served with for one (completion, criterion),
encoded by the backends' own ``encode_chat``; its completion is **one token**, sampled from the
judge's next-token distribution at that prompt, which is where a criterion-prob verdict is
read (P(yes) against P(no) of the first reply token; nothing after it is ever read, so a
longer completion would train tokens the served judge never uses). The reward is the verdict's
correctness against the label: 1 when the token is a "yes" token and the label says met, or a
"no" token and it says not met; 0 for the wrong verdict; ``unparseable_reward`` (at most 0, so
never better than a wrong verdict) for any other token. At temperature 1 a sample's expected
reward is the judge's probability of the right verdict, which is what GRPO then raises, group
by group (``num_generations`` samples of the same prompt, advantages relative to their mean).

Two pieces fit TRL to a one-token policy: TRL's ``rollout_func`` (experimental in TRL), and an
override of the trainer's log-probability method (private in TRL 1.16, the pinned version; a
test compares the override with TRL's own, so an upgrade that changes it fails there):

- ``VerdictSampler`` is the trainer's ``rollout_func``: it encodes each prompt as the judge's
  backend does (TRL's own tokenization would parse control tokens written in judged text,
  which serving never does), runs one forward pass per distinct prompt, and samples the
  group's tokens from that one distribution.
- ``VerdictGRPOTrainer`` computes the one completion token's log-probability from one forward
  pass per distinct prompt instead of one per sample: with a single completion token every
  sample of a group has the same input up to the token scored, so the group's ``G`` forward
  and backward passes are one. The result is TRL's, at 1/G of the cost.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rubricsvc.backends.base import BackendError
from rubricsvc.backends.tokens import ChoiceTokens, encode_chat
from rubricsvc.backends.types import Chat
from rubricsvc.distill.examples import Target
from rubricsvc.distill.training import (
    Progress,
    TrainingResult,
    fitting,
    load_tokenizer,
    log_callback,
    schedule_arguments,
    train_and_save,
    training_imports,
)
from rubricsvc.errors import ValidationFailed, missing_extra
from rubricsvc.judging import verdicts as v

REWARD_NAME = "verdict_correct"  # the reward's name in TRL's logs (rewards/verdict_correct/...)


class ReinforceSettings(BaseModel):
    """How a judge is trained by RL and gated (``judges reinforce --config FILE``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    epochs: float = Field(default=1.0, gt=0)
    max_steps: int = Field(default=-1, description="optimizer steps; -1: as many as epochs make")
    learning_rate: float = Field(default=5e-5, gt=0)
    # Samples of one prompt's verdict: the group GRPO's advantages are relative to.
    num_generations: int = Field(default=8, ge=2)
    # Labels (prompts, so groups) per optimizer step: num_generations x this many samples.
    labels_per_step: int = Field(default=4, ge=1)
    # 1: sampling from the judge's own verdict distribution, so a sample's expected reward is
    # its probability of the right verdict.
    temperature: float = Field(default=1.0, gt=0)
    # The KL penalty towards the starting (SFT) judge; 0: none, and no reference pass.
    beta: float = Field(default=0.0, ge=0)
    # A token that is no verdict: at most a wrong verdict's 0, so never worth saying.
    unparseable_reward: float = Field(default=0.0, le=0)
    warmup_ratio: float = Field(default=0.0, ge=0, lt=1)
    lr_scheduler: str = "constant"
    weight_decay: float = Field(default=0.0, ge=0)
    # Training prompts longer than this many tokens are left out (counted in the report).
    max_length: int = Field(default=1024, ge=16)
    seed: int = 0  # the data order and the sampled verdicts (the split is the SFT judge's)
    save_steps: int = Field(default=50, ge=1)
    logging_steps: int = Field(default=5, ge=1)
    threads: int | None = Field(default=None, ge=1)
    # The promotion gate, against the judge RL started from (docs/distillation.md).
    min_agreement: float = Field(default=0.7, ge=0, le=1)
    min_gain: float = Field(default=0.0, ge=-1, le=1)
    min_coverage: float = Field(default=0.95, ge=0, le=1)
    within_criteria: bool = False


@dataclass(frozen=True)
class VerdictPrompt:
    """One training prompt: the label it is rewarded against, the chat the judge is served
    with for it, and that chat's token ids."""

    target: Target
    chat: Chat
    input_ids: list[int]


@dataclass(frozen=True)
class VerdictTokens:
    """The token ids a criterion-prob verdict reads as yes and as no (the mode's verdict
    words, each one token, as the backend maps them)."""

    yes: frozenset[int]
    no: frozenset[int]

    @classmethod
    def of(cls, tokenizer: Any) -> VerdictTokens:
        try:
            choices = ChoiceTokens(tokenizer, "the judge's model")
            return cls(
                frozenset(choices.id_of(word) for word in v.YES_TOKENS),
                frozenset(choices.id_of(word) for word in v.NO_TOKENS),
            )
        except BackendError as err:  # a verdict word of several tokens
            raise ValidationFailed(f"RL on a criterion-prob judge: {err}") from None

    def verdict(self, completion_ids: Sequence[int]) -> bool | None:
        """Met (True), not met (False), or None: the first token is no verdict."""
        if not completion_ids:
            return None
        first = int(completion_ids[0])
        if first in self.yes:
            return True
        if first in self.no:
            return False
        return None


class VerdictReward:
    """TRL reward function: 1 for the verdict the label gives (met: the label is 0.5 or more,
    as the gate counts agreement), 0 for the other, ``unparseable`` for no verdict."""

    __name__ = REWARD_NAME

    def __init__(self, tokens: VerdictTokens, unparseable: float = 0.0) -> None:
        if unparseable > 0:
            raise ValueError("an unparseable verdict is worth at most a wrong one's 0")
        self.tokens = tokens
        self.unparseable = unparseable

    def reward(self, completion_ids: Sequence[int], label: float) -> float:
        verdict = self.tokens.verdict(completion_ids)
        if verdict is None:
            return self.unparseable
        return 1.0 if verdict == (label >= 0.5) else 0.0

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]],
        label: Sequence[float],
        log_metric: Any = None,
        **_: Any,
    ) -> list[float]:
        rewards = [
            self.reward(ids, value) for ids, value in zip(completion_ids, label, strict=True)
        ]
        if log_metric is not None and completion_ids:
            verdicts = [self.tokens.verdict(ids) for ids in completion_ids]
            log_metric("verdicts/yes", sum(x is True for x in verdicts) / len(verdicts))
            log_metric("verdicts/unparseable", sum(x is None for x in verdicts) / len(verdicts))
        return rewards


class VerdictSampler:
    """TRL ``rollout_func``: each prompt encoded as the judge's backend encodes it, one forward
    pass per distinct prompt, and one verdict token sampled per entry (TRL's sampler repeats
    each prompt ``num_generations`` times). The draws are seeded by the run's seed and the
    optimizer step, so a resumed run samples what the uninterrupted one would."""

    def __init__(self, tokenizer: Any, temperature: float, seed: int, torch: Any) -> None:
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.seed = seed
        self.torch = torch
        self._encoded: dict[str, list[int]] = {}

    def encode(self, chat: Chat) -> list[int]:
        key = json.dumps(chat, sort_keys=True)
        if key not in self._encoded:
            self._encoded[key] = encode_chat(self.tokenizer, chat)
        return self._encoded[key]

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        torch = self.torch
        encoded = [self.encode(chat) for chat in prompts]
        wanted: dict[tuple[int, ...], int] = {}
        for ids in encoded:
            wanted[tuple(ids)] = wanted.get(tuple(ids), 0) + 1
        model = trainer.model
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + trainer.state.global_step)
        drawn: dict[tuple[int, ...], list[tuple[int, float]]] = {}
        was_training = model.training
        model.eval()  # no LoRA dropout while sampling: the verdicts of the judge as served
        try:
            with torch.no_grad():
                for prompt, count in wanted.items():
                    inputs = torch.tensor([list(prompt)], device=trainer.accelerator.device)
                    logits = model(input_ids=inputs, logits_to_keep=1, use_cache=False).logits
                    log_probs = torch.log_softmax(logits[0, -1].float() / self.temperature, -1)
                    tokens = torch.multinomial(
                        log_probs.exp().cpu(), count, replacement=True, generator=generator
                    )
                    drawn[prompt] = [(int(t), float(log_probs[int(t)])) for t in tokens]
        finally:
            model.train(was_training)
        completions, logprobs = [], []
        for ids in encoded:
            token, logprob = drawn[tuple(ids)].pop()
            completions.append([token])
            logprobs.append([logprob])
        return {"prompt_ids": encoded, "completion_ids": completions, "logprobs": logprobs}


def shared_prompt_logps(
    model: Any,
    input_ids: Any,
    attention_mask: Any,
    temperature: float,
    compute_entropy: bool,
    torch: Any,
) -> tuple[Any, Any]:
    """The log-probability (and entropy) of each row's last token, one completion token per
    row, from one forward pass per distinct prefix: a group's samples share theirs. Gradients
    flow back through the shared pass to every sample that used it."""
    width = input_ids.size(1) - 1
    prefixes = torch.cat([input_ids[:, :-1], attention_mask[:, :-1]], dim=1)
    unique, inverse = torch.unique(prefixes, dim=0, return_inverse=True)
    outputs = model(
        input_ids=unique[:, :width],
        attention_mask=unique[:, width:],
        logits_to_keep=1,
        use_cache=False,
    )
    log_probs = torch.log_softmax(outputs.logits[:, -1, :].float() / temperature, dim=-1)
    rows = log_probs[inverse]
    logps = rows.gather(1, input_ids[:, -1:])
    entropy = -(rows.exp() * rows).sum(dim=-1, keepdim=True) if compute_entropy else None
    return logps, entropy


def verdict_trainer_class(base: Any, torch: Any) -> Any:
    """GRPOTrainer whose one-token log-probabilities come from one pass per distinct prompt
    (``shared_prompt_logps``); anything else (longer completions, images, auxiliary losses)
    goes to TRL's own computation."""

    class VerdictGRPOTrainer(base):  # type: ignore[misc]
        def _get_per_token_logps_and_entropies(
            self,
            model: Any,
            input_ids: Any,
            attention_mask: Any,
            logits_to_keep: int,
            batch_size: int | None = None,
            compute_entropy: bool = False,
            compute_aux_loss: bool = False,
            **multimodal: Any,
        ) -> tuple[Any, Any, Any]:
            if (
                logits_to_keep != 1
                or compute_aux_loss
                or any(value is not None for value in multimodal.values())
            ):
                theirs: tuple[Any, Any, Any] = super()._get_per_token_logps_and_entropies(
                    model,
                    input_ids,
                    attention_mask,
                    logits_to_keep,
                    batch_size=batch_size,
                    compute_entropy=compute_entropy,
                    compute_aux_loss=compute_aux_loss,
                    **multimodal,
                )
                return theirs
            with self.accelerator.autocast():
                logps, entropy = shared_prompt_logps(
                    model, input_ids, attention_mask, self.temperature, compute_entropy, torch
                )
            return logps, entropy, None

    return VerdictGRPOTrainer


def train_reinforced(
    base: Path,
    adapter: Path,
    prompts: Sequence[VerdictPrompt],
    run_dir: Path,
    settings: ReinforceSettings,
    progress: Progress | None = None,
) -> TrainingResult:
    """GRPO on ``base`` with ``adapter`` (trained further; the base stays frozen) over
    ``prompts``; checkpoints in ``run_dir/checkpoints`` (a re-run resumes from the last), the
    adapter in ``run_dir/model``, TRL's log (rewards, their spread, the loss) in
    ``metrics.jsonl``."""
    torch, transformers, trl = training_imports()
    try:
        import peft
        from datasets import Dataset
    except ImportError as err:
        raise missing_extra(
            err, "RL on a judge needs peft (the trainer extra)", "trainer"
        ) from None
    if settings.threads:
        torch.set_num_threads(settings.threads)
    kept = fitting(prompts, settings.max_length, "training prompt")
    tokenizer = load_tokenizer(base)
    tokens = VerdictTokens.of(tokenizer)
    transformers.utils.logging.disable_progress_bar()
    transformers.set_seed(settings.seed)
    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model = peft.PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
    dataset = Dataset.from_list([{"prompt": p.chat, "label": p.target.value} for p in kept])
    on_gpu = torch.cuda.is_available()
    checkpoints = run_dir / "checkpoints"
    config = trl.GRPOConfig(
        **schedule_arguments(settings, checkpoints),
        num_generations=settings.num_generations,
        max_completion_length=1,  # the verdict token: all a criterion-prob judge reads
        temperature=settings.temperature,
        beta=settings.beta,
        # Each optimizer step: labels_per_step groups, all in one micro-batch, so a group's
        # samples are together where shared_prompt_logps looks for them.
        per_device_train_batch_size=settings.num_generations * settings.labels_per_step,
        gradient_accumulation_steps=1,
        log_completions=False,
        use_cpu=not on_gpu,
        # Recomputation saves GPU memory; on a CPU it only slows the backward pass.
        gradient_checkpointing=on_gpu,
    )
    log_path = run_dir / "metrics.jsonl"
    # TRL warns that rollout_func is experimental; the trainer's version is pinned (pyproject).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*rollout_func.*experimental")
        trainer = verdict_trainer_class(trl.GRPOTrainer, torch)(
            model=model,
            reward_funcs=[VerdictReward(tokens, settings.unparseable_reward)],
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[log_callback(log_path, progress, transformers)],
            rollout_func=VerdictSampler(tokenizer, settings.temperature, settings.seed, torch),
        )
    return train_and_save(
        trainer,
        tokenizer,
        run_dir,
        transformers,
        len(kept),
        len(prompts) - len(kept),
        adapter=True,
    )
