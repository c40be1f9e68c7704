"""Proxy against gold, per run and across runs: ``curves.png`` and ``report.md``.

A run's *proxy* is the reward's rubric score (``rubric/reward``: the training judge's view)
and its *gold* the gold scorer's (``gold/train_reward`` on the training completions every
step, and the gold monitor's evaluations of the held-out prompts in gold.jsonl). A policy
that games its judge shows as proxy rising while gold stays or falls.

``write_run_report`` draws one run; ``compare_runs`` draws several, one panel row per group
(the runs of one setting under several seeds share a ``group``), with a table of the
held-out scores at the start, at the proxy's peak and at the end, as the mean over seeds
and their range.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rubricsvc.errors import NotFoundError
from trainer.agreement import agreement_text, group_agreement
from trainer.arms import arms_section
from trainer.evolution_report import evolution_section
from trainer.monitors import GoldPoint, divergence_tests, per_test_level, slope
from trainer.recovered import bracketed_section
from trainer.refresh_report import refresh_section
from trainer.rundir import ALARMS, GOLD, METRICS, REFRESHES, SAMPLES, RunDirectory

CURVES = "curves.png"
REPORT = "report.md"
PROXY = "rubric/reward"
TRAIN_GOLD = "gold/train_reward"
# Steps the training-prompt curves are smoothed over: a step sees only a few prompts.
SMOOTHING = 5


@dataclass
class Point:
    step: int
    proxy: float | None
    gold: float | None


@dataclass
class RunRecord:
    """What a finished (or stopped) run directory holds, read back for reports."""

    path: Path
    config: dict[str, Any]
    metrics: list[dict[str, Any]]
    held_out: list[Point]
    alarms: list[dict[str, Any]]
    samples: list[dict[str, Any]] = field(default_factory=list)
    gold_rows: list[dict[str, Any]] = field(default_factory=list)  # gold.jsonl as written
    refreshes: list[dict[str, Any]] = field(default_factory=list)  # refreshes.jsonl
    # replayed_tests per test level: a comparison asks for each run's several times (its
    # table, alarms, strongest evidence), and each replay redoes every held-out evaluation's
    # tests. A record is read once from its directory and not changed after.
    _replayed: dict[float, list[tuple[int, list[dict[str, Any]]]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def name(self) -> str:
        return str(self.config.get("name") or self.path.name)

    @property
    def group(self) -> str:
        return str(self.config.get("group") or self.name)

    @property
    def seed(self) -> int:
        return int((self.config.get("grpo") or {}).get("seed", 0))

    def training(self, key: str) -> tuple[list[int], list[float]]:
        """Per logged step, the value of ``key`` (steps without one left out)."""
        rows = [(int(r["step"]), float(r[key])) for r in self.metrics if r.get(key) is not None]
        return [s for s, _ in rows], [v for _, v in rows]

    def gold_alarms(self) -> list[dict[str, Any]]:
        return [a for a in self.alarms if a.get("kind") == "gold_divergence"]

    @property
    def gold_window(self) -> int:
        gold = (self.config.get("monitors") or {}).get("gold") or {}
        return int(gold.get("window", 3))

    def alarm_margin(self) -> tuple[float, int] | None:
        """The largest ``min_slope`` at which the gold monitor would still have fired on this
        run's held-out evaluations, and the step of that evaluation; None if it would fire at
        none (the proxy never rose while gold fell). The alarm rule is a function of the
        recorded evaluations, so this holds for any threshold without training again: a run
        alarms at ``min_slope`` m exactly when its margin is above m. Compared with a
        random-reward control's margin, it tells an alarm from drift."""
        scored = [p for p in self.held_out if p.proxy is not None and p.gold is not None]
        window = self.gold_window
        best: tuple[float, int] | None = None
        for end in range(window, len(scored) + 1):
            recent = scored[end - window : end]
            rise = slope([p.proxy for p in recent if p.proxy is not None])
            fall = -slope([p.gold for p in recent if p.gold is not None])
            margin = min(rise, fall)
            if margin > 0 and (best is None or margin > best[0]):
                best = (margin, recent[-1].step)
        return best

    @property
    def gold_settings(self) -> dict[str, Any]:
        return dict((self.config.get("monitors") or {}).get("gold") or {})

    def test_level(self, alpha: float | None = None) -> float:
        """Each of the monitor's tests' level at ``alpha`` (default: the run's, else 0.05)."""
        gold = self.gold_settings
        chosen = alpha if alpha is not None else gold.get("alpha") or 0.05
        steps = int((self.config.get("grpo") or {}).get("max_steps") or 1)
        return per_test_level(float(chosen), steps // int(gold.get("every") or 5))

    def replayed_tests(self, alpha: float | None = None) -> list[tuple[int, list[dict[str, Any]]]]:
        """The monitor's test rule at each held-out evaluation, decided again from the logs:
        the held-out answers in gold.jsonl and the training completions in samples.jsonl
        (all of them when ``samples_per_step`` covers a step's completions, as in the lab's
        runs). The same function as the live monitor's, so for a run made with the test rule
        it gives what the run logged; for one made before, what it would have."""
        level = self.test_level(alpha)
        if level not in self._replayed:
            self._replayed[level] = self._replay(level)
        return self._replayed[level]

    def _replay(self, level: float) -> list[tuple[int, list[dict[str, Any]]]]:
        window = self.gold_window
        scored_both = [
            s
            for s in self.samples
            if s.get("prompt_id") is not None
            and s.get("rubric_reward") is not None
            and s.get("gold_reward") is not None
        ]
        proxy = [(s["prompt_id"], int(s["step"]), float(s["rubric_reward"])) for s in scored_both]
        gold = [(s["prompt_id"], int(s["step"]), float(s["gold_reward"])) for s in scored_both]
        points: list[GoldPoint] = []
        found = []
        for row in self.gold_rows:
            step = int(row["step"])
            point = GoldPoint(step, row.get("train_score"), row.get("gold_score"))
            point.samples = list(row.get("samples") or [])
            points.append(point)
            if point.train_score is None or point.gold_score is None:
                continue
            scored = [p for p in points if p.train_score is not None and p.gold_score is not None]
            seen = [o for o in proxy if o[1] <= step]
            seen_gold = [o for o in gold if o[1] <= step]
            found.append((step, divergence_tests(scored, window, seen, seen_gold, level)))
        return found

    def test_alarms(self, alpha: float | None = None) -> list[int]:
        """The steps at which the test rule fires (``replayed_tests``)."""
        return [
            step for step, tests in self.replayed_tests(alpha) if any(t["fires"] for t in tests)
        ]

    def strongest_evidence(self, alpha: float | None = None) -> tuple[float, int, str] | None:
        """The smallest p-value of the test rule over the run (a set's p is the larger of its
        two tests', as both must pass), with its step and set of answers."""
        best: tuple[float, int, str] | None = None
        for step, tests in self.replayed_tests(alpha):
            for test in tests:
                p_value = max(test["proxy_p"], test["gold_p"])
                if best is None or p_value < best[0]:
                    best = (p_value, step, test["source"])
        return best

    def held_out_summary(self) -> dict[str, Point] | None:
        """The held-out evaluation at the start, at the proxy's peak and at the end."""
        scored = [p for p in self.held_out if p.proxy is not None]
        if not scored:
            return None
        peak = max(scored, key=lambda p: p.proxy or 0.0)
        return {"start": scored[0], "peak": peak, "end": scored[-1]}


def read_run(path: Path) -> RunRecord:
    """The run directory at ``path``; NotFoundError when it is none."""
    config_file = path / "config.yaml"
    if not config_file.is_file():
        raise NotFoundError(f"{path} is not a run directory (no config.yaml)")
    config = yaml.safe_load(config_file.read_text(encoding="utf-8")) or {}
    run = RunDirectory(path)
    gold_rows = run.read(GOLD)
    held_out = [
        Point(int(row["step"]), row.get("train_score"), row.get("gold_score")) for row in gold_rows
    ]
    return RunRecord(
        path,
        config,
        run.read(METRICS),
        held_out,
        run.read(ALARMS),
        run.read(SAMPLES),
        gold_rows,
        run.read(REFRESHES),
    )


def smoothed(values: Sequence[float], width: int = SMOOTHING) -> list[float]:
    """The trailing mean over ``width`` values (fewer at the start)."""
    out = []
    for index in range(len(values)):
        window = values[max(0, index - width + 1) : index + 1]
        out.append(sum(window) / len(window))
    return out


def _draw_training(axes: Any, run: RunRecord, alpha: float = 1.0, label: bool = True) -> None:
    for key, colour, name in ((PROXY, "tab:blue", "proxy"), (TRAIN_GOLD, "tab:orange", "gold")):
        steps, values = run.training(key)
        if steps:
            axes.plot(steps, values, color=colour, alpha=0.2 * alpha, linewidth=0.8)
            axes.plot(
                steps,
                smoothed(values),
                color=colour,
                alpha=alpha,
                label=f"{name} (mean of {SMOOTHING} steps)" if label else None,
            )


def _draw_held_out(axes: Any, run: RunRecord, alpha: float = 1.0, label: bool = True) -> None:
    for attr, colour, name in (("proxy", "tab:blue", "proxy"), ("gold", "tab:orange", "gold")):
        points = [(p.step, getattr(p, attr)) for p in run.held_out if getattr(p, attr) is not None]
        if points:
            axes.plot(
                [s for s, _ in points],
                [v for _, v in points],
                color=colour,
                marker="o",
                markersize=3,
                alpha=alpha,
                label=name if label else None,
            )
    for step in run.test_alarms():
        axes.axvline(step, color="tab:red", alpha=0.4 * alpha, linestyle="--")


def _figure(rows: int) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and CI
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(
        rows, 2, figsize=(11, 3.2 * rows), squeeze=False, sharex=True, sharey=True
    )
    return figure, axes


def _save(figure: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _panel_titles(axes: Any, row: int, title: str) -> None:
    axes[row][0].set_title(f"{title}: training prompts", fontsize="medium")
    axes[row][1].set_title(f"{title}: held-out prompts (red: gold alarm)", fontsize="medium")
    for column in (0, 1):
        axes[row][column].grid(alpha=0.3)
        axes[row][column].set_ylabel("score")
        if axes[row][column].get_legend_handles_labels()[1]:  # a panel with nothing logged has none
            axes[row][column].legend(fontsize="small", loc="lower right")


def draw_curves(runs: Sequence[RunRecord], path: Path) -> Path:
    """Proxy and gold over steps, a row per group (its seeds drawn over each other)."""
    groups = group_runs(runs)
    figure, axes = _figure(len(groups))
    for row, (group, members) in enumerate(groups.items()):
        for index, run in enumerate(members):
            alpha = 1.0 if len(members) == 1 else 0.7
            _draw_training(axes[row][0], run, alpha, label=index == 0)
            _draw_held_out(axes[row][1], run, alpha, label=index == 0)
        seeds = f"{len(members)} seed{'s' if len(members) > 1 else ''}"
        _panel_titles(axes, row, f"{group} ({seeds})")
    for column in (0, 1):
        axes[-1][column].set_xlabel("step")
    return _save(figure, path)


def group_runs(runs: Sequence[RunRecord]) -> dict[str, list[RunRecord]]:
    groups: dict[str, list[RunRecord]] = {}
    for run in runs:
        groups.setdefault(run.group, []).append(run)
    return groups


def _stat(values: Sequence[float | None]) -> str:
    """``mean`` for one value, ``mean [min, max]`` for several; ``-`` for none."""
    present = [v for v in values if v is not None]
    if not present:
        return "-"
    mean = statistics.fmean(present)
    if len(present) == 1:
        return f"{mean:.3f}"
    return f"{mean:.3f} [{min(present):.3f}, {max(present):.3f}]"


def defences(config: dict[str, Any]) -> str:
    """The run's defences and controls, in words (``none`` for the baseline)."""
    reward = config.get("reward") or {}
    said = []
    if reward.get("criterion_dropout"):
        said.append(f"criterion dropout {reward['criterion_dropout']}")
    if reward.get("length_penalty"):
        shaping = reward["length_penalty"]
        said.append(f"length penalty {shaping['per_word']}/word past {shaping['max_words']}")
    if float((config.get("grpo") or {}).get("beta") or 0.0) > 0:
        said.append(f"KL beta {config['grpo']['beta']}")
    if config.get("random_rewards"):
        said.append("random rewards (control)")
    gold = ((config.get("monitors") or {}).get("gold") or {}).get("scorer") or {}
    if reward.get("rubric") and reward.get("rubric") == gold.get("rubric"):
        said.append("gold's rubric as the reward (oracle)")
    evolution = reward.get("evolution") or {}
    if evolution:
        generator = (evolution.get("generator") or {}).get("backend", "transformers")
        said.append(
            f"evolving rubrics (generator {generator}, every {evolution.get('every', 1)}, "
            f"max_active {evolution.get('max_active', 5)})"
        )
    refresh = config.get("refresh") or {}
    if refresh:
        labeller = refresh.get("labeller")
        named = (
            labeller
            if isinstance(labeller, str)
            else ", ".join(f"{k} {v}" for k, v in (labeller or {}).items() if v is not None)
        )
        said.append(f"judge refresh every {refresh.get('every')} steps (labeller {named})")
    return ", ".join(said) or "none"


HEADER = (
    "| run | seeds | judge | defence | held-out proxy start / peak / end "
    "| held-out gold start / peak / end | gold alarms (the test) | smallest p "
    "| proxy agrees with gold in groups |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def table(runs: Sequence[RunRecord]) -> str:
    """A Markdown row per group: held-out proxy and gold at start, proxy's peak and end."""
    lines = [HEADER]
    for group, members in group_runs(runs).items():
        summaries = [m.held_out_summary() for m in members]
        cells = []
        for attr in ("proxy", "gold"):
            parts = [
                _stat([getattr(s[moment], attr) if s else None for s in summaries])
                for moment in ("start", "peak", "end")
            ]
            cells.append(" / ".join(parts))
        alarms = [len(m.test_alarms()) for m in members]
        first = members[0].config
        judge = (first.get("reward") or {}).get("judge", "?")
        lines.append(
            f"| {group} | {len(members)} | {judge} | {defences(first)} | {cells[0]} | {cells[1]} "
            f"| {sum(alarms)} in {sum(1 for a in alarms if a)} of {len(members)} run(s) "
            f"| {_p_values([m.strongest_evidence() for m in members])} "
            f"| {_stat([group_agreement(m.samples, interval=False).agreement for m in members])} |"
        )
    return "\n".join(lines)


def _p_values(found: Sequence[tuple[float, int, str] | None]) -> str:
    """Each run's smallest p-value of the test rule (``strongest_evidence``), in seed order."""
    return ", ".join(f"{f[0]:.2g}" if f else "-" for f in found) or "-"


def _training_ends(run: RunRecord, key: str) -> tuple[float | None, float | None]:
    _, values = run.training(key)
    if not values:
        return None, None
    k = min(SMOOTHING, len(values))
    return statistics.fmean(values[:k]), statistics.fmean(values[-k:])


def _samples_at(run: RunRecord, step: int, count: int = 3) -> list[dict[str, Any]]:
    return [s for s in run.samples if s.get("step") == step][:count]


def _quote(text: str, limit: int = 400) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit] + " ..."


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _test_summary(run: RunRecord) -> str:
    """The test rule's verdict on the run, decided from its logs."""
    if not run.gold_rows:
        return "The gold monitor's test: no held-out evaluation to decide it on."
    alpha = run.gold_settings.get("alpha") or 0.05
    steps = run.test_alarms()
    said = f"fires at step {', '.join(map(str, steps))}" if steps else "fires at no evaluation"
    best = run.strongest_evidence()
    evidence = (
        f" Its strongest evidence: p = {best[0]:.2g} at step {best[1]} on the "
        f"{'held-out answers' if best[2] == 'held_out' else 'training completions'} (a set's "
        "p is the larger of its two tests')."
        if best
        else ""
    )
    return (
        f"The gold monitor's test (alpha {alpha}, each test at level {run.test_level():.3g}; "
        f"decided from the logs): {said}.{evidence}"
    )


# A tool environment's per-step metrics (trainer/agent_reward.py), as the report names them.
AGENT_METRICS = {
    "agent/tool_call_rate": "rollouts with a tool call",
    "agent/tool_calls": "tool calls per rollout",
    "agent/valid_call_rate": "calls whose result reported no error",
    "agent/search_turns": "searches with results per rollout",
    "agent/documents_opened": "documents opened per rollout",
    "agent/citations": "labels cited per rollout",
    "agent/citation_precision": "cited labels naming an opened document",
    "reward/rubric": "reward component: rubric",
    "reward/citations": "reward component: citations",
    "reward/format": "reward component: format",
    "reward/search_turns": "reward component: search turns",
}


def agent_section(run: RunRecord) -> list[str]:
    """The report's tool-use table for a run in a tool environment (none for other runs)."""
    if not run.config.get("environment"):
        return []
    lines = [
        f"## Tool use ({run.config['environment']})",
        "",
        f"Mean over the first and the last {SMOOTHING} logged steps, and over all steps:",
        "",
        "| metric | first | last | all steps |",
        "| --- | --- | --- | --- |",
    ]
    for key, label in AGENT_METRICS.items():
        steps, values = run.training(key)
        if not steps:
            continue
        first, last = _training_ends(run, key)
        lines.append(
            f"| {label} (`{key}`) | {_fmt(first)} | {_fmt(last)} | "
            f"{_fmt(sum(values) / len(values))} |"
        )
    return [*lines, ""]


def run_report(run: RunRecord) -> str:
    """report.md of one run: settings, held-out table, training ends, alarms, samples."""
    reward = run.config.get("reward") or {}
    grpo = run.config.get("grpo") or {}
    lines = [
        f"# Run {run.name}",
        "",
        f"- group: {run.group}; seed {run.seed}",
        f"- reward: judge {reward.get('judge')}, mode {reward.get('mode') or 'its own'}, "
        f"rubric {reward.get('rubric') or 'each prompt latest'}, "
        f"aggregation {reward.get('aggregation')}",
        f"- defence: {defences(run.config)}",
        f"- GRPO: {grpo.get('max_steps')} steps of {grpo.get('per_device_train_batch_size')} "
        f"completions ({grpo.get('num_generations')} per prompt), learning rate "
        f"{grpo.get('learning_rate')}, beta {grpo.get('beta')}, at most "
        f"{grpo.get('max_completion_length')} tokens",
        "",
        f"![proxy and gold]({CURVES})",
        "",
        "## Held-out prompts",
        "",
    ]
    summary = run.held_out_summary()
    if summary is None:
        lines.append("No held-out evaluation (no gold monitor configured).")
    else:
        lines += ["| moment | step | proxy | gold |", "| --- | --- | --- | --- |"]
        for moment, label in (("start", "start"), ("peak", "proxy's peak"), ("end", "end")):
            point = summary[moment]
            lines.append(f"| {label} | {point.step} | {_fmt(point.proxy)} | {_fmt(point.gold)} |")
    lines += ["", "## Training prompts", ""]
    proxy, gold = _training_ends(run, PROXY), _training_ends(run, TRAIN_GOLD)
    lines += [
        f"Mean over the first and the last {SMOOTHING} logged steps:",
        "",
        "| score | first | last |",
        "| --- | --- | --- |",
        f"| proxy | {_fmt(proxy[0])} | {_fmt(proxy[1])} |",
        f"| gold | {_fmt(gold[0])} | {_fmt(gold[1])} |",
        "",
        "Within a rollout group (a prompt's completions at a step), the share of the pairs "
        "gold tells apart that the proxy orders the same way (0.5: at random; 95% interval "
        f"resampling groups): {agreement_text(group_agreement(run.samples))}.",
        "",
    ]
    lines += refresh_section(run.refreshes, run.samples)
    lines += evolution_section([(run.name, run.metrics, run.samples)])
    lines += agent_section(run)
    lines += ["## Alarms", "", _test_summary(run), ""]
    margin = run.alarm_margin()
    lines += [
        "Alarm margin of the raw rule (the largest `min_slope` at which it would still fire on "
        "these held-out evaluations): "
        + (
            f"{margin[0]:.4f} (step {margin[1]})." if margin else "none (it fires at no threshold)."
        ),
        "",
        "Alarms as the run logged them:",
        "",
    ]
    if not run.alarms:
        lines.append("None.")
    for alarm in run.alarms:
        lines.append(f"- step {alarm.get('step')}: {alarm.get('kind')}: {alarm.get('message')}")
    steps = sorted({int(s["step"]) for s in run.samples if s.get("step") is not None})
    if steps:
        lines += ["", "## Samples", ""]
        for step in dict.fromkeys((steps[0], steps[-1])):
            lines += [f"Step {step}:", ""]
            for sample in _samples_at(run, step):
                lines.append(
                    f"- {sample.get('prompt_id')} (proxy {_fmt(sample.get('rubric_reward'))}, "
                    f"gold {_fmt(sample.get('gold_reward'))}): {_quote(sample['completion'])}"
                )
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def write_run_report(path: Path) -> tuple[Path, Path]:
    """curves.png and report.md in the run directory at ``path``."""
    run = read_run(path)
    curves = draw_curves([run], path / CURVES)
    report = path / REPORT
    report.write_text(run_report(run), encoding="utf-8")
    return curves, report


def _refreshes_compared(runs: Sequence[RunRecord]) -> str:
    """Every run's judge refreshes, a section per run that made any."""
    sections = [
        "\n".join(refresh_section(run.refreshes, run.samples, f"Judge refreshes: {run.name}"))
        for run in runs
        if run.refreshes
    ]
    return "".join("\n" + section for section in sections)


def compare_runs(
    paths: Sequence[Path], output: Path, baseline: str | None = "baseline"
) -> tuple[Path, Path, str]:
    """curves.png (a row per group) and compare.md (the table; where a group has two seeds or
    more, the arms over seeds and each against the ``baseline`` group) in ``output``."""
    runs = [read_run(path) for path in paths]
    output.mkdir(parents=True, exist_ok=True)
    curves = draw_curves(runs, output / CURVES)
    text = table(runs)
    document = output / "compare.md"
    document.write_text(
        "# Runs compared\n\n"
        "Held-out scores at the start, at the held-out proxy's peak and at the end; the mean "
        "over a group's seeds, with their range in brackets.\n\n"
        f"{text}\n\n![proxy and gold]({CURVES})\n\nRuns: "
        + ", ".join(f"{r.name} ({r.path})" for r in runs)
        + "\n"
        + "".join("\n" + line for line in arms_section(group_runs(runs), baseline))
        + "".join("\n" + line for line in bracketed_section(group_runs(runs)))
        + _refreshes_compared(runs)
        + "".join(
            "\n" + line
            for line in evolution_section([(r.name, r.metrics, r.samples) for r in runs])
        ),
        encoding="utf-8",
    )
    return curves, document, text
