"""``rubricsvc judges evaluate``, ``judges show`` and ``judges import``: how far a judge can be
trusted, and the verdicts of judges run elsewhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from sqlalchemy import select

from rubricsvc.backends.provider import BackendProvider
from rubricsvc.cli.context import CliExit, console, db_session
from rubricsvc.cli.progress import progress_bar
from rubricsvc.cli.render import build_table, dumps
from rubricsvc.config import get_settings
from rubricsvc.importers.judge_verdicts import import_judge_verdicts
from rubricsvc.importers.judgebench import import_judgebench_verdicts
from rubricsvc.importers.rewardbench2 import import_rewardbench2_verdicts
from rubricsvc.importers.rmbench import import_rmbench_verdicts
from rubricsvc.judging.modes import mode_names
from rubricsvc.models import JudgeAudit, JudgeConfig
from rubricsvc.scoring.judge_configs import find_judge, gate_status, stored_spec
from rubricsvc.validation.evaluation import EvaluationOptions, evaluate, evaluations_of
from rubricsvc.validation.labelsets import get_label_set


def judges_evaluate(
    judge: str = typer.Option(..., help="Judge config name (see `rubricsvc judges list`)."),
    labels: str = typer.Option(..., help="Label set name (see `rubricsvc labels list`)."),
    mode: str | None = typer.Option(
        None, help=f"Verdict mode (default: the judge's): {', '.join(mode_names())} or a plugin's."
    ),
    resamples: int = typer.Option(2000, min=100, help="Bootstrap resamples for the intervals."),
    seed: int = typer.Option(0, help="Seed of the bootstrap."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
    report_dir: Path | None = typer.Option(
        None, "--report", help="Also write the report (evaluation.json) and its plots here."
    ),
) -> None:
    """Judge what the label set needs (the cache answers what is judged already) and report
    agreement with the labels, with prompt-clustered 95% bootstrap intervals. The evaluation is
    stored against the judge config and the label set's content hash."""
    options = EvaluationOptions(resamples=resamples, seed=seed)
    backends = BackendProvider.from_settings(get_settings())
    with backends, db_session() as session:
        spec = find_judge(session, judge, mode)
        label_set = get_label_set(session, labels)
        with progress_bar("judging", enabled=not as_json, lines=True) as update:
            report, row = evaluate(
                session,
                spec,
                label_set,
                backends.factory(spec),
                options,
                progress=update,
                checkpoint=session.commit,
            )
        report["evaluation_id"] = row.id
    if report_dir is not None:
        _write_report(report, report_dir)
    if as_json:
        console.print_json(dumps(report))
        return
    _print_evaluation(report)
    if report_dir is not None:
        console.print(f"report written to {report_dir}")


