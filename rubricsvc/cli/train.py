"""``rubricsvc train``: GRPO on TRL with rubric rewards (the trainer package), its supervised
warm start, the run reports and the agent evaluations: ``train CONFIG`` (short for ``train
run CONFIG``), ``train sft CONFIG``, ``train report RUN``, ``train compare RUN...``, ``train
diff RECORDED RERUN``, ``train eval-agent`` and ``train eval-agent-compare EVAL...``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from typer._click.core import Context  # the click typer bundles, which its groups take
from typer.core import TyperGroup

from rubricsvc.cli.context import CliExit, console, engine, require_migrated
from rubricsvc.errors import missing_extra


class RunByDefault(TyperGroup):
    """``rubricsvc train CONFIG ...`` runs ``train run CONFIG ...``: a first argument that
    names no sub-command is a config file."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["run", *args]
        return list(super().parse_args(ctx, args))


train_app = typer.Typer(
    cls=RunByDefault,
    help="Train a policy with GRPO against rubric rewards (after a supervised warm start, "
    "`train sft`), and report on runs. `rubricsvc train CONFIG` is `rubricsvc train run CONFIG`.",
    no_args_is_help=True,
)


def _trainer_modules() -> Any:
    try:
        from trainer import config, grpo, report
    except ImportError as err:
        raise missing_extra(
            err, "training needs the trainer extra", "trainer,transformers"
        ) from None
    return config, grpo, report


@train_app.command("run")
def train_command(
    config_file: Path = typer.Argument(
        ..., help="The training config (YAML), see docs/trainer.md."
    ),
    name: str | None = typer.Option(None, help="Run name (the run directory is OUTPUT_DIR/NAME)."),
    max_steps: int | None = typer.Option(None, help="Override grpo.max_steps."),
    random_rewards: bool | None = typer.Option(
        None,
        "--random-rewards/--rubric-rewards",
        help="Train on uniform random rewards (a control run), or on the rubric rewards.",
        show_default=False,
    ),
    assignments: list[str] = typer.Option(
        [],
        "--set",
        help="Override a setting: KEY=VALUE, a dotted key and a YAML value "
        "(--set reward.criterion_dropout=0.5 --set grpo.seed=1). Repeatable.",
    ),
) -> None:
    """Train a policy with GRPO against rubric rewards; the run directory keeps everything."""
    trainer_config, grpo, report = _trainer_modules()
    overrides: dict[str, object] = dict(trainer_config.parse_override(a) for a in assignments)
    if name is not None:
        overrides["name"] = name
    if random_rewards is not None:
        overrides["random_rewards"] = random_rewards
    if max_steps is not None:
        overrides["grpo.max_steps"] = max_steps
    config = trainer_config.load_config(config_file, overrides)
    if config.reward.database_url is None:
        require_migrated(engine())
    if config.run_dir.exists() and any(config.run_dir.iterdir()):
        raise CliExit(f"run directory {config.run_dir} is not empty: choose another --name")
    console.print(f"run directory: {config.run_dir}")
    result = grpo.train(config, say=console.print)
    curves, document = report.write_run_report(result.run_dir)
    console.print(
        f"{result.steps} step(s) done; config, metrics, samples and plots in {result.run_dir} "
        f"(proxy vs gold: {curves.name}, {document.name})"
    )


@train_app.command("sft")
def sft_command(
    config_file: Path = typer.Argument(
        ..., help="The warm start's config (YAML), see docs/trainer.md."
    ),
    name: str | None = typer.Option(None, help="Run name (the run directory is OUTPUT_DIR/NAME)."),
    max_steps: int | None = typer.Option(None, help="Override sft.max_steps."),
    assignments: list[str] = typer.Option(
        [],
        "--set",
        help="Override a setting: KEY=VALUE, a dotted key and a YAML value "
        "(--set sft.seed=1 --set sft.learning_rate=5e-5). Repeatable.",
    ),
) -> None:
    """Supervised warm start before RL: fine-tune a policy with TRL's SFTTrainer on chat rows
    (`completions export-sft`'s, or demonstrations), the loss on the assistant's turns; the
    run directory keeps the config, the data's sha256, the metrics and the policy."""
    try:
        from trainer import config as trainer_config
        from trainer import sft, sft_config
    except ImportError as err:
        raise missing_extra(
            err, "training needs the trainer extra", "trainer,transformers"
        ) from None
    overrides: dict[str, object] = dict(trainer_config.parse_override(a) for a in assignments)
    if name is not None:
        overrides["name"] = name
    if max_steps is not None:
        overrides["sft.max_steps"] = max_steps
    config = sft_config.load_sft_config(config_file, overrides)
    if config.run_dir.exists() and any(config.run_dir.iterdir()):
        raise CliExit(f"run directory {config.run_dir} is not empty: choose another --name")
    console.print(f"run directory: {config.run_dir}")
    result = sft.train_sft(config, say=console.print)
    losses = (
        f"; loss {result.first_loss:.4f} at the first logged step, {result.last_loss:.4f} at "
        "the last"
        if result.first_loss is not None and result.last_loss is not None
        else ""
    )
    console.print(
        f"{result.steps} step(s) on {result.rows} row(s) in {result.seconds:.0f} s{losses}; "
        f"the policy is in {result.policy_dir} (the `policy` of the RL run's config)"
        + (
            f"; its LoRA adapter in {result.adapter_dir} (`rubricsvc train merge-adapter` "
            "makes the policy again from it)"
            if result.adapter_dir is not None
            else ""
        )
    )


