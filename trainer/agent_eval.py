"""``rubricsvc train eval-agent``: a deep-research policy's rollouts on a split of the task set,
measured (trainer/agent_metrics.py) and written to a folder; ``eval-agent-compare`` sets
evaluations side by side.

A policy's rollouts run as the gold monitor's held-out rollouts do
(``trainer.environments.held_out``: the same tool loop, environment options, tool-turn limit
and token budget as the GRPO run of the config): greedy by default, or ``samples`` rollouts a
question sampled at ``temperature``, each seeded on its own (the evaluation's seed, the
question and the rollout's index), so that an interrupted evaluation resumed in the same
folder, or one question's rollouts run alone, are the rollouts a whole run makes. Stored
trajectories (a file of SFT rows: the demonstrations, or ``completions export-sft``'s) are
measured by the same code: each row's assistant turns are replayed in the environment, which
must answer every call as the row holds it, so a row is measured as the rollout it records.

The folder:

settings.json     what was evaluated, how (a resumed evaluation must have the same)
rollouts.jsonl    one line per rollout, as it finishes: the answer, the trajectory and the
                  documents opened (as a completion stores them), every message generated
                  where the trajectory left some out (after an error), its figures, seconds
evaluation.json   the settings, the figures over all rollouts with their intervals, each
                  question's figures, the time
evaluation.md     the same as a report
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rubricsvc.errors import ValidationFailed
from trainer.agent_metrics import (
    LEVEL,
    MEASURES,
    RESAMPLES,
    RolloutMetrics,
    by_question,
    measure,
    overall,
    paired_difference,
)
from trainer.config import TrainConfig
from trainer.deepresearch_tasks import DeepResearchTask, load_tasks
from trainer.environments.held_out import Turn
from trainer.environments.rollouts import stored_trajectory
from trainer.overopt import Split

log = logging.getLogger(__name__)
SETTINGS = "settings.json"
ROLLOUTS = "rollouts.jsonl"
EVALUATION = "evaluation.json"
REPORT = "evaluation.md"
POLICY = "policy"  # a run directory's fine-tuned policy (rubricsvc train sft)


def rollout_seed(seed: int, prompt_id: str, sample: int) -> int:
    """The torch seed of one sampled rollout: the same wherever it runs in the evaluation."""
    return zlib.crc32(f"{seed}/{prompt_id}/{sample}".encode())


def resolve_policy(path: Path) -> Path:
    """A model folder, or a run directory holding one in ``policy/`` (a warm start's)."""
    if (path / POLICY / "config.json").is_file():
        return path / POLICY
    if (path / "config.json").is_file():
        return path
    raise ValidationFailed(f"{path}: neither a model folder nor a run directory with {POLICY}/")


def select_tasks(
    tasks_file: Path, corpus: Path, split: Split | None, questions: Sequence[str]
) -> tuple[list[DeepResearchTask], dict[str, str]]:
    """The questions to evaluate, in the task file's order: ``questions`` by id when given
    (each must exist), else the ``split``'s (every question with None)."""
    task_set, ids = load_tasks(tasks_file, corpus)
    known = {t.id for t in task_set.tasks}
    unknown = [q for q in questions if q not in known]
    if unknown:
        raise ValidationFailed(f"{tasks_file}: no question {unknown[0]!r}")
    chosen = [
        t
        for t in task_set.tasks
        if (t.id in questions if questions else split is None or t.split == split)
    ]
    if not chosen:
        raise ValidationFailed(f"{tasks_file}: no question to evaluate")
    return chosen, ids


def prompt_messages(task: DeepResearchTask) -> list[dict[str, Any]]:
    """The question as a training row's prompt (the rubric's prompt text, one user turn)."""
    return [{"role": "user", "content": task.prompt}]


# --- the folder ------------------------------------------------------------------------------


class EvaluationFolder:
    """An evaluation's folder: its settings, and its rollouts as they finish. A folder that
    holds an evaluation with other settings is refused; one with the same resumes it."""

    def __init__(self, path: Path, settings: dict[str, Any]) -> None:
        self.path = path
        self.settings = settings
        path.mkdir(parents=True, exist_ok=True)
        recorded = path / SETTINGS
        if recorded.exists():
            before = json.loads(recorded.read_text(encoding="utf-8"))
            if before != settings:
                changed = sorted(
                    k for k in settings.keys() | before.keys() if before.get(k) != settings.get(k)
                )
                raise ValidationFailed(
                    f"{path} holds an evaluation with other settings ({', '.join(changed)}): "
                    "choose another output folder"
                )
        else:
            recorded.write_text(_dumps(settings) + "\n", encoding="utf-8")

    def finished(self) -> dict[tuple[str, int], dict[str, Any]]:
        """The rollouts already written, by question and index (a line cut short by an
        interruption is left out: that rollout runs again)."""
        path = self.path / ROLLOUTS
        done: dict[tuple[str, int], dict[str, Any]] = {}
        if not path.exists():
            return done
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            done[(record["prompt_id"], int(record["sample"]))] = record
        return done

    def add(self, record: dict[str, Any]) -> None:
        with (self.path / ROLLOUTS).open("a", encoding="utf-8") as out:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")

    def write(self, metrics: Sequence[RolloutMetrics], seconds: float) -> dict[str, Any]:
        """evaluation.json and evaluation.md from ``metrics``; the evaluation's JSON."""
        seed = int(self.settings["seed"])
        evaluation = {
            "settings": self.settings,
            "rollouts": len(metrics),
            "questions": len({m.prompt_id for m in metrics}),
            "overall": {k: f.as_json() for k, f in overall(metrics, seed).items()},
            "by_question": by_question(metrics),
            "seconds": round(seconds, 1),
        }
        (self.path / EVALUATION).write_text(_dumps(evaluation) + "\n", encoding="utf-8")
        (self.path / REPORT).write_text(evaluation_markdown(evaluation), encoding="utf-8")
        return evaluation


def rollout_record(
    metrics: RolloutMetrics,
    rollout: Any,
    generated: Sequence[dict[str, Any]],
    seconds: float,
) -> dict[str, Any]:
    record = {
        "prompt_id": metrics.prompt_id,
        "sample": metrics.sample,
        "text": rollout.text,
        "trajectory": rollout.trajectory,
        "documents": rollout.documents,
        "metrics": asdict(metrics),
        "seconds": round(seconds, 2),
    }
    if rollout.trajectory != stored_trajectory(generated):
        # The stored trajectory ends at the first error: what came after it is kept here.
        record["generated"] = list(generated)
    return record


def metrics_of(record: dict[str, Any]) -> RolloutMetrics:
    return RolloutMetrics(**record["metrics"])


# --- a policy's rollouts ---------------------------------------------------------------------


@dataclass(frozen=True)
class Decoding:
    samples: int = 1  # rollouts per question
    temperature: float | None = None  # None: greedy
    seed: int = 0

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValidationFailed("samples: at least 1")
        if self.temperature is None and self.samples > 1:
            raise ValidationFailed(
                "greedy rollouts of a question are all the same: give a temperature to sample "
                "several"
            )
        if self.temperature is not None and self.temperature <= 0:
            raise ValidationFailed("temperature: above 0 (leave it out for greedy rollouts)")


def policy_settings(
    config: TrainConfig,
    config_file: Path,
    policy: Path,
    tasks_file: Path,
    tasks: Sequence[DeepResearchTask],
    split: Split | None,
    decoding: Decoding,
    max_new_tokens: int,
) -> dict[str, Any]:
    from trainer.grpo import agent_arguments

    return {
        "source": "policy",
        "policy": str(policy.resolve()),
        "config": str(config_file),
        "environment": config.environment,
        "options": {
            k: str(v) if isinstance(v, Path) else v for k, v in config.agent.options.items()
        },
        "max_turns": agent_arguments(config).get("max_tool_calling_iterations"),
        "max_new_tokens": max_new_tokens,
        "tasks": str(tasks_file),
        "split": None if split is None else split.value,
        "questions": [t.id for t in tasks],
        "samples": decoding.samples,
        "decoding": "greedy" if decoding.temperature is None else "sampled",
        "temperature": decoding.temperature,
        "seed": decoding.seed,
        "resamples": RESAMPLES,
        "level": LEVEL,
    }


def load_policy(policy: Path, threads: int | None = None) -> tuple[Any, Any]:
    """The policy's model (float32, as training on CPU: the bundled model degenerates in
    bfloat16 there; on the GPU when there is one) and its tokenizer with the tool format the
    GRPO run gives it (trainer/environments/chat_template.py)."""
    import torch
    import transformers

    from trainer.environments.chat_template import with_tool_format

    if threads:
        torch.set_num_threads(threads)
    transformers.utils.logging.disable_progress_bar()
    tokenizer = with_tool_format(transformers.AutoTokenizer.from_pretrained(str(policy)))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(policy), dtype=torch.float32)
    if torch.cuda.is_available():
        model = model.to("cuda")
    return model, tokenizer


