"""A criterion-level training set with contrast, built from the store as a label set.

A judge trained on per-criterion yes/no labels learns to read the text only where the labels
differ between completions: a criterion every completion meets is learned as "always yes".
So the build

1. labels every stored completion of the chosen prompts per criterion, by a labeller that is
   either a checks rubric per prompt (``checks:{prompt_id}/gold``: criteria whose check decides
   them exactly, for free) or a stored label set (its labels as they are);
2. with a checks labeller, adds seeded perturbed copies of each completion (``perturb``),
   stored as completions of their own, which the checks label like any other text;
3. splits by prompt (``validation.calibration.split_prompts``, as distillation does), so no
   held-out prompt's completion or perturbed copy is trained on;
4. balances each criterion on the training side: at most ``max_ratio`` times as many labels of
   its majority value as of its minority (a one-valued criterion keeps none: it teaches only
   its usual answer), and reports each criterion's yes and no counts before and after;
5. stores the labels as a new label set, each tagged ``train`` or ``test``, in the caller's
   transaction (nothing is stored when any step fails).

``rubricsvc judges distill --labels NAME`` learns judged criteria only. A gold rubric's criteria
are checks, so ``onto`` names the judged rubric of each prompt whose criteria the labels are
for (matched to the checks by text, as a judge refresh matches them: ``trainer/refresh.py``);
the report says whether distillation's own split of the stored set is the build's.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, selectinload

from rubricsvc.errors import ConflictError, NotFoundError, ValidationFailed
from rubricsvc.genrm.perturb import KINDS, perturb
from rubricsvc.hashing import content_hash
from rubricsvc.judging.readers.checks import TRAJECTORY_CHECKS, run_check
from rubricsvc.models import (
    Completion,
    Criterion,
    CriterionKind,
    CriterionTarget,
    Label,
    LabelKind,
    LabelSet,
    Prompt,
    RubricVersion,
)
from rubricsvc.rubrics.repository import get_rubric, latest_version
from rubricsvc.validation.calibration import split_prompts
from rubricsvc.validation.labelsets import MET, NOT_MET, LabelInput, get_label_set, save_label_set

CHECKS = "checks:"
# The source of a perturbed copy is this and its kind; its metadata names its original.
PERTURBED_SOURCE = "genrm-perturb:"
TRAIN, TEST = "train", "test"


@dataclass(frozen=True)
class BuildRequest:
    name: str  # the new label set's
    labeller: str  # "checks:PATTERN" or a stored label set's name
    prompts: tuple[str, ...] = ()  # external ids; empty: every prompt the labeller covers
    perturb: tuple[str, ...] = ()
    seed: int = 0
    test_share: float = 0.3
    max_ratio: float = 3.0
    onto: str | None = None  # a rubric pattern whose judged criteria the check labels are for
    pitfalls: tuple[str, ...] = ()  # the sentences insert_pitfall chooses from

    @property
    def train_share(self) -> float:
        """The share of prompts trained on, as ``--split prompt:SHARE`` gives it to distill."""
        return round(1.0 - self.test_share, 6)


@dataclass(frozen=True)
class Item:
    """One (completion, criterion) and its labellers' labels."""

    prompt_id: int
    completion_id: int
    criterion_id: int
    labels: tuple[tuple[str, float, str | None], ...]  # (labeller, value, verdict) each

    @property
    def met(self) -> bool:
        return sum(value for _, value, _ in self.labels) / len(self.labels) >= 0.5


@dataclass
class Labelled:
    """What a labeller labelled, and what it left out."""

    items: list[Item]
    prompts: dict[int, Prompt]
    completions: dict[int, Completion]
    criteria: dict[int, Criterion]
    originals: int
    rubrics: list[str] = field(default_factory=list)  # the versions read, NAME@N
    left_out: Counter[str] = field(default_factory=Counter)  # why -> criteria left out
    perturbed: Counter[str] = field(default_factory=Counter)  # kind -> copies
    not_applicable: Counter[str] = field(default_factory=Counter)  # kind -> originals