@train_app.command("merge-adapter")
def merge_adapter_command(
    adapter: Path = typer.Argument(
        ..., help="A LoRA adapter folder: a warm start's RUN/adapter, or one kept elsewhere."
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", help="The policy folder to write (must be empty or new)."
    ),
    policy: str | None = typer.Option(
        None, help="The base model folder; default: the embedded SmolLM2-135M-Instruct."
    ),
    threads: int | None = typer.Option(None, help="torch threads."),
) -> None:
    """A policy folder from a LoRA adapter and its base: the folder a warm start with `lora`
    wrote as RUN/policy, made again from its adapter (what a repository can keep)."""
    try:
        from trainer import merge
        from trainer.grpo import policy_folder
    except ImportError as err:
        raise missing_extra(
            err, "merging needs the trainer extra", "trainer,transformers"
        ) from None
    base = policy_folder(policy)
    result = merge.merge_into_policy(adapter, output, base, threads)
    console.print(
        f"{result.output}: {base} with the adapter {adapter} merged "
        f"(adapter sha256 {result.adapter_sha256[:12]}, {result.parameters:,} parameters)"
    )


@train_app.command("eval-agent")
def eval_agent_command(
    config_file: Path = typer.Option(
        ...,
        "--config",
        help="A deep-research training config (train.yaml): the environment's options, the "
        "tool-turn limit, the token budget (grpo.max_completion_length) and the policy.",
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", help="The evaluation's folder (the same folder resumes it)."
    ),
    policy: Path | None = typer.Option(
        None,
        help="A model folder or a run directory with policy/ (a warm start's); default: the "
        "config's policy, else the embedded model.",
    ),
    trajectories: Path | None = typer.Option(
        None,
        help="Measure stored trajectories instead of a policy's rollouts: SFT rows "
        "(demonstrations.jsonl, export-sft's), replayed in the environment.",
    ),
    tasks_file: Path | None = typer.Option(
        None, "--tasks", help="The task set; default: tasks.yaml beside the config's corpus."
    ),
    split: str | None = typer.Option(
        None,
        help="held-out, train or all; default: held-out for a policy, all for trajectories.",
    ),
    questions: list[str] = typer.Option(
        [], "--question", help="Only this question (repeatable); overrides --split."
    ),
    samples: int = typer.Option(1, help="Rollouts a question (more than 1 needs --temperature)."),
    temperature: float | None = typer.Option(
        None, help="Sample at this temperature (GRPO's sampling); default: greedy."
    ),
    seed: int = typer.Option(0, help="Seeds the sampled rollouts and the bootstrap."),
    max_new_tokens: int | None = typer.Option(
        None, help="A rollout's token budget; default: the config's grpo.max_completion_length."
    ),
    threads: int | None = typer.Option(None, help="Torch threads; default: the config's."),
    assignments: list[str] = typer.Option(
        [], "--set", help="Override a config setting: KEY=VALUE (as `train run`). Repeatable."
    ),
) -> None:
    """Measure a deep-research policy on the task set's questions: each question answered in
    the environment's tool loop (the held-out gold monitor's), greedy or sampled; tool-call
    rate, valid-call rate, documents opened, citation precision and gold criteria met, with
    95% bootstrap intervals over questions. --trajectories measures stored rows instead."""
    try:
        from trainer import agent_eval
        from trainer import config as trainer_config
        from trainer.grpo import policy_path
        from trainer.overopt import Split
    except ImportError as err:
        raise missing_extra(
            err, "training needs the trainer extra", "trainer,transformers"
        ) from None
    overrides = dict(trainer_config.parse_override(a) for a in assignments)
    config = trainer_config.load_config(config_file, overrides)
    if config.environment is None or "corpus" not in config.agent.options:
        raise CliExit(f"{config_file}: not a deep-research config (environment, agent.options)")
    corpus = Path(str(config.agent.options["corpus"]))
    tasks_path = tasks_file or corpus.with_name("tasks.yaml")
    chosen = split or ("all" if trajectories is not None else Split.HELD_OUT.value)
    if chosen not in ("all", *(s.value for s in Split)):
        raise CliExit(f"--split: held-out, train or all, not {chosen!r}")
    selected = None if chosen == "all" or questions else Split(chosen)
    tasks, ids = agent_eval.select_tasks(tasks_path, corpus, selected, questions)
    if trajectories is not None:
        if policy is not None or temperature is not None or samples != 1:
            raise CliExit(
                "--trajectories measures stored rows: no --policy, --samples or --temperature"
            )
        settings = agent_eval.stored_settings(
            config, config_file, trajectories, tasks_path, tasks, selected, seed
        )
        folder = agent_eval.EvaluationFolder(output, settings)
        evaluation = agent_eval.evaluate_stored(config, trajectories, tasks, ids, folder)
    else:
        policy_dir = agent_eval.resolve_policy(policy or Path(policy_path(config)))
        decoding = agent_eval.Decoding(samples, temperature, seed)
        budget = max_new_tokens or config.grpo.max_completion_length
        settings = agent_eval.policy_settings(
            config, config_file, policy_dir, tasks_path, tasks, selected, decoding, budget
        )
        folder = agent_eval.EvaluationFolder(output, settings)
        model_and_tokenizer = agent_eval.load_policy(policy_dir, threads or config.threads)
        evaluation = agent_eval.evaluate_model(
            config,
            *model_and_tokenizer,
            tasks,
            ids,
            decoding,
            budget,
            folder,
            say=lambda line: console.print(line, markup=False, highlight=False),
        )
    report = (output / agent_eval.REPORT).read_text(encoding="utf-8")
    console.print(report, markup=False, highlight=False, soft_wrap=True)
    console.print(f"wrote {output / agent_eval.EVALUATION} ({evaluation['rollouts']} rollouts)")


