"""GRPO on TRL's GRPOTrainer with rubric rewards: the launcher behind ``rubricsvc train``.

TRL's trainer is configured, not copied: this module turns a ``TrainConfig`` into TRL's
``GRPOConfig``, a prompt dataset read from the platform, the rubric reward and the run's
callbacks, then calls ``GRPOTrainer.train``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from rubricsvc.errors import NotFoundError
from rubricsvc.models import Prompt
from trainer.audit import audit_reward_judge
from trainer.config import TrainConfig, load_configured_plugins
from trainer.environment import describe_environment
from trainer.monitors import GoldMonitor, SaturationTracker
from trainer.recording import RecordingReward
from trainer.rewards import PROMPT_ID_COLUMN, RandomControlReward, RubricReward
from trainer.rundir import EVOLUTION_HISTORY, RunDirectory
from trainer.scorers import (
    closed_with_the_run,
    judge_loads,
    make_scorer,
    release_provider,
    shared_provider,
)
from trainer.training_stack import import_training_stack

if TYPE_CHECKING:
    from trainer.environments.held_out import EnvironmentAnswers
    from trainer.evolution import RubricEvolution
    from trainer.sft_config import SftConfig

log = logging.getLogger(__name__)

# Why each default is what it is: printed and logged at the start of every run.
DEFAULT_REASONS = {
    "beta": "KL coefficient; 0 = no KL term, no reference model",
    "mask_truncated_completions": "overlong filtering: truncated completions left out of the loss",
    "loss_type": "token-level loss over the active tokens of the batch (no length bias)",
    "epsilon": "lower clip",
    "epsilon_high": "clip-higher: a wider upper clip keeps exploration",
    "scale_rewards": "advantages normalized within each prompt's group",
    "num_generations": "completions per prompt (the group)",
}


def train_keeping_history(trainer: Any, evolution: RubricEvolution | None, history: Path) -> None:
    """``trainer.train()``, then, with an evolving reward (``evolution``: its
    ``RubricEvolution``, else None), the run's evolution history written to ``history`` and
    the evolution's resources released. A run that fails still leaves what its rubrics grew
    until then; a failure to write that is logged, never raised over the training error."""
    try:
        trainer.train()
    except BaseException:
        if evolution is not None:
            try:
                evolution.write_history(history)
            except Exception:
                log.exception("the failed run's evolution history could not be written")
        raise
    else:
        if evolution is not None:
            evolution.write_history(history)
    finally:
        if evolution is not None:
            evolution.close()


@dataclass
class TrainResult:
    run_dir: Path
    trainer: Any  # trl.GRPOTrainer
    steps: int


def policy_path(config: TrainConfig | SftConfig) -> str:
    """The policy's model folder: the config's, else the embedded model's."""
    return policy_folder(config.policy)


def policy_folder(policy: str | None) -> str:
    """``policy`` (a model folder), else the embedded model's folder."""
    if policy:
        return policy
    from rubricsvc.backends.embedded import embedded_model_dir
    from rubricsvc.config import get_settings

    return str(embedded_model_dir(get_settings().judge.model_dir))


def load_prompts(database_url: str | None, external_ids: list[str]) -> list[list[dict[str, Any]]]:
    """The chat messages of each prompt, in order; NotFoundError names a missing one."""
    from rubricsvc.config import get_settings
    from rubricsvc.db import make_engine, session_scope

    engine = make_engine(database_url or get_settings().db.url)
    try:
        with session_scope(engine) as session:
            rows = session.scalars(select(Prompt).where(Prompt.external_id.in_(external_ids)))
            found = {p.external_id: list(p.messages) for p in rows}
    finally:
        engine.dispose()
    missing = [pid for pid in external_ids if pid not in found]
    if missing:
        raise NotFoundError(f"no prompt with external id {missing[0]!r}")
    return [found[pid] for pid in external_ids]


