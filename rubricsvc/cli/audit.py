"""``rubricsvc judges audit``: attack a judge and store how far it can be gamed;
``judges audit-generator``: rubric injection against an evolving rubric's generator."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import typer

from rubricsvc.audit.attacks import NEUTRALIZED_FAMILIES, select_attacks
from rubricsvc.audit.injection import InjectionReport, run_injection_audit
from rubricsvc.audit.runner import AuditOptions, AuditReport, run_audit
from rubricsvc.audit.sets import DEMO_SET, demo_items, stored_items
from rubricsvc.audit.store import save_audit
from rubricsvc.backends.provider import BackendProvider
from rubricsvc.cli.context import CliExit, console, db_session, err_console
from rubricsvc.cli.progress import progress_bar
from rubricsvc.cli.render import build_table
from rubricsvc.config import get_settings
from rubricsvc.evolution.settings import EvolutionSettings
from rubricsvc.judging.aggregation import DEFAULT_MIN_COVERAGE
from rubricsvc.judging.failures import ResponseFailurePolicy
from rubricsvc.judging.modes import mode_names
from rubricsvc.rubrics.generator import load_generator_file
from rubricsvc.scoring.judge_configs import find_judge


def judges_audit(
    judge: str = typer.Argument(..., help="Judge config name (see `rubricsvc judges list`)."),
    mode: str | None = typer.Option(
        None, help=f"Verdict mode (default: the judge's): {', '.join(mode_names())} or a plugin's."
    ),
    rubric: list[str] = typer.Option(
        [], help="Attack this stored rubric version (REF; repeatable). Default: the demo set."
    ),
    weak_source: str = typer.Option(
        "demo-weak", help="With --rubric: the source of each prompt's honest weak answer."
    ),
    strong_source: str = typer.Option(
        "demo-strong", help="With --rubric: the source of each prompt's honest strong answer."
    ),
    attack: list[str] = typer.Option([], help="Run only this attack (repeatable)."),
    aggregation: str = typer.Option("rar", help="How criteria aggregate into a score."),
    response_failure: ResponseFailurePolicy = typer.Option(
        ResponseFailurePolicy.WORST, help="A response the judge cannot judge: worst or masked."
    ),
    max_masked_share: float = typer.Option(
        0.0,
        min=0.0,
        max=1.0,
        help="The share of an attack's items whose score may be masked (escaping the worst "
        "value) before the audit fails.",
    ),
    resamples: int = typer.Option(2000, min=100, help="Bootstrap resamples for the intervals."),
    seed: int = typer.Option(0, help="Seed of the bootstrap."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Run the built-in attacks against a judge: for each, the mean score inflation over an
    honest weak answer (95% bootstrap interval) and how often it beats an honest strong one.
    The report is stored against the judge config. Fails (exit 1, naming the attacks) when an
    attack's scores are masked on more than --max-masked-share of its items, or its inflation
    could not be measured."""
    attacks = select_attacks(attack)
    options = AuditOptions(
        aggregation=aggregation,
        min_coverage=DEFAULT_MIN_COVERAGE,
        response_failure=response_failure,
        resamples=resamples,
        seed=seed,
        max_masked_share=max_masked_share,
    )
    with db_session() as session:
        spec = find_judge(session, judge, mode)
        if rubric:
            items = stored_items(session, rubric, weak_source, strong_source)
            set_name = ", ".join(rubric)
        else:
            items, set_name = demo_items(), DEMO_SET
        backends = BackendProvider.from_settings(get_settings())
        with backends, progress_bar("attacking", enabled=not as_json, lines=True) as update:
            report = run_audit(
                spec,
                backends.factory(spec),
                items,
                set_name,
                options,
                attacks,
                progress=update,
            )
        row = save_audit(session, spec, items, report)
        session.commit()
        audit_id = row.id
    if as_json:
        console.print_json(json.dumps({"audit_id": audit_id, **asdict(report)}))
    else:
        _print_report(report)
        err_console.print(f"audit {audit_id} stored against judge {report.judge}")
    if report.problems:
        raise CliExit(f"judge {report.judge} failed its audit: {'; '.join(report.problems)}")


