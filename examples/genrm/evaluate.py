"""Judges measured against gold on the over-optimization lab's held-out prompts.

For each judge (default: ``embedded`` and ``genrm``), every recorded held-out answer (the
``held-out.jsonl`` that ``collect.py`` writes: the policies' greedy answers to the lab's
held-out prompts, which no judge here was trained on) is scored with its prompt's proxy rubric
(``{prompt_id}/proxy``, judged) and its gold rubric (``{prompt_id}/gold``, decided by checks,
no model), in one in-process scoring run per judge, as ``rubricsvc score`` does. Then:

1. **Per criterion**: the judge's verdict (met when its value is at least 0.5: for a
   criterion-prob judge, P(yes)) against the check of the gold criterion with the same text,
   over every (answer, criterion): agreement, Cohen's kappa, and how often each says "met".
2. **Within-group order agreement with gold** (docs/overoptimization.md; the pairs are
   counted by ``trainer.agreement.pair_credits``, as the lab counts them): a group is one
   held-out prompt at one evaluation step, holding the distinct answers the recorded runs gave
   it there; of the pairs of a group that gold tells apart, the share the judge's proxy score
   puts in gold's order (a tie counts half). 0.5 is ranking at random by gold's standard.

Every figure comes with a 95% percentile bootstrap interval that resamples **prompts** (there
are 9 held-out prompts, so read the intervals as rough), and, for the second judge onwards,
its difference from the first judge with a paired interval (both judges' figures on a drawn
prompt drawn together). Written as ``evaluation.json`` and ``evaluation.md`` in ``--out``.

The database (``RUBRICSVC_DATABASE_URL``) must hold the lab's rubrics, the collected held-out
completions and the judges (``run.sh`` sets one up). Verdicts already stored are reused.

    python examples/genrm/evaluate.py --completions DIR/held-out.jsonl --out DIR
        [--judges embedded,genrm] [--prompts ID,ID] [--per-group N] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from rubricsvc.backends.provider import BackendProvider
from rubricsvc.config import get_settings
from rubricsvc.db import make_engine, session_scope
from rubricsvc.models import Completion
from rubricsvc.rubrics.repository import get_rubric, latest_version
from rubricsvc.scoring.judge_configs import find_reward_judge
from rubricsvc.scoring.jury import score_judge
from rubricsvc.scoring.options import score_options
from rubricsvc.scoring.selection import Selection
from rubricsvc.validation.metrics import accuracy, bootstrap_interval, cohen_kappa
from trainer.agreement import pair_credits
from trainer.overopt import Split, load_task_set

REPO = Path(__file__).resolve().parents[2]
HELD_OUT_SOURCE = "overopt-held-out"  # collect.py's source for the recorded held-out answers
MET, NOT_MET = "met", "not met"
# A recorded gold score and the one scored here are the same checks on the same text: they
# differ only by float rounding, or else the rubrics are not the ones the runs used.
GOLD_TOLERANCE = 1e-9


@dataclass
class Answer:
    """One distinct held-out answer and the groups (step, prompt) it is in."""

    external_id: str
    prompt_id: str
    steps: set[int] = field(default_factory=set)
    recorded_gold: set[float] = field(default_factory=set)


def read_answers(path: Path, prompts: set[str]) -> list[Answer]:
    """The recorded held-out answers of ``prompts`` in a collected file, with their groups."""
    answers = []
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            if record["source"] != HELD_OUT_SOURCE or record["prompt_external_id"] not in prompts:
                continue
            answer = Answer(record["external_id"], record["prompt_external_id"])
            for seen in record["metadata"]["seen"]:
                answer.steps.add(int(seen["step"]))
                answer.recorded_gold.add(float(seen["gold"]))
            answers.append(answer)
    return answers


def at_most_per_group(answers: list[Answer], per_group: int | None, seed: int) -> list[Answer]:
    """At most ``per_group`` answers in each (step, prompt) group, a seeded draw; an answer
    keeps only the groups it was drawn for, and one drawn for none is left out."""
    if per_group is None:
        return answers
    groups: dict[tuple[int, str], list[int]] = {}
    for n, answer in enumerate(answers):
        for step in answer.steps:
            groups.setdefault((step, answer.prompt_id), []).append(n)
    rng = random.Random(seed)
    drawn: dict[int, set[int]] = {}
    for key in sorted(groups):
        members = groups[key]
        for n in members if len(members) <= per_group else rng.sample(members, per_group):
            drawn.setdefault(n, set()).add(key[0])
    return [
        Answer(a.external_id, a.prompt_id, drawn[n], a.recorded_gold)
        for n, a in enumerate(answers)
        if n in drawn
    ]


@dataclass
class Scored:
    """One judge's scores of the answers (by external id): the proxy and gold score, and
    per criterion text whether the judge and the check say it is met."""

    proxy: dict[str, float | None] = field(default_factory=dict)
    gold: dict[str, float | None] = field(default_factory=dict)
    judged: dict[str, dict[str, str | None]] = field(default_factory=dict)
    checked: dict[str, dict[str, str | None]] = field(default_factory=dict)
    judgments: int = 0
    failed: int = 0


def score_answers(judge: str, answers: Sequence[Answer], prompts: Sequence[str]) -> Scored:
    """Score every answer with its prompt's proxy and gold rubric versions (the newest of each,
    drafts included: the lab's rubrics are not approved), in one run of ``judge``."""
    settings = get_settings()
    options = score_options(settings.scoring)
    engine = make_engine(settings.db.url)
    with BackendProvider.from_settings(settings) as backends, session_scope(engine) as session:
        versions = []
        for prompt_id in prompts:
            for part in ("proxy", "gold"):
                rubric = get_rubric(session, f"{prompt_id}/{part}")
                version = latest_version(session, rubric) if rubric else None
                if version is None:
                    raise SystemExit(f"no rubric {prompt_id}/{part}: add the lab's rubrics.yaml")
                versions.append(version.id)
        names = [a.external_id for a in answers]
        query = select(Completion.external_id, Completion.id).where(
            Completion.external_id.in_(names)
        )
        ids = {name: id_ for name, id_ in session.execute(query)}
        missing = [name for name in names if name not in ids]
        if missing:
            raise SystemExit(f"{len(missing)} answers are not stored (first: {missing[0]})")
        selection = Selection(
            completion_ids=tuple(ids[name] for name in names),
            version_ids=tuple(versions),
            include_drafts=True,
        )
        spec = find_reward_judge(session, judge)
        report = score_judge(session, spec, selection, options, backends.factory)
    scored = Scored(judgments=report.judgments, failed=report.failed)
    for score in report.scores:
        name = score.completion_external_id or str(score.completion_id)
        # The lab writes both rubrics of a prompt from one list of criteria, so a judged
        # criterion and its check have the same text: that is how they are matched.
        verdicts = {c["text"]: _met(c) for c in score.criteria}
        if score.rubric.split("@")[0].endswith("/gold"):
            scored.gold[name], scored.checked[name] = score.value, verdicts
        else:
            scored.proxy[name], scored.judged[name] = score.value, verdicts
    return scored