def build_training_set(session: Session, request: BuildRequest) -> dict[str, Any]:
    """Label, perturb, split, balance and store ``request.name``; the report of it."""
    _check_request(session, request)
    if request.labeller.startswith(CHECKS):
        labelled = label_with_checks(session, request, request.labeller.removeprefix(CHECKS))
    else:
        labelled = label_from_set(session, request, get_label_set(session, request.labeller))
    if not labelled.items:
        raise ValidationFailed(
            f"labeller {request.labeller!r} labels no stored completion of the prompts: add "
            "completions first (rubricsvc completions add)"
        )
    train_prompts, test_prompts = _split(labelled.items, request)
    held = set(test_prompts)
    train = [i for i in labelled.items if i.prompt_id not in held]
    test = [i for i in labelled.items if i.prompt_id in held]
    kept = balance(train, request.max_ratio, request.seed)
    saved = save_label_set(
        session,
        request.name,
        f"genrm build: {request.labeller}",
        _description(request),
        _label_inputs(labelled, kept, TRAIN) + _label_inputs(labelled, test, TEST),
    )
    return {
        "label_set": request.name,
        "data_hash": saved.content_hash,
        "labeller": request.labeller,
        "onto": request.onto,
        "rubrics": labelled.rubrics,
        "seed": request.seed,
        "max_ratio": request.max_ratio,
        "prompts": {
            TRAIN: [_prompt_name(labelled.prompts[p]) for p in train_prompts],
            TEST: [_prompt_name(labelled.prompts[p]) for p in test_prompts],
        },
        "completions": {
            "original": labelled.originals,
            "perturbed": {kind: labelled.perturbed[kind] for kind in request.perturb},
            "not_applicable": {kind: labelled.not_applicable[kind] for kind in request.perturb},
        },
        "labels": {TRAIN: len(kept), "train_dropped": len(train) - len(kept), TEST: len(test)},
        "criteria_left_out": dict(sorted(labelled.left_out.items())),
        **contrast_report(labelled, train, kept, test),
        "distill": _distill_view(labelled, kept + test, request, test_prompts),
    }


def _check_request(session: Session, request: BuildRequest) -> None:
    """Refuse bad input before anything is read or stored."""
    if session.scalar(select(LabelSet.id).where(LabelSet.name == request.name)) is not None:
        raise ConflictError(
            f"label set {request.name!r} already exists (label sets are never edited): name the "
            "new set anew"
        )
    unknown = [kind for kind in request.perturb if kind not in KINDS]
    if unknown:
        raise ValidationFailed(
            f"unknown perturbation(s) {', '.join(unknown)}; kinds: {', '.join(KINDS)}"
        )
    if len(set(request.perturb)) != len(request.perturb):
        raise ValidationFailed(f"--perturb names a kind twice: {','.join(request.perturb)}")
    if "insert_pitfall" in request.perturb and not any(p.strip() for p in request.pitfalls):
        raise ValidationFailed(
            "insert_pitfall needs the sentence(s) to insert: give --pitfall TEXT"
        )
    if not 0.0 < request.test_share < 1.0:
        raise ValidationFailed(
            f"--test-share {request.test_share:g}: the held-out share of prompts is between 0 and 1"
        )
    if request.max_ratio < 1.0:
        raise ValidationFailed(
            f"--max-ratio {request.max_ratio:g}: the majority value may outnumber the minority "
            "by 1 or more times"
        )
    if request.labeller.startswith(CHECKS):
        _check_pattern("--labeller", request.labeller.removeprefix(CHECKS))
        if request.onto is not None:
            _check_pattern("--onto", request.onto)
        return
    if request.perturb:
        raise ValidationFailed(
            f"labeller {request.labeller!r} is a label set: it labels only the completions it "
            "holds, so perturbed copies would have no labels; perturb with a checks labeller "
            "(checks:{prompt_id}/gold) or drop --perturb"
        )
    if request.onto is not None:
        raise ValidationFailed(
            "--onto matches a checks labeller's criteria to judged ones; a label set's labels "
            "stay on their own criteria"
        )