def evaluate_model(
    config: TrainConfig,
    model: Any,
    tokenizer: Any,
    tasks: Sequence[DeepResearchTask],
    ids: dict[str, str],
    decoding: Decoding,
    max_new_tokens: int,
    folder: EvaluationFolder,
    say: Callable[[str], None] = log.info,
) -> dict[str, Any]:
    """``decoding.samples`` rollouts of ``model`` for each task, those not yet in ``folder``
    (in eval mode, restored after); the evaluation's JSON, written with its report."""
    import torch

    from trainer.environments.held_out import model_turns
    from trainer.grpo import held_out_environment

    environment = held_out_environment(config)
    if environment is None:
        raise ValidationFailed("the config names no environment: set environment: deepresearch")
    done = folder.finished()
    started = time.monotonic()
    metrics: list[RolloutMetrics] = []
    was_training = model.training
    model.eval()
    try:
        for task in tasks:
            for sample in range(decoding.samples):
                kept = done.get((task.id, sample))
                if kept is not None:
                    metrics.append(metrics_of(kept))
                    continue
                torch.manual_seed(rollout_seed(decoding.seed, task.id, sample))
                turn = model_turns(model, tokenizer, max_new_tokens, decoding.temperature)
                began = time.monotonic()
                generated, rollout = environment.rollout(turn, task.id, prompt_messages(task))
                seconds = time.monotonic() - began
                measured = measure(task, ids, rollout, generated, sample)
                folder.add(rollout_record(measured, rollout, generated, seconds))
                metrics.append(measured)
                say(
                    f"{task.id} #{sample}: {measured.tool_calls} call(s), "
                    f"{measured.valid_calls} valid, {measured.documents_opened} opened, gold "
                    f"{measured.gold_met}/{measured.gold_criteria} ({seconds:.0f} s)"
                )
    finally:
        if was_training:
            model.train()
    return folder.write(metrics, time.monotonic() - started)