@train_app.command("eval-agent-compare")
def eval_agent_compare_command(
    folders: list[Path] = typer.Argument(
        ..., help="Evaluation folders (eval-agent's); the first is the baseline."
    ),
    output: Path = typer.Option(
        Path("agents.md"), "--output", "-o", help="The Markdown written (and its .json)."
    ),
) -> None:
    """Agent evaluations side by side, and each minus the first on the questions both
    evaluated, with paired 95% bootstrap intervals over those questions."""
    try:
        from trainer import agent_eval
    except ImportError as err:
        raise missing_extra(err, "evaluations need the trainer extra", "trainer") from None
    comparison, markdown = agent_eval.compare_evaluations(folders)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(markdown, encoding="utf-8")
    output.with_suffix(".json").write_text(
        json.dumps(comparison, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    console.print(markdown, markup=False, highlight=False, soft_wrap=True)
    console.print(f"wrote {output} and {output.with_suffix('.json')}")


@train_app.command("report")
def report_command(
    run_dir: Path = typer.Argument(..., help="A run directory (OUTPUT_DIR/NAME)."),
) -> None:
    """Write a run's curves.png and report.md again from what it logged."""
    _, _, report = _trainer_modules()
    curves, document = report.write_run_report(run_dir)
    console.print(f"wrote {curves} and {document}")


@train_app.command("compare")
def compare_command(
    run_dirs: list[Path] = typer.Argument(..., help="Run directories; seeds of a group together."),
    output: Path = typer.Option(
        Path("compare"), "--output", "-o", help="Where curves.png and compare.md are written."
    ),
    baseline: str = typer.Option(
        "baseline", "--baseline", help="The group every other group is compared with."
    ),
) -> None:
    """Draw several runs' proxy and gold on one picture (a row per group) with a table of
    the held-out scores at the start, at the proxy's peak and at the end; where groups have
    two seeds or more, each group's outcomes over its seeds (bootstrap intervals) and its
    difference from the baseline group."""
    _, _, report = _trainer_modules()
    curves, document, text = report.compare_runs(run_dirs, output, baseline)
    console.print(text, markup=False, highlight=False)
    console.print(f"wrote {curves} and {document}")


@train_app.command("diff")
def diff_command(
    recorded: Path = typer.Argument(..., help="The recorded run directory."),
    rerun: Path = typer.Argument(..., help="The run directory of its re-run."),
    shown: int = typer.Option(12, "--show", help="How many differing figures to list."),
) -> None:
    """Whether RERUN reproduces RECORDED: every logged figure (metrics, gold, samples,
    alarms) compared to the digit, times left out; where they differ, the first step and
    figures that do, and what differs in the two runs' environments. Exit code 0 when
    identical, 1 when not."""
    try:
        from trainer.rundiff import diff_runs
    except ImportError as err:
        raise missing_extra(err, "run diffs need the trainer extra", "trainer") from None
    try:
        result = diff_runs(recorded, rerun)
    except FileNotFoundError as err:
        raise CliExit(str(err), code=2) from None
    for line in result.summary(shown):
        console.print(line, markup=False, highlight=False)
    if not result.identical:
        raise typer.Exit(1)