def _check_pattern(option: str, pattern: str) -> None:
    try:
        pattern.format(prompt_id="p")
    except (KeyError, IndexError, ValueError):
        raise ValidationFailed(
            f"{option} {pattern!r}: the only placeholder a rubric pattern may hold is {{prompt_id}}"
        ) from None
    if "{prompt_id}" not in pattern:
        raise ValidationFailed(
            f"{option} {pattern!r} names one rubric: a pattern names each prompt's own by "
            "{prompt_id}, its external id (e.g. {prompt_id}/gold)"
        )


# --- labellers -----------------------------------------------------------------------------------


def label_with_checks(session: Session, request: BuildRequest, pattern: str) -> Labelled:
    """Every criterion with a check of each prompt's ``pattern`` rubric, on every stored
    completion of the prompt and on its perturbed copies."""
    prompts = _chosen_prompts(session, request.prompts, pattern)
    labelled = Labelled([], {p.id: p for p in prompts}, {}, {}, originals=0)
    labeller = f"{CHECKS}{pattern}"
    for prompt in prompts:
        version = _version(session, pattern, prompt, "--labeller")
        targets = _check_targets(session, request, prompt, version, labelled)
        labelled.rubrics.append(version.ref)
        originals = _stored_completions(session, [prompt.id])
        labelled.originals += len(originals)
        copies = _perturbed_copies(session, request, prompt, originals, labelled)
        for completion in [*originals, *copies]:
            labelled.completions[completion.id] = completion
            for check, target in targets:
                assert check.check is not None  # chosen for their checks
                met = run_check(check.check, completion.text)
                labelled.criteria[target.id] = target
                labelled.items.append(
                    Item(
                        prompt.id,
                        completion.id,
                        target.id,
                        ((labeller, 1.0 if met else 0.0, MET if met else NOT_MET),),
                    )
                )
    if not labelled.criteria:
        reasons = "; ".join(f"{n} {why}" for why, n in sorted(labelled.left_out.items()))
        raise ValidationFailed(
            f"labeller {labeller!r}: no criterion to label ({reasons}); a checks labeller "
            "labels the criteria whose check reads the response"
        )
    return labelled


def _check_targets(
    session: Session,
    request: BuildRequest,
    prompt: Prompt,
    version: RubricVersion,
    labelled: Labelled,
) -> list[tuple[Criterion, Criterion]]:
    """(criterion whose check labels, criterion the label is for) of one prompt's rubric: the
    same criterion, or with ``onto`` the judged criterion of that text (first with first)."""
    checked = []
    for criterion in version.criteria:
        if criterion.kind != CriterionKind.CHECK or not criterion.check:
            labelled.left_out["without a check"] += 1
        elif criterion.check["type"] in TRAJECTORY_CHECKS:
            labelled.left_out["check on the trajectory, which a copy does not have"] += 1
        else:
            checked.append(criterion)
    if request.onto is None:
        return [(c, c) for c in checked]
    onto = _version(session, request.onto, prompt, "--onto")
    labelled.rubrics.append(onto.ref)
    judged: dict[str, list[Criterion]] = defaultdict(list)
    for criterion in onto.criteria:
        if _learnable(criterion):
            judged[criterion.text].append(criterion)
    pairs = []
    for criterion in checked:
        twins = judged.get(criterion.text)
        if twins:
            pairs.append((criterion, twins.pop(0)))
        else:
            labelled.left_out[f"no judged criterion of the same text in {request.onto}"] += 1
    return pairs