def _met(criterion: dict[str, Any]) -> str | None:
    """Met or not by a criterion's value (P(yes) for criterion-prob, 1 or 0 for a check);
    None where it has no value (a failed judgment)."""
    value = criterion.get("value")
    if value is None or criterion.get("status") not in ("ok", "check"):
        return None
    return MET if value >= 0.5 else NOT_MET


# --- figures ---------------------------------------------------------------------------------


@dataclass
class Items:
    """Per-item values, each with the prompt it belongs to (the bootstrap's cluster)."""

    values: list[Any] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)


def criterion_items(scored: Scored, answers: Sequence[Answer]) -> Items:
    """(judge met, gold met) per (answer, criterion) the judge decided."""
    items = Items()
    for answer in answers:
        judged = scored.judged.get(answer.external_id, {})
        for text, gold in scored.checked.get(answer.external_id, {}).items():
            verdict = judged.get(text)
            if verdict is not None and gold is not None:
                items.values.append((verdict, gold))
                items.prompts.append(answer.prompt_id)
    return items


def pair_items(scored: Scored, answers: Sequence[Answer]) -> Items:
    """The credit (1, 0.5 or 0) of each pair gold tells apart within a (step, prompt) group."""
    samples = [
        {
            "step": step,
            "prompt_id": answer.prompt_id,
            "rubric_reward": scored.proxy.get(answer.external_id),
            "gold_reward": scored.gold.get(answer.external_id),
        }
        for answer in answers
        for step in sorted(answer.steps)
    ]
    credit, groups = pair_credits(samples)
    return Items(list(credit), [prompt for _, prompt in groups])