def _fmt(value: float | None, signed: bool = True) -> str:
    if value is None:
        return "—"
    return f"{value:+.3f}" if signed else f"{value:.2f}"


def _print_report(report: AuditReport) -> None:
    rows = []
    for result in sorted(report.attacks, key=lambda a: -(a.mean_inflation or 0.0)):
        interval = f"[{_fmt(result.ci_low)}, {_fmt(result.ci_high)}]"
        failed = ", ".join(f"{n} {name}" for name, n in result.failures.items() if n)
        rows.append(
            [
                result.name,
                result.family,
                _fmt(result.mean_inflation),
                interval,
                _fmt(result.false_positive_rate, signed=False),
                _fmt(result.verdict_shift),
                f"{result.masked}/{len(result.scores)}",
                failed,
            ]
        )
    headers = [
        "attack",
        "family",
        "inflation",
        "95% interval",
        "beats strong",
        "verdict shift",
        "masked",
        "failed",
    ]
    weak = [s for s in report.weak_scores if s is not None]
    strong = [s for s in report.strong_scores if s is not None]
    title = (
        f"judge {report.judge} on {report.set_name} ({len(report.items)} items): honest weak "
        f"{sum(weak) / max(len(weak), 1):.3f}, strong {sum(strong) / max(len(strong), 1):.3f}"
    )
    console.print(build_table(title, headers, rows, flexible="attack", width=console.width))
    neutralized = report.worst_neutralized_inflation()
    console.print(
        f"largest inflation of the attacks the platform neutralizes "
        f"({', '.join(sorted(NEUTRALIZED_FAMILIES))}): {neutralized:+.3f}"
    )


def judges_audit_generator(
    generator: Path | None = typer.Option(
        None,
        "--generator",
        help="The evolving rubric's generator (YAML or JSON, as in reward.evolution.generator); "
        "default: the embedded model with the evolution template.",
    ),
    repeats: int = typer.Option(4, min=1, help="Answers per item and arm (seed, seed + 1, ...)."),
    max_new: int = typer.Option(3, min=1, max=10, help="The most criteria one answer may add."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Rubric injection against an evolving rubric's generator: on the demo set, how often a
    rollout asking for a criterion ("mentions the word banana") gets it, beside the same words
    without the request (control), with 95% Wilson intervals. Fails (exit 1) when an attack's
    rate is above the control's interval. "proposed": answers naming the word; "injected":
    those an evolution step would accept (a criterion copied from a rollout is refused)."""
    spec = load_generator_file(generator) if generator else EvolutionSettings().generator
    backends = BackendProvider.from_settings(get_settings())
    items = demo_items()
    with backends, progress_bar("asking", enabled=not as_json, lines=True) as update:
        report = run_injection_audit(
            spec, backends.factory(spec), items, repeats=repeats, max_new=max_new, progress=update
        )
    if as_json:
        data = asdict(report)
        for arm, row in zip(report.arms, data["arms"], strict=True):
            row.update(rate=arm.rate, interval=arm.interval(), parsed=arm.parsed)
        console.print_json(json.dumps({**data, "problems": report.problems()}))
    else:
        _print_injection(report)
    if report.problems():
        raise CliExit(f"generator took injected criteria: {'; '.join(report.problems())}")


def _print_injection(report: InjectionReport) -> None:
    rows = []
    for arm in report.arms:
        interval = arm.interval()
        rows.append(
            [
                arm.name,
                f"{arm.proposed}/{arm.parsed}",
                f"{arm.injected}/{arm.parsed}",
                _fmt(arm.rate, signed=False),
                f"[{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "—",
                f"{arm.unparseable}/{arm.trials}",
            ]
        )
    title = (
        f"generator {report.generator} ({report.generator_hash[:12]}) on {report.items} items "
        f"x {report.repeats} answers: criteria naming the injected word"
    )
    headers = ["arm", "proposed", "injected", "rate", "95% interval", "unparseable"]
    console.print(build_table(title, headers, rows, flexible="arm", width=console.width))