# --- stored trajectories ---------------------------------------------------------------------


def replayed(turns: Sequence[dict[str, Any]]) -> Turn:
    """A policy that replies with ``turns`` (the stored assistant turns) in order, then none."""
    left = list(turns)

    def turn(conversation: list[dict[str, Any]], tools: Any) -> dict[str, Any] | None:
        return dict(left.pop(0)) if left else None

    return turn


def _differs(stored: Sequence[dict[str, Any]], replay: Sequence[dict[str, Any]]) -> int | None:
    """The index of the first message the replay answered otherwise than the row holds."""
    for index in range(max(len(stored), len(replay))):
        if index >= len(stored) or index >= len(replay):
            return index
        a, b = stored[index], replay[index]
        if a["role"] != b.get("role") or (
            a["role"] == "tool"
            and (a.get("content"), a.get("name")) != (b.get("content"), b.get("name"))
        ):
            return index
    return None


def stored_settings(
    config: TrainConfig,
    config_file: Path,
    rows_file: Path,
    tasks_file: Path,
    tasks: Sequence[DeepResearchTask],
    split: Split | None,
    seed: int,
) -> dict[str, Any]:
    from trainer.grpo import agent_arguments

    return {
        "source": "trajectories",
        "trajectories": str(rows_file),
        "split": None if split is None else split.value,
        "trajectories_sha256": hashlib.sha256(rows_file.read_bytes()).hexdigest(),
        "config": str(config_file),
        "environment": config.environment,
        "options": {
            k: str(v) if isinstance(v, Path) else v for k, v in config.agent.options.items()
        },
        "max_turns": agent_arguments(config).get("max_tool_calling_iterations"),
        "tasks": str(tasks_file),
        "questions": [t.id for t in tasks],
        "seed": seed,
        "resamples": RESAMPLES,
        "level": LEVEL,
    }