Statistic = Callable[[Sequence[Any]], float | None]


def _agreement(values: Sequence[tuple[str, str]]) -> float | None:
    return accuracy([j for j, _ in values], [g for _, g in values])


def _kappa(values: Sequence[tuple[str, str]]) -> float | None:
    return cohen_kappa([j for j, _ in values], [g for _, g in values])


def _says_met(values: Sequence[tuple[str, str]]) -> float | None:
    return statistics.fmean(j == MET for j, _ in values) if values else None


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def figure(items: Items, statistic: Statistic, resamples: int, seed: int) -> dict[str, Any]:
    """The statistic over the items and its 95% interval resampling prompts."""
    interval = bootstrap_interval(
        items.prompts,
        lambda drawn: statistic([items.values[i] for i in drawn]),
        resamples=resamples,
        seed=seed,
    )
    return {"value": statistic(items.values), "interval": list(interval) if interval else None}


def difference(
    first: Items, other: Items, statistic: Statistic, resamples: int, seed: int
) -> dict[str, Any]:
    """``statistic`` of ``other`` minus that of ``first``, with a paired interval: a drawn
    prompt brings both judges' items (so the prompts' difficulty cancels)."""
    both = [(0, v) for v in first.values] + [(1, v) for v in other.values]
    prompts = first.prompts + other.prompts

    def gap(drawn: Sequence[int]) -> float | None:
        a = statistic([both[i][1] for i in drawn if both[i][0] == 0])
        b = statistic([both[i][1] for i in drawn if both[i][0] == 1])
        return None if a is None or b is None else b - a

    interval = bootstrap_interval(prompts, gap, resamples=resamples, seed=seed)
    return {
        "value": gap(range(len(both))),
        "interval": list(interval) if interval else None,
    }


STATISTICS: dict[str, tuple[str, Statistic]] = {
    "criterion_agreement": ("criteria", _agreement),
    "criterion_kappa": ("criteria", _kappa),
    "says_met": ("criteria", _says_met),
    "order_agreement": ("pairs", _mean),
}


