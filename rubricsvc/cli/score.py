"""``rubricsvc score``."""

from __future__ import annotations

import contextlib
import enum
import json
import shlex
import signal
import sys
from dataclasses import asdict, replace
from typing import Any, NoReturn

import typer
from rich.table import Table

from rubricsvc.backends.provider import BackendProvider
from rubricsvc.cli.context import console, db_session, err_console
from rubricsvc.cli.jobs import score_via_celery, unfinished_exit
from rubricsvc.cli.progress import progress_bar
from rubricsvc.cli.render import build_table
from rubricsvc.config import get_settings
from rubricsvc.judging.aggregation import AGGREGATIONS, DEFAULT_MIN_COVERAGE
from rubricsvc.judging.failures import ResponseFailurePolicy
from rubricsvc.judging.modes import mode_names
from rubricsvc.scoring.judge_configs import find_judge, find_reward_judge
from rubricsvc.scoring.jury import JuryScoredCompletion, score_judge
from rubricsvc.scoring.options import score_options
from rubricsvc.scoring.scorer import ScoredCompletion, ScoreReport, plan_run
from rubricsvc.scoring.selection import Selection


class ScoreVia(enum.StrEnum):
    INPROCESS = "inprocess"
    CELERY = "celery"


def score_command(
    judge: str = typer.Option("embedded", help="Judge config name (see `rubricsvc judges list`)."),
    mode: str | None = typer.Option(
        None, help=f"Verdict mode (default: the judge's): {', '.join(mode_names())} or a plugin's."
    ),
    aggregation: str = typer.Option("rar", help=f"One of {', '.join(sorted(AGGREGATIONS))}."),
    rubric: str | None = typer.Option(
        None,
        help="Score with this rubric version (REF) only: the completions of its prompt; for a "
        "shared rubric, the completions assigned to it, or those --completion, --prompt or "
        "--source select.",
    ),
    prompt: list[str] = typer.Option([], help="Only completions of prompts with this external id."),
    source: list[str] = typer.Option([], help="Only completions from this source."),
    completion: list[int] = typer.Option([], help="Only the completion with this id."),
    include_drafts: bool | None = typer.Option(
        None,
        "--include-drafts/--approved-only",
        help="Use draft rubric versions too, or only approved ones "
        "(default: the setting RUBRICSVC_SCORING_USE_DRAFTS, else approved only).",
        show_default=False,
    ),
    min_coverage: float = typer.Option(DEFAULT_MIN_COVERAGE, help="Below this coverage: no score."),
    breakdown: bool = typer.Option(True, help="Print the per-criterion breakdown."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    via: ScoreVia | None = typer.Option(
        None,
        help="Score in this process, or submit a job to Celery workers and follow it "
        "(default: celery when RUBRICSVC_BROKER_URL is set).",
    ),
    response_failure: ResponseFailurePolicy | None = typer.Option(
        None,
        help="A response the judge cannot judge (it overflows the judge's context): its "
        "worst value, or masked (default: RUBRICSVC_SCORING_RESPONSE_FAILURE, else worst).",
        show_default=False,
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Print what the run would judge (completions, rubric versions, judgments, how "
        "many cached) and judge nothing.",
    ),
) -> None:
    """Score completions against their rubrics (their prompt's and those assigned to them);
    judgments already made come from the cache."""
    if include_drafts is None:
        include_drafts = get_settings().scoring.use_drafts
    selection = Selection(
        completion_ids=tuple(completion),
        prompt_external_ids=tuple(prompt),
        sources=tuple(source),
        rubric_ref=rubric,
        include_drafts=include_drafts,
    )
    options = score_options(
        get_settings().scoring, aggregation=aggregation, min_coverage=min_coverage
    )
    if response_failure is not None:
        options = replace(options, response_failure=response_failure)
    if dry_run:
        _dry_run(judge, mode, selection, as_json)
        return
    if via is None:
        via = ScoreVia.CELERY if get_settings().broker.url else ScoreVia.INPROCESS
    if via == ScoreVia.CELERY:
        report, state = score_via_celery(judge, mode, selection, options, show=not as_json)
        if as_json:
            console.print_json(json.dumps(asdict(report)))
        else:
            _print_report(report, breakdown)
        if state.status != "done":
            raise unfinished_exit(state)
        return
    # Start with a small chunk, so a slow judge's first checkpoint comes early as well.
    options = replace(options, first_chunk_judgments=FIRST_CHUNK_JUDGMENTS)
    backends = BackendProvider.from_settings(get_settings())
    stop = _StopOnInterrupt()
    with stop, backends, db_session() as session:
        spec = find_reward_judge(session, judge, mode)
        with progress_bar("judging", enabled=True, lines=True) as update:

            def progress(done: int, total: int) -> None:
                stop.done, stop.total = done, total
                update(done, total)

            def checkpoint() -> None:
                session.commit()  # the chunk in flight is stored ...
                stop.check()  # ... before a Ctrl-C ends the run

            finished: ScoreReport | None = None
            # Interrupted: everything judged so far is committed; nothing else to undo.
            with contextlib.suppress(_Interrupted):
                finished = score_judge(
                    session,
                    spec,
                    selection,
                    options,
                    backends.factory,
                    progress=progress,
                    checkpoint=checkpoint,
                )
        loads = len(backends.loaded())  # judge models (backends) this run loaded
    if finished is None:
        stop.exit()
    if as_json:
        console.print_json(json.dumps({**asdict(finished), "model_loads": loads}))
        return
    _print_report(finished, breakdown)
    console.print(f"{loads} judge model load(s)")


def _dry_run(judge: str, mode: str | None, selection: Selection, as_json: bool) -> None:
    """Print what a run of ``selection`` would judge; judge and store nothing."""
    with db_session() as session:
        spec = find_judge(session, judge, mode)
        plans = [plan_run(session, one, selection) for one in spec.jury_members() or [spec]]
        session.rollback()  # reading only: nothing a lookup may have added is kept
    if as_json:
        first = asdict(plans[0])
        if len(plans) > 1:  # a jury: each member's plan, the counts summed
            first["judge"] = spec.name
            first["members"] = [asdict(p) for p in plans]
            for key in ("judgments", "cached", "checks"):
                first[key] = sum(getattr(p, key) for p in plans)
        console.print_json(json.dumps({"dry_run": True, **first}))
        return
    plan = plans[0]
    judgments = sum(p.judgments for p in plans)
    cached = sum(p.cached for p in plans)
    members = f" ({len(plans)} members)" if len(plans) > 1 else ""
    rows = [
        [str(v["rubric"]), str(v["completions"]), str(v["judgments"]), str(v["cached"])]
        for v in plan.versions
    ]
    headers = ["rubric version", "completions", "judgments", "cached"]
    title = (
        f"dry run, judge {spec.name}{members}: {plan.completions} completion(s), "
        f"{plan.scores} score(s) under {len(plan.versions)} rubric version(s)"
    )
    console.print(build_table(title, headers, rows, flexible="rubric version", width=console.width))
    console.print(
        f"{judgments} judgment(s): {cached} from the cache, {judgments - cached} to judge; "
        f"{plan.checks} check(s). Nothing was judged."
    )
    _print_without(plan.without_rubric, plan.without_reasons)


FIRST_CHUNK_JUDGMENTS = 16
INTERRUPTED_EXIT = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C


class _Interrupted(Exception):
    """Ctrl-C was pressed: the run stops at the checkpoint after the chunk in flight."""


class _StopOnInterrupt:
    """Within it, the first Ctrl-C (SIGINT) asks the run to stop after the chunk in flight
    (stored and committed); a second one stops at once, as Ctrl-C otherwise does."""

    def __init__(self) -> None:
        self.requested = False
        self.done = 0
        self.total = 0
        self._previous: Any = None

    def __enter__(self) -> _StopOnInterrupt:
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: object) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        sys.stderr.write(
            "interrupt: stopping after the batch in flight is stored (Ctrl-C again to stop now)\n"
        )
        sys.stderr.flush()

    def check(self) -> None:
        if self.requested:
            raise _Interrupted

    def exit(self) -> NoReturn:
        """Say what was kept and how to resume, and end with exit code 130."""
        command = shlex.join(["rubricsvc", *sys.argv[1:]])
        sys.stderr.write(
            f"interrupted: {self.done} of {self.total} judgments done and stored, with the "
            f"scores of the completions they finish; {self.total - self.done} left.\n"
            f"resume: {command}   (stored judgments come from the cache)\n"
        )
        sys.stderr.flush()
        raise typer.Exit(INTERRUPTED_EXIT)


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _print_report(report: ScoreReport, breakdown: bool) -> None:
    ranked = sorted(report.scores, key=lambda s: (s.value is None, -(s.value or 0.0)))
    rows = [
        [
            str(rank),
            s.completion_external_id or str(s.completion_id),
            s.source or "",
            _fmt(s.value),
            f"{s.coverage:.2f}",
            s.status,
            s.rubric,
        ]
        for rank, s in enumerate(ranked, start=1)
    ]
    headers = ["#", "completion", "source", "score", "coverage", "status", "rubric"]
    title = f"{len(ranked)} score(s): judge {report.judge}, aggregation {report.aggregation}"
    console.print(build_table(title, headers, rows, flexible="rubric", width=console.width))
    if breakdown:
        for scored in ranked:
            if isinstance(scored, JuryScoredCompletion):
                console.print(_members_table(scored))
            elif scored.criteria:
                console.print(_breakdown_table(scored))
    _print_without(report.without_rubric, report.without_reasons)
    console.print(
        f"{report.judgments} judgment(s): {report.computed} computed, {report.cached} from the cache, "
        f"{report.failed} failed{_by_class(report.failures)}; {report.checks} check(s); "
        f"{report.backend_requests} backend request(s)"
    )
    for alarm in report.alarms:
        err_console.print(f"[yellow]alarm[/yellow]: {alarm}")
    if report.judgments and report.cached == report.judgments:
        console.print("Everything came from the cache: no judge was called.")


def _print_without(without: list[int], reasons: dict[str, list[int]]) -> None:
    """Why selected completions were not scored, with the fix each reason needs."""
    if not without:
        return
    if not any(reasons.values()):  # not known (a job's report): both fixes
        console.print(
            f"{len(without)} completion(s) have no usable rubric version (their prompt has "
            "no rubric and none is assigned, or only drafts: pass --include-drafts)"
        )
        return
    hints = {
        "no_rubric": "have no rubric: their prompt has none and none is assigned (a `rubric` "
        "field in the completions or prompts file, `rubricsvc prompts assign`, or a rubric "
        "file naming the prompt)",
        "drafts": "have only draft rubric versions (approve one, or pass --include-drafts)",
        "retired": "have only retired rubric versions (approve a new version)",
    }
    for reason, ids in reasons.items():
        if ids:
            shown = ", ".join(map(str, ids[:10])) + (", ..." if len(ids) > 10 else "")
            console.print(f"{len(ids)} completion(s) {hints[reason]}: ids {shown}")


def _by_class(failures: dict[str, int]) -> str:
    """`` (2 infrastructure, 1 response)``: the failed judgments by who caused them."""
    parts = [f"{n} {name}" for name, n in failures.items() if n]
    return f" ({', '.join(parts)})" if parts else ""


def _breakdown_table(scored: ScoredCompletion) -> Table:
    title = f"{scored.completion_external_id or scored.completion_id}: {_fmt(scored.value)}"
    if scored.reasons:
        title += f" ({'; '.join(scored.reasons)})"
    table = Table(title=title, title_justify="left")
    for column in ("weight", "verdict", "value", "criterion"):
        table.add_column(column, justify="right" if column in {"weight", "value"} else "left")
    for entry in scored.criteria:
        verdict = entry.get("verdict") or entry["status"]
        if entry["status"] == "failed":
            verdict = f"[red]failed ({entry.get('failure')})[/red]: {entry.get('error', '')}"[:96]
        elif entry["status"] == "unjudgeable":
            verdict = f"[yellow]worst (response)[/yellow]: {entry.get('error', '')}"[:96]
        table.add_row(f"{entry['weight']:g}", verdict, _fmt(entry["value"]), entry["text"])
    return table


def _members_table(scored: JuryScoredCompletion) -> Table:
    """A jury's score: each member's, and how far apart they are."""
    title = (
        f"{scored.completion_external_id or scored.completion_id}: {_fmt(scored.value)} "
        f"({scored.combine} of {len(scored.members)}, spread {_fmt(scored.spread)}, "
        f"confidence {_fmt(scored.confidence)})"
    )
    if scored.reasons:
        title += f" ({'; '.join(scored.reasons)})"
    table = Table(title=title, title_justify="left")
    for column in ("member", "value", "status", "config"):
        table.add_column(column, justify="right" if column == "value" else "left")
    for member in scored.members:
        config = f"{member['judge']} {str(member['config_hash'])[:12]}"
        table.add_row(str(member["member"]), _fmt(member["value"]), str(member["status"]), config)
    return table