def evaluate_stored(
    config: TrainConfig,
    rows_file: Path,
    tasks: Sequence[DeepResearchTask],
    ids: dict[str, str],
    folder: EvaluationFolder,
) -> dict[str, Any]:
    """Every row of ``rows_file`` (SFT rows) whose prompt is one of ``tasks``' questions,
    replayed in the config's environment and measured; the evaluation's JSON."""
    from trainer.grpo import held_out_environment
    from trainer.sft_data import read_sft_data

    environment = held_out_environment(config)
    if environment is None:
        raise ValidationFailed("the config names no environment: set environment: deepresearch")
    by_prompt = {t.prompt: t for t in tasks}
    started = time.monotonic()
    metrics: list[RolloutMetrics] = []
    counts: dict[str, int] = {}
    for number, row in enumerate(read_sft_data(rows_file).rows, start=1):
        task = by_prompt.get(str(row.prompt[-1].get("content", "")))
        if task is None:
            continue
        sample = counts.get(task.id, 0)
        counts[task.id] = sample + 1
        assistant = [m for m in row.completion if m["role"] == "assistant"]
        began = time.monotonic()
        generated, rollout = environment.rollout(replayed(assistant), task.id, row.prompt)
        where = _differs(row.completion, generated)
        if where is not None:
            raise ValidationFailed(
                f"{rows_file}: row {number}: message {where + 1} after the prompt is not what "
                "the environment answers the row's calls with (another corpus, or other "
                "settings than the config's)"
            )
        measured = measure(task, ids, rollout, generated, sample)
        folder.add(rollout_record(measured, rollout, generated, time.monotonic() - began))
        metrics.append(measured)
    if not metrics:
        raise ValidationFailed(f"{rows_file}: no row asks one of the selected questions")
    return folder.write(metrics, time.monotonic() - started)


# --- reports ---------------------------------------------------------------------------------


def _number(value: float | None, rate: bool = True) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" if rate else f"{value:.2f}"


def _interval(interval: Sequence[float] | None, rate: bool = True, signed: bool = False) -> str:
    if not interval:
        return "n/a"
    spec = "+.3f" if signed else (".3f" if rate else ".2f")
    return f"[{interval[0]:{spec}}, {interval[1]:{spec}}]"


def describe(settings: dict[str, Any]) -> str:
    """One line: what was evaluated and how."""
    if settings["source"] == "trajectories":
        return f"stored trajectories `{settings['trajectories']}` replayed in the environment"
    decoding = (
        "greedy"
        if settings["decoding"] == "greedy"
        else f"sampled at temperature {settings['temperature']} (seed {settings['seed']})"
    )
    return (
        f"policy `{settings['policy']}`, {settings['samples']} rollout(s) a question, {decoding}, "
        f"at most {settings['max_new_tokens']} tokens and {settings['max_turns']} tool turns a "
        "rollout"
    )


def evaluation_markdown(evaluation: dict[str, Any]) -> str:
    settings = evaluation["settings"]
    split = settings.get("split") or ("chosen" if settings["source"] == "policy" else "matching")
    lines = [
        "# Agent evaluation",
        "",
        f"{describe(settings)}; {evaluation['questions']} {split} question(s) of "
        f"`{settings['tasks']}`, {evaluation['rollouts']} rollout(s); environment "
        f"`{settings['environment']}` with `{settings['config']}`'s options; "
        f"{evaluation['seconds']:.0f} s.",
        "",
        f"Intervals: {int(settings['level'] * 100)}% percentile bootstrap, questions resampled "
        f"({settings['resamples']} resamples, seed {settings['seed']}).",
        "",
        "| measure | value | interval |",
        "| --- | --- | --- |",
    ]
    for m in MEASURES:
        figure = evaluation["overall"][m.name]
        lines.append(
            f"| {m.label} | {_number(figure['value'], m.rate)} | "
            f"{_interval(figure['interval'], m.rate)} |"
        )
    shown = [m for m in MEASURES if m.name in QUESTION_COLUMNS]
    lines += [
        "",
        "## By question",
        "",
        "| question | rollouts | " + " | ".join(QUESTION_COLUMNS[m.name] for m in shown) + " |",
        "| --- | --- | " + " | ".join("---" for _ in shown) + " |",
    ]
    for pid, figures in evaluation["by_question"].items():
        cells = " | ".join(_number(figures[m.name], m.rate) for m in shown)
        lines.append(f"| {pid} | {figures['rollouts']} | {cells} |")
    lines += ["", DEFINITIONS, ""]
    return "\n".join(lines)