def grpo_arguments(config: TrainConfig, output_dir: Path) -> dict[str, Any]:
    """The keyword arguments of TRL's GRPOConfig for this run."""
    import torch

    g = config.grpo
    on_gpu = torch.cuda.is_available()
    return {
        "output_dir": str(output_dir),
        "beta": g.beta,
        "mask_truncated_completions": g.mask_truncated_completions,
        "loss_type": g.loss_type,
        "epsilon": g.epsilon,
        "epsilon_high": g.epsilon_high,
        "scale_rewards": g.scale_rewards,
        "num_generations": g.num_generations,
        "max_completion_length": g.max_completion_length,
        "temperature": g.temperature,
        "learning_rate": g.learning_rate,
        "lr_scheduler_type": g.lr_scheduler_type,
        "per_device_train_batch_size": g.per_device_train_batch_size,
        "gradient_accumulation_steps": g.gradient_accumulation_steps,
        "num_iterations": g.num_iterations,
        "max_steps": g.max_steps,
        "logging_steps": g.logging_steps,
        "seed": g.seed,
        "data_seed": g.seed,
        "report_to": [],  # the run directory is the record; no tracker is assumed
        "save_strategy": "no",
        "log_completions": False,  # samples.jsonl keeps them
        "use_cpu": not on_gpu,
        # bfloat16 on a GPU that has it (TRL's default); float32 on CPU, where the bundled
        # model degenerates in bfloat16 and a CPU without bf16 instructions emulates it.
        "bf16": on_gpu and torch.cuda.is_bf16_supported(),
        # Recomputing activations in the backward pass trades compute for GPU memory (TRL's
        # default); on CPU, memory is not what runs out, so the recomputation only slows it.
        "gradient_checkpointing": on_gpu,
        "disable_tqdm": True,
    }


def agent_arguments(config: TrainConfig) -> dict[str, Any]:
    """GRPOConfig's arguments for a run in a tool environment (none without one)."""
    if config.environment is None:
        return {}
    turns = config.agent.max_tool_turns
    if turns is None:
        budget = config.agent.options.get("tool_budget")
        turns = int(budget) + 1 if isinstance(budget, int) else None
    return {} if turns is None else {"max_tool_calling_iterations": turns}


def describe_defaults(config: TrainConfig) -> list[str]:
    """One line per GRPO setting that shapes the objective, with its reason."""
    values = config.grpo.model_dump()
    lines = [f"{name}={values[name]!r} ({why})" for name, why in DEFAULT_REASONS.items()]
    if config.random_rewards:
        lines.append("random_rewards=True (control run: uniform random rewards)")
    if config.environment is not None:
        weights = config.agent.component_weights().model_dump()
        lines.append(f"environment={config.environment!r} (reward weights {weights})")
    return lines


def run_callback(config: TrainConfig, run: RunDirectory) -> Any:
    """The run's callback: metrics, saturation and, when configured, the gold monitor."""
    from trainer.callbacks import HeldOut, RunCallback

    gold = config.monitors.gold
    saturation = SaturationTracker(
        config.monitors.saturation_threshold, config.monitors.saturation_steps
    )
    if gold is None:
        return RunCallback(run, saturation)
    monitor = GoldMonitor(
        make_scorer(config.reward),
        make_scorer(gold.scorer),
        gold.window,
        gold.min_slope,
        alpha=gold.alpha,
        looks=config.grpo.max_steps // gold.every,
    )
    held_out = HeldOut(gold.prompts, load_prompts(gold.scorer.database_url, gold.prompts))
    max_new_tokens = gold.max_new_tokens or config.grpo.max_completion_length
    return RunCallback(
        run,
        saturation,
        monitor,
        held_out,
        gold.every,
        max_new_tokens,
        environment=held_out_environment(config),
    )


def held_out_environment(config: TrainConfig) -> EnvironmentAnswers | None:
    """In a tool environment, how the gold monitor answers its held-out prompts: through the
    environment, with the run's options and tool-turn limit (None: single-turn answers)."""
    if config.environment is None:
        return None
    import trainer.environments  # noqa: F401  (registers the built-in environments)
    from trainer.environments.held_out import EnvironmentAnswers

    turns = agent_arguments(config).get("max_tool_calling_iterations")
    return EnvironmentAnswers(config.environment, config.agent.options, turns)