def label_from_set(session: Session, request: BuildRequest, label_set: LabelSet) -> Labelled:
    """The pointwise labels of ``label_set`` as they are (each labeller's), on its prompts or
    on the chosen ones."""
    query = (
        select(Label)
        .where(
            Label.label_set_id == label_set.id,
            Label.kind == LabelKind.POINTWISE,
            Label.criterion_id.is_not(None),
        )
        .order_by(Label.id)
    )
    grouped: dict[tuple[int, int, int], list[tuple[str, float, str | None]]] = defaultdict(list)
    for label in session.scalars(query):
        assert label.criterion_id is not None  # by the query
        key = (label.prompt_id, label.completion_id, label.criterion_id)
        grouped[key].append((label.labeller, label.value, label.verdict))
    labelled_prompts = _rows(session, Prompt, {key[0] for key in grouped})
    if request.prompts:
        chosen = _prompts_by_external_id(session, request.prompts)
        missing = [_prompt_name(p) for p in chosen if p.id not in labelled_prompts]
        if missing:
            raise NotFoundError(
                f"label set {label_set.name!r} has no pointwise labels of prompt(s) "
                f"{', '.join(missing)}"
            )
        labelled_prompts = {p.id: p for p in chosen}
    items = [
        Item(prompt_id, completion_id, criterion_id, tuple(labels))
        for (prompt_id, completion_id, criterion_id), labels in sorted(grouped.items())
        if prompt_id in labelled_prompts
    ]
    completions = _rows(session, Completion, {i.completion_id for i in items})
    return Labelled(
        items,
        labelled_prompts,
        completions,
        _rows(session, Criterion, {i.criterion_id for i in items}),
        originals=len(completions),
        rubrics=[f"label set {label_set.name} ({label_set.content_hash[:12]})"],
    )


# --- prompts, rubrics and completions ------------------------------------------------------------


def _chosen_prompts(session: Session, external_ids: Sequence[str], pattern: str) -> list[Prompt]:
    """The prompts named, or every prompt with an external id whose ``pattern`` rubric exists."""
    if external_ids:
        prompts = _prompts_by_external_id(session, external_ids)
        missing = [
            f"{p.external_id} (no rubric {_rubric_name(pattern, p)!r})"
            for p in prompts
            if get_rubric(session, str(_rubric_name(pattern, p))) is None
        ]
        if missing:
            raise NotFoundError(
                f"rubric pattern {pattern!r} matches no rubric of prompt(s) {', '.join(missing)}"
            )
        return prompts
    named = list(
        session.scalars(
            select(Prompt).where(Prompt.external_id.is_not(None)).order_by(Prompt.external_id)
        )
    )
    prompts = [p for p in named if get_rubric(session, str(_rubric_name(pattern, p))) is not None]
    if not prompts:
        raise NotFoundError(
            f"rubric pattern {pattern!r} matches no rubric of any stored prompt (it is formatted "
            "with each prompt's external id)"
        )
    return prompts


def _prompts_by_external_id(session: Session, external_ids: Sequence[str]) -> list[Prompt]:
    found = {
        p.external_id: p
        for p in session.scalars(select(Prompt).where(Prompt.external_id.in_(set(external_ids))))
    }
    unknown = [e for e in dict.fromkeys(external_ids) if e not in found]
    if unknown:
        raise NotFoundError(f"no prompt with external id {', '.join(map(repr, unknown))}")
    return [found[e] for e in dict.fromkeys(external_ids)]


def _rubric_name(pattern: str, prompt: Prompt) -> str | None:
    return None if prompt.external_id is None else pattern.format(prompt_id=prompt.external_id)


def _version(session: Session, pattern: str, prompt: Prompt, option: str) -> RubricVersion:
    """The latest version of ``prompt``'s ``pattern`` rubric, criteria loaded."""
    name = _rubric_name(pattern, prompt)
    rubric = get_rubric(session, name) if name is not None else None
    version = latest_version(session, rubric) if rubric is not None else None
    if version is None:
        raise NotFoundError(
            f"{option} {pattern!r} matches no rubric of prompt {_prompt_name(prompt)} "
            f"(no rubric {name!r})"
        )
    return version


def _stored_completions(session: Session, prompt_ids: Sequence[int]) -> list[Completion]:
    """The prompts' completions, not counting copies an earlier build perturbed."""
    query = (
        select(Completion)
        .where(
            Completion.prompt_id.in_(prompt_ids),
            or_(
                Completion.source.is_(None),
                Completion.source.not_like(f"{PERTURBED_SOURCE}%"),
            ),
        )
        .order_by(Completion.id)
    )
    return list(session.scalars(query))