QUESTION_COLUMNS = {
    "tool_call_rate": "tool-call rate",
    "valid_call_rate": "valid-call rate",
    "documents_opened": "opened",
    "citation_precision": "citation precision",
    "gold_criteria_met": "gold met",
}
DEFINITIONS = (
    "Tool-call rate: rollouts with a tool call the parser read. Valid-call rate: of the calls "
    "written (parsed, and `<tool_call>` blocks the parser could not read), those whose result "
    "reported no error. Documents opened: distinct, before the research ended. Citation "
    "precision: of the distinct labels cited, those naming a document the rollout opened "
    "(opened, not judged for support). Gold: the question's `gold` rubric's checks (key facts, "
    "supporting documents cited). n/a: no denominator (no call, no citation). "
    "trainer/agent_metrics.py."
)


def load_evaluation(folder: Path) -> tuple[dict[str, Any], list[RolloutMetrics]]:
    """An evaluation folder's evaluation.json and its rollouts' figures."""
    try:
        evaluation = json.loads((folder / EVALUATION).read_text(encoding="utf-8"))
        lines = (folder / ROLLOUTS).read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise ValidationFailed(f"{folder}: not a finished evaluation ({err.strerror})") from None
    return evaluation, [metrics_of(json.loads(line)) for line in lines if line.strip()]


def compare_evaluations(folders: Sequence[Path]) -> tuple[dict[str, Any], str]:
    """The evaluations side by side, and each one after the first minus the first on the
    questions both evaluated (a paired interval: the questions resampled once for both)."""
    if len(folders) < 2:
        raise ValidationFailed("give two evaluations or more: the first is the baseline")
    loaded = [load_evaluation(f) for f in folders]
    names = [f.name for f in folders]
    seed = int(loaded[0][0]["settings"]["seed"])
    base = loaded[0][1]
    differences: dict[str, dict[str, Any]] = {}
    for name, (_, metrics) in zip(names[1:], loaded[1:], strict=True):
        differences[name] = {}
        for m in MEASURES:
            figure, shared = paired_difference(base, metrics, m, seed)
            differences[name][m.name] = {**figure.as_json(), "questions": shared}
    comparison = {
        "evaluations": {
            name: {"folder": str(folder), "settings": e["settings"], "overall": e["overall"]}
            for name, folder, (e, _) in zip(names, folders, loaded, strict=True)
        },
        "baseline": names[0],
        "differences": differences,
    }
    return comparison, comparison_markdown(comparison)


def comparison_markdown(comparison: dict[str, Any]) -> str:
    evaluations = comparison["evaluations"]
    names = list(evaluations)
    lines = ["# Agent evaluations side by side", ""]
    for name in names:
        lines.append(f"- `{name}`: {describe(evaluations[name]['settings'])}")
    lines += [
        "",
        "| measure | " + " | ".join(names) + " |",
        "| --- | " + " | ".join("---" for _ in names) + " |",
    ]
    for m in MEASURES:
        cells = []
        for name in names:
            figure = evaluations[name]["overall"][m.name]
            cells.append(
                f"{_number(figure['value'], m.rate)} {_interval(figure['interval'], m.rate)}"
            )
        lines.append(f"| {m.label} | " + " | ".join(cells) + " |")
    baseline = comparison["baseline"]
    for name, figures in comparison["differences"].items():
        shared = next(iter(figures.values()))["questions"]
        lines += [
            "",
            f"## `{name}` minus `{baseline}` ({shared} question(s) in both, paired)",
            "",
            "| measure | difference | interval |",
            "| --- | --- | --- |",
        ]
        for m in MEASURES:
            value, interval = figures[m.name]["value"], figures[m.name]["interval"]
            shown = "n/a" if value is None else f"{value:+.3f}"
            lines.append(f"| {m.label} | {shown} | {_interval(interval, signed=True)} |")
    lines += ["", DEFINITIONS, ""]
    return "\n".join(lines)


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)