def train(config: TrainConfig, say: Callable[[str], None] = log.info) -> TrainResult:
    """Run GRPO for ``config``; everything it keeps is in ``config.run_dir``."""
    load_configured_plugins()  # the judges' backends and modes may be a plugin's
    torch, _, trl, Dataset = import_training_stack(config.threads)
    messages = load_prompts(config.reward.database_url, config.prompts)
    # Held for the run: the audit, the reward, the monitors and the gold scorer in this
    # process share its judges, each model (and device and dtype) loaded once.
    held = shared_provider(config.reward, None)
    try:
        with closed_with_the_run():
            try:
                return _train(
                    config, say, messages, torch, Dataset, trl.GRPOConfig, trl.GRPOTrainer
                )
            finally:
                say(f"judge models loaded in this process: {judge_loads()}")
    finally:
        release_provider(held)


def reward_function(config: TrainConfig) -> RubricReward:
    """The run's reward: a rollout's (trainer/agent_reward.py) in a tool environment, else the
    rubric reward of a single-turn answer."""
    if config.environment is None:
        return RubricReward(config.reward, evolution_run=config.name)
    import trainer.environments  # noqa: F401  (registers the built-in environments)
    from trainer.agent_reward import AgentReward

    return AgentReward(config.reward, config.agent, config.environment)


def environment_arguments(config: TrainConfig) -> dict[str, Any]:
    """GRPOTrainer's environment and tokenizer for a run in a tool environment: one
    environment instance per rollout, and the policy's tokenizer with a tool-call format
    (trainer/environments/chat_template.py) where its own template has none."""
    if config.environment is None:
        return {}
    from transformers import AutoTokenizer

    from rubricsvc.environments import find_environment
    from trainer.environments.chat_template import with_tool_format

    environment = find_environment(config.environment)
    tokenizer = with_tool_format(AutoTokenizer.from_pretrained(policy_path(config)))
    return {
        "environment_factory": environment.factory(config.agent.options),
        "processing_class": tokenizer,
    }


def _train(
    config: TrainConfig,
    say: Callable[[str], None],
    messages: list[Any],
    torch: Any,
    Dataset: Any,  # the classes, imported by the caller
    GRPOConfig: Any,
    GRPOTrainer: Any,
) -> TrainResult:
    audit = audit_reward_judge(config, say) if config.audit else None
    dataset = Dataset.from_list(
        [
            {"prompt": m, PROMPT_ID_COLUMN: pid}
            for pid, m in zip(config.prompts, messages, strict=True)
        ]
    )
    rubric = reward_function(config)
    inner = RandomControlReward(rubric, config.grpo.seed) if config.random_rewards else rubric

    from trainer.refresh import check_refresh, judge_refresh  # transformers: imported lazily

    check_refresh(config)
    # Made once the training prompts are found, so a typo in them leaves no run behind.
    run = RunDirectory(config.run_dir)
    callback = run_callback(config, run)
    gold = config.monitors.gold
    reward = RecordingReward(
        inner,
        run,
        config.samples_per_step,
        config.monitors.ngram,
        gold=make_scorer(gold.scorer) if gold and gold.train_every else None,
        gold_every=gold.train_every if gold else 1,
        monitor=callback.gold,
    )
    callback.judge_at = reward.judge_at  # each step's metrics name the judge that scored it
    refresh = judge_refresh(config, run, reward, callback.gold.train if callback.gold else None)
    arguments = grpo_arguments(config, run.path / "trl") | agent_arguments(config)
    run.write_config(config.model_dump(mode="json"), arguments)
    run.write_environment(describe_environment())
    if audit is not None:
        (run.path / "audit.json").write_text(json.dumps(asdict(audit), indent=2))
    for line in describe_defaults(config):
        say(f"GRPO {line}")
    trainer = GRPOTrainer(
        model=policy_path(config),
        reward_funcs=[reward],
        args=GRPOConfig(**arguments),
        train_dataset=dataset,
        callbacks=[callback, *([refresh] if refresh else [])],
        **environment_arguments(config),
    )
    train_keeping_history(trainer, rubric.evolution, run.path / EVOLUTION_HISTORY)
    if config.save_policy:
        trainer.save_model(str(run.path / "policy"))
    return TrainResult(run.path, trainer, trainer.state.global_step)