def _perturbed_copies(
    session: Session,
    request: BuildRequest,
    prompt: Prompt,
    originals: Sequence[Completion],
    labelled: Labelled,
) -> list[Completion]:
    """Each original's copy by each kind that applies, stored (a copy of the same text and kind
    stored before, by an earlier build, is used again)."""
    copies: dict[tuple[str, str], Completion] = {}
    for original in originals:
        for kind in request.perturb:
            made = perturb(
                kind, original.text, request.seed, prompt=prompt.text, pitfalls=request.pitfalls
            )
            if made is None:
                labelled.not_applicable[kind] += 1
                continue
            source = f"{PERTURBED_SOURCE}{kind}"
            digest = content_hash(made.text)
            if (source, digest) in copies:
                continue  # another original gave the same copy (copy_prompt gives one per prompt)
            copies[(source, digest)] = _stored_copy(
                session, prompt, made.text, digest, source, original, request.seed
            )
            labelled.perturbed[kind] += 1
    return list(copies.values())


def _stored_copy(
    session: Session,
    prompt: Prompt,
    text: str,
    digest: str,
    source: str,
    original: Completion,
    seed: int,
) -> Completion:
    stored = session.scalar(
        select(Completion)
        .where(
            Completion.prompt_id == prompt.id,
            Completion.content_hash == digest,
            Completion.source == source,
        )
        .limit(1)
    )
    if stored is not None:
        return stored
    copy = Completion(
        prompt_id=prompt.id,
        text=text,
        content_hash=digest,
        source=source,
        meta={
            "perturbed_from": original.id,
            "perturbed_from_hash": original.content_hash,
            "perturbation": source.removeprefix(PERTURBED_SOURCE),
            "seed": seed,
        },
    )
    session.add(copy)
    session.flush()
    return copy


def _rows(session: Session, model: Any, ids: Iterable[int]) -> dict[int, Any]:
    wanted = set(ids)
    if not wanted:
        return {}
    query = select(model).where(model.id.in_(wanted))
    if model is Completion:
        query = query.options(selectinload(Completion.prompt))
    return {row.id: row for row in session.scalars(query)}


def _prompt_name(prompt: Prompt) -> str:
    return prompt.external_id if prompt.external_id is not None else f"#{prompt.id}"


# --- split, balance, contrast --------------------------------------------------------------------


def _split(items: Sequence[Item], request: BuildRequest) -> tuple[list[int], list[int]]:
    """(training prompts, held-out prompts), drawn as ``judges distill --split
    prompt:TRAIN_SHARE`` draws them from the same prompts and seed."""
    try:
        return split_prompts(
            sorted({i.prompt_id for i in items}), 1.0 - request.train_share, request.seed
        )
    except ValueError as err:
        raise ValidationFailed(
            f"cannot split the labels by prompt: {err} (choose more prompts)"
        ) from None


def balance(items: Sequence[Item], max_ratio: float, seed: int) -> list[Item]:
    """``items`` with each criterion's majority value kept to at most ``max_ratio`` times its
    minority (a random draw of them, by ``seed``); the order kept."""
    by_criterion: dict[int, list[Item]] = defaultdict(list)
    for item in items:
        by_criterion[item.criterion_id].append(item)
    dropped: set[Item] = set()
    for criterion_id, group in by_criterion.items():
        yes = [i for i in group if i.met]
        no = [i for i in group if not i.met]
        majority, minority = (yes, no) if len(yes) >= len(no) else (no, yes)
        most = int(max_ratio * len(minority))
        if len(majority) > most:
            rng = random.Random(f"{seed}/balance/{criterion_id}")
            dropped.update(rng.sample(majority, len(majority) - most))
    return [i for i in items if i not in dropped]


def _counts(items: Iterable[Item]) -> dict[int, Counter[bool]]:
    counts: dict[int, Counter[bool]] = defaultdict(Counter)
    for item in items:
        counts[item.criterion_id][item.met] += 1
    return counts


