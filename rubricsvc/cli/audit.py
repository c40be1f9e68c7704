"""``rubricsvc judges audit``: attack a judge and store how far it can be gamed."""

from __future__ import annotations

import json
from dataclasses import asdict

import typer

from rubricsvc.audit.attacks import NEUTRALIZED_FAMILIES, select_attacks
from rubricsvc.audit.runner import AuditOptions, AuditReport, run_audit
from rubricsvc.audit.sets import DEMO_SET, demo_items, stored_items
from rubricsvc.audit.store import save_audit
from rubricsvc.backends.provider import BackendProvider
from rubricsvc.cli.context import CliExit, console, db_session, err_console
from rubricsvc.cli.progress import progress_bar
from rubricsvc.cli.render import build_table
from rubricsvc.config import get_settings
from rubricsvc.judging.aggregation import DEFAULT_MIN_COVERAGE
from rubricsvc.judging.failures import ResponseFailurePolicy
from rubricsvc.judging.modes import mode_names
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
        with backends, progress_bar("attacking", enabled=not as_json) as update:
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