def judges_compare(
    judges: list[str] = typer.Argument(..., help="Two or more judge config names."),
    labels: str = typer.Option(..., help="Label set name (see `rubricsvc labels list`)."),
    resamples: int = typer.Option(2000, min=100, help="Bootstrap resamples for the intervals."),
    seed: int = typer.Option(0, help="Seed of the bootstrap."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as one JSON object."),
    report_dir: Path | None = typer.Option(
        None, "--report", help="Also write the table (compare.md, compare.json) and forest.png."
    ),
) -> None:
    """Every judge's figures on the label set's items all of them judged, and each pair's
    difference in agreement with a paired 95% bootstrap interval over prompts. Each judge first
    judges what the set needs, as `judges evaluate` does; the comparison is not stored."""
    from rubricsvc.validation.compare import compare

    options = EvaluationOptions(resamples=resamples, seed=seed)
    backends = BackendProvider.from_settings(get_settings())
    with backends, db_session() as session:
        specs = [find_judge(session, name) for name in judges]
        label_set = get_label_set(session, labels)
        with progress_bar("judging", enabled=not as_json, lines=True) as update:
            report = compare(
                session,
                specs,
                label_set,
                [backends.factory(spec) for spec in specs],
                options,
                progress=update,
                checkpoint=session.commit,
            )
    if report_dir is not None:
        _write_comparison(report, report_dir)
    if as_json:
        console.print_json(dumps(report))
        return
    console.print(_comparison_markdown(report), soft_wrap=True, markup=False)
    if report_dir is not None:
        console.print(f"report written to {report_dir}")


def _interval(values: list[float] | None) -> str:
    return f"[{values[0]:.3f}, {values[1]:.3f}]" if values else "-"


def _comparison_markdown(report: dict[str, Any]) -> str:
    """The comparison as Markdown tables (printed, and written as compare.md)."""
    lines = [
        f"# judges on {report['labels']} ({report['kind']} labels)",
        "",
        f"{report['n_common']} of {report['n_labelled']} labelled items were judged by every "
        f"judge ({report['n_prompts']} prompts); every figure is on those items only.",
        "",
        "| judge | mode | judged in the set | agreement | 95% interval | kappa |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for judge in report["judges"]:
        lines.append(
            f"| {judge['judge']} | {judge['mode']} | {judge['n_judged_in_set']} of "
            f"{report['n_labelled']} | {_fmt(judge.get('agreement'))} | "
            f"{_interval(judge.get('agreement_ci'))} | {_fmt(judge.get('kappa'))} |"
        )
    lines += [
        "",
        "| difference in agreement | value | 95% paired interval | interval excludes 0 |",
        "| --- | --- | --- | --- |",
    ]
    for pair in report["differences"]:
        lines.append(
            f"| {pair['a']} - {pair['b']} | {_fmt(pair['difference'])} | "
            f"{_interval(pair['difference_ci'])} | {'yes' if pair['excludes_zero'] else 'no'} |"
        )
    interval = report["interval"]
    lines += [
        "",
        f"intervals: {interval['resamples']} bootstrap resamples of prompts (seed "
        f"{interval['seed']}); each resample draws the prompts once for both judges of a pair.",
    ]
    return "\n".join(lines)


def _write_comparison(report: dict[str, Any], folder: Path) -> None:
    from rubricsvc.validation.plots import forest_plot

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "compare.json").write_text(dumps(report) + "\n", encoding="utf-8")
    (folder / "compare.md").write_text(_comparison_markdown(report) + "\n", encoding="utf-8")
    rows = [
        (
            f"{pair['a']} - {pair['b']}",
            pair["difference"],
            tuple(pair["difference_ci"]) if pair["difference_ci"] else None,
        )
        for pair in report["differences"]
    ]
    forest_plot(rows, folder / "forest.png", f"judges on {report['labels']}")


VERDICT_FORMATS = {
    "jsonl": "the project's own JSON Lines (docs/validation.md)",
    "judgebench": "a JudgeBench judge's outputs file (outputs/dataset=judgebench,...jsonl)",
    "rm-bench": "an RM-Bench results file (score_chosen, score_rejected per record)",
    "rewardbench2": "RewardBench 2 scores (JSON Lines: id, scores, num_correct per prompt)",
}


def judges_import(
    file: Path = typer.Argument(..., help="The verdicts file (see --format)."),
    judge: str | None = typer.Option(
        None,
        help="The imported judge's name (created if new); judgebench: default "
        "judgebench/<judge_name>/<judge_model> from the file's name.",
    ),
    model: str | None = typer.Option(
        None, help="The model that gave the verdicts (default: the stored judge's, else NAME)."
    ),
    rubric: str | None = typer.Option(
        None,
        help="Pairwise and scalar verdicts: the rubric version (NAME@N) they are keyed under "
        "(default: each prompt's own newest; a benchmark's: its shared rubric's newest); use "
        "the label set's.",
    ),
    fmt: str = typer.Option(
        "jsonl", "--format", help=f"One of {', '.join(VERDICT_FORMATS)}: the file's format."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
) -> None:
    """Store a judge's verdicts as judgments of an imported judge (only ever read, never
    called); importing the same file again adds nothing."""
    if fmt not in VERDICT_FORMATS:
        known = "; ".join(f"{key}: {about}" for key, about in VERDICT_FORMATS.items())
        raise CliExit(f"unknown verdict format {fmt!r}; formats: {known}", 2)
    if judge is None and fmt != "judgebench":
        raise CliExit(f"--judge is required for {fmt} verdicts", 2)
    with db_session() as session:
        if fmt == "judgebench":
            report = import_judgebench_verdicts(session, file, judge, model=model, rubric=rubric)
        elif fmt == "rm-bench":
            assert judge is not None
            report = import_rmbench_verdicts(session, file, judge, model=model, rubric=rubric)
        elif fmt == "rewardbench2":
            assert judge is not None
            report = import_rewardbench2_verdicts(session, file, judge, model=model, rubric=rubric)
        else:
            assert judge is not None
            report = import_judge_verdicts(session, file, judge, model=model, rubric=rubric)
    if as_json:
        console.print_json(dumps(report.as_dict()))
        return
    state = "created" if report.judge_created else "stored already"
    lines = [
        f"imported {report.verdicts} verdicts from {report.path}",
        f"  judge:     {report.judge} (backend imported, model {report.model}, mode "
        f"{report.mode}; {report.judge_config_hash[:12]}, {state})",
    ]
    if report.rubrics:
        lines.append(f"  rubric:    {', '.join(report.rubrics)}")
    lines += [
        f"  verdicts:  {report.ok} valid, {report.failed} without a valid verdict (stored as "
        f"failed); {report.added} added, {report.already_stored} already stored",
        f"  judgments: {report.judgments_added} added, {report.judgments_already_stored} already "
        f"stored ({report.judgments_extended} given verdicts on new items)",
    ]
    if report.repeats:
        lines.append(
            f"  repeats:   {report.repeats} verdicts on content an earlier line holds "
            f"({report.conflicts} items with another verdict than their judgment's: kept per item)"
        )
    lines += [f"  note: {note}" for note in report.notes]
    console.print("\n".join(lines), soft_wrap=True, markup=False)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _ci(report: dict[str, Any], name: str) -> str:
    interval = report.get(f"{name}_ci")
    return f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "-"


def _print_evaluation(report: dict[str, Any]) -> None:
    title = (
        f"judge {report['judge']} ({report['mode']}) on {report['labels']}: "
        f"{report['n_judged']} of {report['n_labelled']} {report['kind']} items judged "
        f"(coverage {_fmt(report['coverage'])})"
    )
    names = [
        n
        for n in ("agreement", "kappa", "f1", "ece", "pearson", "spearman", "kendall")
        if n in report
    ]
    rows = [[name, _fmt(report[name]), _ci(report, name)] for name in names]
    if "agreement_all" in report:
        rows.append(["agreement, unjudged counted wrong", _fmt(report["agreement_all"]), "-"])
    position = report.get("position")
    if position:
        rows.append(["position consistency (both orders)", _fmt(position["consistency"]), "-"])
        rows.append(
            ["verdicts for the response shown first", _fmt(position["first_shown_wins"]), "-"]
        )
    for order, figures in report.get("orders", {}).items():
        shown = order.replace("_", " ")
        rows.append(
            [
                f"agreement, {shown} order ({figures['correct']} of {figures['n']}; "
                f"{figures['failed']} failed)",
                _fmt(figures["agreement"]),
                "-",
            ]
        )
    if "both_orders_correct" in report:
        both = report["both_orders_correct"]
        consistency = report["position_consistency"]
        rows.append(["pairs right in both orders", f"{both['correct']} of {both['n']}", "-"])
        rows.append(
            [
                f"same response in both orders ({consistency['same']} of {consistency['n']})",
                _fmt(consistency["share"]),
                "-",
            ]
        )
    bias = report.get("length_bias", {})
    rows.append(["judge vs length (Spearman)", _fmt(bias.get("judge_vs_length_spearman")), "-"])
    rows.append(["labels vs length (Spearman)", _fmt(bias.get("labels_vs_length_spearman")), "-"])
    console.print(
        build_table(
            title, ["metric", "value", "95% interval"], rows, flexible="metric", width=console.width
        )
    )
    if report.get("benchmark"):
        _print_benchmark(report["benchmark"])
    if report.get("ties"):
        console.print(f"ties: {report['ties']}")
    console.print(
        f"intervals: {report['interval']['resamples']} bootstrap resamples of prompts; "
        f"stored as evaluation {report.get('evaluation_id')}"
    )


def _print_benchmark(figures: dict[str, Any]) -> None:
    """The benchmark's own metric, as it publishes its figures."""
    name = figures["name"]
    rows: list[list[str]] = []
    if "percent" in figures:  # JudgeBench: percentages, overall and per category
        rows.append(
            [
                f"accuracy ({figures['correct']} of {figures['n']} pairs)",
                f"{figures['percent']:.2f}%",
                _interval_percent(figures.get("accuracy_ci")),
            ]
        )
        for category, counts in figures["by_category"].items():
            rows.append(
                [
                    f"  {category} ({counts['correct']} of {counts['n']})",
                    f"{counts['percent']:.2f}%",
                    "-",
                ]
            )
    elif "hard" in figures:  # RM-Bench
        for key in ("average", "hard", "normal", "easy"):
            rows.append([key, _fmt(figures[key]), _ci(figures, key)])
        for domain, values in figures["domains"].items():
            rows.append(
                [
                    f"  {domain} ({values['n']} prompts): hard / normal / easy",
                    f"{values['hard']:.3f} / {values['normal']:.3f} / {values['easy']:.3f}",
                    "-",
                ]
            )
    else:  # RewardBench 2
        rows.append(
            [
                f"overall ({figures['n_prompts']} prompts)",
                _fmt(figures["overall"]),
                _ci(figures, "overall"),
            ]
        )
        for subset, values in figures["subsets"].items():
            rows.append([f"  {subset} ({values['n']})", _fmt(values["score"]), "-"])
    title = f"{name}'s own metric (compared by {figures['compared_by']})"
    console.print(
        build_table(
            title, ["metric", "value", "95% interval"], rows, flexible="metric", width=console.width
        )
    )
    console.print(f"{name}: {figures['metric']}", soft_wrap=True, markup=False)


def _interval_percent(interval: list[float] | None) -> str:
    return f"[{100 * interval[0]:.2f}, {100 * interval[1]:.2f}]" if interval else "-"


def _write_report(report: dict[str, Any], folder: Path) -> None:
    from rubricsvc.validation.metrics import ReliabilityBin
    from rubricsvc.validation.plots import agreement_bars, reliability_diagram

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "evaluation.json").write_text(dumps(report) + "\n", encoding="utf-8")
    title = f"{report['judge']} on {report['labels']}"
    bars = [
        (
            name,
            float(report[name]),
            tuple(report[f"{name}_ci"]) if report.get(f"{name}_ci") else None,
        )
        for name in ("agreement", "kappa", "f1", "spearman")
        if report.get(name) is not None
    ]
    agreement_bars(bars, folder / "agreement.png", title)
    if report.get("reliability"):
        bins = [ReliabilityBin(**b) for b in report["reliability"]]
        reliability_diagram(bins, folder / "reliability.png", title)


def judges_show(
    name: str = typer.Argument(..., help="Judge config name."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """A judge's settings, and how it has been validated and audited (newest first)."""
    with db_session() as session:
        spec = find_judge(session, name)
        rows = list(
            session.scalars(
                select(JudgeConfig).where(JudgeConfig.name == name).order_by(JudgeConfig.id)
            )
        )
        ids = [row.id for row in rows]
        evaluations = evaluations_of(session, ids) if ids else []
        audits = (
            list(
                session.scalars(
                    select(JudgeAudit)
                    .where(JudgeAudit.judge_config_id.in_(ids))
                    .order_by(JudgeAudit.id.desc())
                )
            )
            if ids
            else []
        )
        gate = gate_status(session, rows[-1]) if rows else None
        shown: dict[str, Any] = {
            "name": name,
            "spec": (stored_spec(rows[-1]) if rows else spec).model_dump(mode="json"),
            # A distilled judge: where it came from, and what its promotion gate decided.
            "origin": rows[-1].settings.get("origin") if rows else None,
            "gate": {"status": gate.status.value, **gate.report} if gate is not None else None,
            "configs": [
                {"id": r.id, "config_hash": r.config_hash, "created_at": r.created_at.isoformat()}
                for r in rows
            ],
            "evaluations": [
                {
                    "id": e.id,
                    "config_hash": e.judge_config.config_hash,
                    "labels": e.label_set.name,
                    "label_set_hash": e.label_set_hash,
                    "kind": e.report.get("kind"),
                    "n_labelled": e.n_labelled,
                    "n_judged": e.n_judged,
                    "agreement": e.agreement,
                    "agreement_ci": e.report.get("agreement_ci"),
                    "created_at": e.created_at.isoformat(),
                }
                for e in evaluations
            ],
            "audits": [
                {
                    "id": a.id,
                    "config_hash": a.judge_config.config_hash,
                    "set": a.set_name,
                    "max_inflation": a.max_inflation,
                    "created_at": a.created_at.isoformat(),
                }
                for a in audits
            ],
        }
    if as_json:
        console.print_json(dumps(shown))
        return
    settings = shown["spec"]
    console.print(
        f"judge {name}: backend {settings['backend']}, model {settings.get('model') or '(embedded)'}, "
        f"mode {settings['mode']}; {len(shown['configs'])} stored config(s)"
    )
    if shown["gate"] is not None:
        gate = shown["gate"]
        reasons = f": {'; '.join(gate['reasons'])}" if gate.get("reasons") else ""
        console.print(f"promotion gate: {gate['status']}{reasons}")
    if shown["evaluations"]:
        rows_out = [
            [
                e["labels"],
                e["kind"],
                f"{e['n_judged']}/{e['n_labelled']}",
                _fmt(e["agreement"]),
                f"[{e['agreement_ci'][0]:.3f}, {e['agreement_ci'][1]:.3f}]"
                if e["agreement_ci"]
                else "-",
                e["config_hash"][:12],
                str(e["created_at"])[:19],
            ]
            for e in shown["evaluations"]
        ]
        headers = ["labels", "kind", "judged", "agreement", "95% interval", "config", "when"]
        console.print(
            build_table("validation", headers, rows_out, flexible="labels", width=console.width)
        )
    else:
        console.print("not validated: run `rubricsvc judges evaluate --judge NAME --labels SET`")
    if shown["audits"]:
        rows_out = [
            [a["set"], _fmt(a["max_inflation"]), a["config_hash"][:12], str(a["created_at"])[:19]]
            for a in shown["audits"]
        ]
        console.print(
            build_table(
                "audits",
                ["set", "largest inflation", "config", "when"],
                rows_out,
                flexible="set",
                width=console.width,
            )
        )
    else:
        console.print("not audited: run `rubricsvc judges audit NAME`")