def contrast_report(
    labelled: Labelled, train: Sequence[Item], kept: Sequence[Item], test: Sequence[Item]
) -> dict[str, Any]:
    """Per criterion: its yes and no labels on each side (training before and after balancing),
    and whether it has contrast (both values); the share of criteria that have."""
    before, after, held = _counts(train), _counts(kept), _counts(test)
    prompt_of = {i.criterion_id: i.prompt_id for i in [*train, *test]}
    rows = []
    for criterion_id in sorted(set(before) | set(held)):
        criterion = labelled.criteria[criterion_id]
        seen = before.get(criterion_id, Counter()) + held.get(criterion_id, Counter())
        sides = [side for side, n in ((TRAIN, before), (TEST, held)) if criterion_id in n]
        rows.append(
            {
                "criterion_id": criterion_id,
                "prompt": _prompt_name(labelled.prompts[prompt_of[criterion_id]]),
                "text": criterion.text,
                "side": "+".join(sides),
                "train_before": _yes_no(before.get(criterion_id)),
                "train_after": _yes_no(after.get(criterion_id)),
                "test": _yes_no(held.get(criterion_id)),
                "contrast": len(seen) == 2,
                "one_valued": len(seen) == 1,
            }
        )
    with_contrast = sum(1 for row in rows if row["contrast"])
    return {
        "criteria": rows,
        "criteria_with_contrast": with_contrast,
        "contrast_share": round(with_contrast / len(rows), 4) if rows else 0.0,
        "one_valued": [row["criterion_id"] for row in rows if row["one_valued"]],
    }


def _yes_no(counts: Counter[bool] | None) -> dict[str, int]:
    counts = counts or Counter()
    return {"yes": counts[True], "no": counts[False]}


# --- storing -------------------------------------------------------------------------------------


def _label_inputs(labelled: Labelled, items: Sequence[Item], side: str) -> list[LabelInput]:
    return [
        LabelInput(
            kind=LabelKind.POINTWISE,
            item=f"{item.completion_id}/{item.criterion_id}",
            prompt=labelled.prompts[item.prompt_id],
            completion=labelled.completions[item.completion_id],
            labeller=labeller,
            value=value,
            verdict=verdict,
            criterion=labelled.criteria[item.criterion_id],
            tags=(side,),
        )
        for item in items
        for labeller, value, verdict in item.labels
    ]


def _description(request: BuildRequest) -> str:
    perturbed = ", ".join(request.perturb) or "none"
    return (
        f"criterion-level training set: perturbations {perturbed}; seed {request.seed}; "
        f"{request.test_share:g} of prompts held out; majority at most {request.max_ratio:g}x "
        "the minority per criterion on the training side"
    )


def _learnable(criterion: Criterion) -> bool:
    """Whether distillation learns this criterion: a judged yes/no one on the response."""
    return (
        criterion.kind == CriterionKind.JUDGE
        and criterion.scale.get("type", "binary") == "binary"
        and criterion.target == CriterionTarget.RESPONSE.value
    )


def _distill_view(
    labelled: Labelled, stored: Sequence[Item], request: BuildRequest, test_prompts: list[int]
) -> dict[str, Any]:
    """What ``judges distill --labels`` makes of the stored set: the labels it learns (judged
    yes/no criteria) and whether its split by prompt, drawn again from those labels' prompts,
    is the build's (a prompt whose every training label was balanced away would shift it)."""
    learnable = [i for i in stored if _learnable(labelled.criteria[i.criterion_id])]
    prompt_ids = sorted({i.prompt_id for i in learnable})
    same = False
    if len(prompt_ids) >= 2:
        _, held = split_prompts(prompt_ids, 1.0 - request.train_share, request.seed)
        same = held == sorted(test_prompts)
    options = f"--split prompt:{request.train_share:g}"
    if request.seed:
        options += f" and seed {request.seed} in its --config"
    note = None
    if not learnable:
        note = (
            "no label is on a judged yes/no criterion, which is what distillation learns: "
            "label a judged rubric's criteria with --onto (e.g. --onto '{prompt_id}/proxy')"
        )
    elif not same:
        note = "distillation's split of these labels differs from the build's"
    return {
        "command": f"rubricsvc judges distill --labels {request.name} {options}",
        "learnable_labels": len(learnable),
        "same_split": same,
        "note": note,
    }