def evaluate(
    judges: Sequence[str],
    answers: Sequence[Answer],
    prompts: Sequence[str],
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    items_of: dict[str, dict[str, Items]] = {}
    gold_mismatches: int | None = None
    for judge in judges:
        scored = score_answers(judge, answers, prompts)
        items = {"criteria": criterion_items(scored, answers), "pairs": pair_items(scored, answers)}
        items_of[judge] = items
        if gold_mismatches is None:  # gold is the checks' whichever judge scores the proxy
            gold_mismatches = sum(
                1
                for a in answers
                for recorded in a.recorded_gold
                if (found := scored.gold.get(a.external_id)) is None
                or abs(recorded - found) > GOLD_TOLERANCE
            )
        criteria = items["criteria"].values
        results[judge] = {
            "judgments": scored.judgments,
            "failed": scored.failed,
            "criterion_verdicts": len(criteria),
            "gold_says_met": _mean([g == MET for _, g in criteria]),
            "pairs": len(items["pairs"].values),
            **{
                name: figure(items[kind], statistic, resamples, seed)
                for name, (kind, statistic) in STATISTICS.items()
            },
        }
    first = judges[0]
    for judge in judges[1:]:
        results[judge]["minus_" + first] = {
            name: difference(items_of[first][kind], items_of[judge][kind], stat, resamples, seed)
            for name, (kind, stat) in STATISTICS.items()
            if name != "says_met"
        }
    return {
        "prompts": list(prompts),
        "answers": len(answers),
        "groups": len({(a.prompt_id, s) for a in answers for s in a.steps}),
        # Answers whose gold scored here is not the gold their runs recorded: 0, or the rubrics
        # are not the ones the runs were scored with.
        "gold_mismatches": gold_mismatches,
        "resamples": resamples,
        "seed": seed,
        "judges": results,
    }


# --- report ----------------------------------------------------------------------------------


def _shown(found: dict[str, Any], signed: bool = False) -> str:
    value, interval = found["value"], found["interval"]
    if value is None:
        return "n/a"
    sign = "+" if signed else ""
    text = f"{value:{sign}.3f}"
    return text + (f" [{interval[0]:{sign}.3f}, {interval[1]:{sign}.3f}]" if interval else "")


def markdown(result: dict[str, Any]) -> str:
    judges = result["judges"]
    lines = [
        f"Held-out prompts: {', '.join(result['prompts'])}; {result['answers']} recorded "
        f"answers in {result['groups']} (step, prompt) groups"
        + (f" (at most {result['per_group']} a group)" if result.get("per_group") else "")
        + f". 95% intervals resample prompts ({result['resamples']} resamples). Gold scored "
        f"here differs from the recorded gold on {result['gold_mismatches']} answers.",
        "",
        "| judge | criterion verdicts | agreement with gold | Cohen's kappa | says met (gold does) "
        "| order agreement with gold | pairs |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, found in judges.items():
        gold_met = found["gold_says_met"]
        lines.append(
            f"| {name} | {found['criterion_verdicts']} | {_shown(found['criterion_agreement'])} "
            f"| {_shown(found['criterion_kappa'])} | {_shown(found['says_met'])} "
            f"({'n/a' if gold_met is None else f'{gold_met:.3f}'}) "
            f"| {_shown(found['order_agreement'])} | {found['pairs']} |"
        )
    differences = [
        (n, k, v) for n, f in judges.items() for k, v in f.items() if k.startswith("minus_")
    ]
    for name, key, found in differences:
        lines += [
            "",
            f"{name} {key.replace('_', ' ')}: agreement {_shown(found['criterion_agreement'], True)}, "
            f"kappa {_shown(found['criterion_kappa'], True)}, order agreement "
            f"{_shown(found['order_agreement'], True)}",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--completions", type=Path, required=True, help="collect.py's held-out.jsonl"
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--judges", default="embedded,genrm", help="comma-separated; the first is the reference"
    )
    parser.add_argument("--tasks", type=Path, default=REPO / "examples" / "overopt" / "tasks.yaml")
    parser.add_argument("--prompts", default=None, help="held-out prompts (default: all of them)")
    parser.add_argument("--per-group", type=int, default=None, help="answers per group, at most")
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    held_out = [task.id for task in load_task_set(args.tasks).split(Split.HELD_OUT)]
    prompts = held_out
    if args.prompts:
        prompts = [p.strip() for p in args.prompts.split(",") if p.strip()]
        outside = [p for p in prompts if p not in held_out]
        if outside:
            raise SystemExit(f"not held-out prompts of the task set: {', '.join(outside)}")
    answers = read_answers(args.completions, set(prompts))
    answers = at_most_per_group(answers, args.per_group, args.seed)
    if not answers:
        raise SystemExit(f"no recorded held-out answers of these prompts in {args.completions}")
    judges = list(dict.fromkeys(j.strip() for j in args.judges.split(",") if j.strip()))
    result = evaluate(judges, answers, prompts, args.resamples, args.seed)
    result["per_group"] = args.per_group
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "evaluation.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    table = markdown(result)
    (args.out / "evaluation.md").write_text(table, encoding="utf-8")
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
