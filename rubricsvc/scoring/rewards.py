"""Rewards for RL loops: (prompt, completion) pairs in, one reward or None per pair out.

The one seam the reward endpoint, the OpenRLHF-shaped route and the trainer's reward function
share. Each pair's prompt is found by its external id or by the hash of its messages (a plain
string is one user message); the completion is stored (once per prompt, text and source, so
every reward can be traced to what produced it) and scored in-process by ``score``, whose
judgment cache makes a repeated pair free. A reward is None where the score is masked (judge
failures over the coverage floor) or the prompt has no usable rubric: never a zero. Where a
trainer must have a number for every sample, ``fill_masked`` gives one that moves nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from itertools import zip_longest
from typing import Any

from sqlalchemy import func, select, tuple_
from sqlalchemy.orm import Session, selectinload

from rubricsvc.batching import batches
from rubricsvc.completion_rows import insert_completions
from rubricsvc.completions import normalized_trajectory
from rubricsvc.documents import (
    DocumentRecord,
    ResolvedDocument,
    attach_documents,
    checked_documents,
    listed_documents,
    resolve_documents,
)
from rubricsvc.errors import NotFoundError, ValidationFailed
from rubricsvc.hashing import content_hash
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.failures import empty_counts
from rubricsvc.models import Completion, CompletionDocument, JudgeConfig, Prompt, Score
from rubricsvc.prompts import prompt_hash
from rubricsvc.scoring.jury import BackendFactories, plan_judge, planned_workload, score_judge
from rubricsvc.scoring.scorer import JudgingTally, ScoredCompletion, ScoreOptions, Workload
from rubricsvc.scoring.selection import Selection, usable_versions

DEFAULT_SOURCE = "rewards"
Messages = list[dict[str, Any]]


@dataclass(frozen=True)
class RewardRequest:
    completion: str
    prompt_id: str | None = None  # the prompt's external id
    prompt: str | Messages | None = None  # else the prompt itself, found by its hash
    rubric: str | None = None  # a rubric version (REF) instead of the prompt's latest usable one
    # An agent's trajectory (OpenAI-style messages with tool calls and results) that led to
    # ``completion``: what trajectory criteria and checks read.
    trajectory: Messages | None = None
    # The evidence it used (``rubricsvc.documents`` records): what citation criteria read.
    documents: list[dict[str, Any]] | None = None
    # The group it belongs to where the server gathers groups (``scoring.groups``): an
    # explicit id (verl's ``uid``); None: its prompt's.
    group: str | None = None
    # ``rubric`` is an evolution run's current version the server routed this request to
    # (``evolution.rollouts.routed_to_current``): usable though no person approved it. Set
    # only by that routing, never from a client's input.
    evolved: bool = False

    def item(self) -> dict[str, Any]:
        """The request as a client sends it (a ``/v1/rewards`` item): without ``evolved``,
        which only the server's routing sets."""
        fields = asdict(self)
        del fields["evolved"]
        return fields

    def messages(self) -> Messages:
        if isinstance(self.prompt, str):
            return [{"role": "user", "content": self.prompt}]
        return list(self.prompt or [])


@dataclass
class RewardResult:
    reward: float | None
    status: str  # a score status (ok, partial, masked, gated, ...) or no_rubric, ambiguous
    coverage: float = 0.0
    rubric: str | None = None
    completion_id: int | None = None
    reasons: list[str] = field(default_factory=list)
    criteria: list[dict[str, Any]] = field(default_factory=list)
    # Failed judgments behind this reward, by who caused them (infrastructure, judge, response).
    failures: dict[str, int] = field(default_factory=empty_counts)
    # A jury's: 1 - the spread of its members' scores (None for a single judge), to weight by.
    confidence: float | None = None
    # Where the reward is masked: the mean of the scores its prompt's completions have under
    # this judge and aggregation (``prompt_means``), if any; for a rollout judged in a
    # gathered group (``scoring.groups``), the mean of its group's rewards, judged with it
    # under one set. A trainer that needs a number for every sample (verl, OpenRLHF) sends
    # it, so the sample moves nothing: never a 0.
    prompt_mean: float | None = None
    # Where the reward is masked and nothing of its prompt has a score yet (the first rollout
    # of a prompt, sent alone): the mean of every score under this judge and aggregation
    # (``judge_mean``), if any. The nearest stand-in for its group's mean; 0 only without it.
    judge_mean: float | None = None
    # Where the server gathered the rollout's group (``scoring.groups``): ``complete``, or
    # ``timed_out`` (the group never filled; judged as it was, under the current set).
    group_status: str | None = None


@dataclass(kw_only=True)
class RewardBatch(JudgingTally):
    judge: str
    judge_config_hash: str
    aggregation: str
    results: list[RewardResult]
    # The tally per completion id (``ScoreReport.by_completion``), to split a batch that
    # served several callers (``scoring.coalescing``).
    by_completion: dict[int, JudgingTally] = field(default_factory=dict)

    @property
    def rewards(self) -> list[float | None]:
        return [r.reward for r in self.results]


def strip_end_tokens(text: str, tokens: Sequence[str]) -> str:
    """``text`` without the ``tokens`` it ends with: a policy's end-of-turn or end-of-text
    tokens, decoded as text. Repeated ones go too, with the whitespace after each (a template's
    newline after ``<|im_end|>``); the text before the last one is kept as it is, whitespace
    included. A token elsewhere in the text stays (the judge is shown it neutralized)."""
    ordered = _longest_first(tuple(tokens))
    if not text.rstrip().endswith(ordered):  # one check in C for the rollout that ends in none
        return text
    # What goes, read from the end in one pass of the regular expression over the reversed
    # text: taking the tokens off one at a time copied the text for each, quadratic time on
    # the server's event loop for a text that ends in a million of them (a request's body may
    # hold 16 MB).
    found = _trailing(ordered).match(text[::-1])
    assert found is not None  # the text ends with a token
    return text[: len(text) - found.end()]


@lru_cache(maxsize=8)
def _trailing(ordered: tuple[str, ...]) -> re.Pattern[str]:
    """Repeated end tokens, each with the whitespace after it, as they read reversed: at each
    step the longest token first (a greedy repetition does not go back to try a shorter
    one), and the whitespace before the last token left in place. ``\\s`` is whitespace as
    ``str.rstrip`` sees it."""
    tokens = "|".join(re.escape(token[::-1]) for token in ordered)
    return re.compile(rf"(?:\s*(?:{tokens}))+")


@lru_cache(maxsize=8)
def _longest_first(tokens: tuple[str, ...]) -> tuple[str, ...]:
    # Sorted once per set of tokens: a server strips them from every rollout it is sent.
    return tuple(sorted((t for t in tokens if t), key=len, reverse=True))


def without_end_tokens(
    requests: Sequence[RewardRequest], tokens: Sequence[str]
) -> list[RewardRequest]:
    """``requests``, each completion without its trailing end tokens (``strip_end_tokens``);
    a request with none is kept as it is (copying each one was a measurable part of a
    one-rollout request's time)."""
    stripped = []
    for request in requests:
        completion = strip_end_tokens(request.completion, tokens)
        unchanged = completion is request.completion  # strip_end_tokens returns it as given
        stripped.append(request if unchanged else replace(request, completion=completion))
    return stripped


def compute_rewards(
    session: Session,
    spec: JudgeSpec,
    requests: Sequence[RewardRequest],
    options: ScoreOptions,
    backends: BackendFactories,
    *,
    source: str = DEFAULT_SOURCE,
    include_drafts: bool = False,
    admit: Callable[[Workload], None] | None = None,
) -> RewardBatch:
    """Score each pair against its prompt's rubric; raises NotFoundError for an unknown prompt.
    ``backends``: the process's ``BackendProvider.factory`` (a jury's members have their own).
    ``admit``: given the batch's whole work once it is planned, before any judge is called; it
    raises to refuse the batch (the caller's transaction then keeps nothing of it). The reward
    pipeline's store, judge and aggregate stages in one call (``scoring.pipeline``)."""
    completion_ids = store_rewarded(session, requests, source)
    batch = judge_stored(
        session,
        spec,
        requests,
        completion_ids,
        options,
        backends,
        include_drafts=include_drafts,
        admit=admit,
    )
    add_prompt_means(session, batch)
    return batch


def store_rewarded(session: Session, requests: Sequence[RewardRequest], source: str) -> list[int]:
    """The id of each request's completion, stored (or reused) under its prompt
    (``store_completions``); raises NotFoundError for an unknown prompt."""
    prompts = find_prompts(session, requests)
    return store_completions(session, requests, prompts, source)


def judge_stored(
    session: Session,
    spec: JudgeSpec,
    requests: Sequence[RewardRequest],
    completion_ids: Sequence[int],
    options: ScoreOptions,
    backends: BackendFactories,
    *,
    include_drafts: bool = False,
    admit: Callable[[Workload], None] | None = None,
) -> RewardBatch:
    """Each request's result, its stored completion (``completion_ids``, in order) judged
    against its rubric: every rubric's run planned, the whole work given to ``admit``, then
    judged (see ``compute_rewards``)."""
    batch = RewardBatch(
        judge=spec.name,
        judge_config_hash=spec.config_hash(),
        aggregation=options.aggregation,
        results=[],
    )
    scored: dict[tuple[int, str | None], list[ScoredCompletion]] = {}
    by_rubric: dict[str | None, list[int]] = {}
    for request, completion_id in zip(requests, completion_ids, strict=True):
        by_rubric.setdefault(request.rubric, []).append(completion_id)
    routed = routed_rubrics(requests)
    ambiguous: dict[int, list[str]] = {}
    # Every rubric's run planned first: the batch's work is known, and bounded by ``admit``,
    # before anything is judged, and each run is planned once.
    runs = []
    for rubric, ids in by_rubric.items():
        selection = Selection(
            completion_ids=tuple(sorted(set(ids))),
            rubric_ref=rubric,
            include_drafts=include_drafts or rubric in routed,
            # Several usable rubrics and none named: refused unjudged, nothing spent on it.
            one_version_each=True,
        )
        runs.append((rubric, selection, plan_judge(session, spec, selection)))
    if admit is not None:
        admit(planned_workload([member for _, _, planned in runs for member in planned]))
    for rubric, selection, planned in runs:
        report = score_judge(session, spec, selection, options, backends, planned=planned)
        batch.aggregation = report.aggregation
        batch.add(report)
        for completion_id, tally in report.by_completion.items():
            batch.by_completion.setdefault(completion_id, JudgingTally()).add(tally)
        for entry in report.scores:
            scored.setdefault((entry.completion_id, rubric), []).append(entry)
        left_out = report.without_reasons.get("ambiguous", [])
        ambiguous.update(ambiguous_rubrics(session, left_out, include_drafts))
    batch.results = reward_results([r.rubric for r in requests], completion_ids, scored, ambiguous)
    return batch


def routed_rubrics(requests: Sequence[RewardRequest]) -> set[str]:
    """The rubrics every request naming them was routed to by an evolution run (``evolved``):
    judged though drafts. One a client named itself too is held to the call's drafts rule."""
    named = {r.rubric for r in requests if r.rubric is not None and not r.evolved}
    return {r.rubric for r in requests if r.evolved and r.rubric is not None} - named


def reward_results(
    rubrics: Sequence[str | None],
    completion_ids: Sequence[int],
    scored: Mapping[tuple[int, str | None], Sequence[ScoredCompletion]],
    ambiguous: Mapping[int, list[str]],
) -> list[RewardResult]:
    """Each item's result, in order, from its completion's scores under the rubric it named
    (``rubrics``; None: its prompt's usable one), by (completion id, rubric) in ``scored``:
    refused unjudged where it named none and several are usable (``ambiguous``)."""
    return [
        (
            ambiguous_result(completion_id, ambiguous[completion_id])
            if rubric is None and completion_id in ambiguous
            else reward_result(completion_id, scored.get((completion_id, rubric), []))
        )
        for rubric, completion_id in zip(rubrics, completion_ids, strict=True)
    ]


def ambiguous_rubrics(
    session: Session, completion_ids: Sequence[int], include_drafts: bool
) -> dict[int, list[str]]:
    """Of ``completion_ids``, those with more than one usable rubric version (their prompt's
    own and those assigned to them): the versions' references, for the refusal's message."""
    if not completion_ids:
        return {}
    rows = list(session.scalars(select(Completion).where(Completion.id.in_(set(completion_ids)))))
    usable = usable_versions(session, rows, include_drafts)
    return {
        row.id: [v.ref for v in versions]
        for row, versions in zip(rows, usable, strict=True)
        if len(versions) > 1
    }


def add_prompt_means(session: Session, batch: RewardBatch) -> None:
    """Each masked result's prompt mean (``RewardResult.prompt_mean``), the batch's own
    scores included, and where its prompt has none the judge's mean (``judge_mean``): a
    query only when something is masked."""
    masked = [r for r in batch.results if r.reward is None and r.completion_id is not None]
    if not masked:
        return
    ids = [r.completion_id for r in masked if r.completion_id is not None]
    means = prompt_means(session, ids, batch.judge_config_hash, batch.aggregation)
    for result in masked:
        if result.completion_id is not None:
            result.prompt_mean = means.get(result.completion_id)
    alone = [r for r in masked if r.prompt_mean is None]
    if alone:
        overall = judge_mean(session, batch.judge_config_hash, batch.aggregation)
        for result in alone:
            result.judge_mean = overall


def find_prompts(session: Session, requests: Sequence[RewardRequest]) -> list[Prompt]:
    """Each request's stored prompt, in order; NotFoundError names the first one missing."""
    external_ids = {r.prompt_id for r in requests if r.prompt_id is not None}
    hashes = {prompt_hash(r.messages()) for r in requests if r.prompt_id is None}
    by_external: dict[str, Prompt] = {}
    by_hash: dict[str, Prompt] = {}
    for ids, digests in zip_longest(batches(sorted(external_ids)), batches(sorted(hashes))):
        for row in session.scalars(
            select(Prompt).where(
                Prompt.external_id.in_(ids or ()) | Prompt.content_hash.in_(digests or ())
            )
        ):
            if row.external_id is not None:
                by_external[row.external_id] = row
            by_hash[row.content_hash] = row
    found: list[Prompt] = []
    for index, request in enumerate(requests):
        prompt: Prompt | None
        if request.prompt_id is not None:
            prompt = by_external.get(request.prompt_id)
            missing = f"no prompt with external id {request.prompt_id!r}"
        elif request.prompt is None:
            raise ValidationFailed(f"item {index}: give prompt_id or prompt")
        else:
            prompt = by_hash.get(prompt_hash(request.messages()))
            missing = "no stored prompt has these messages (store it first, or pass prompt_id)"
        if prompt is None:
            raise NotFoundError(f"item {index}: {missing}")
        found.append(prompt)
    return found


CompletionKey = tuple[int, str, str | None]  # prompt id, text hash, trajectory and documents


@dataclass(frozen=True)
class Wanted:
    """The completions a reward batch names, before any is stored: each item's key (its prompt,
    text, and trajectory and documents if any), and per key its first request with the item's
    checked trajectory and documents, and the completion of ``source`` already stored under it."""

    keys: list[CompletionKey]
    new: dict[CompletionKey, tuple[RewardRequest, Messages | None, list[DocumentRecord]]]
    stored: dict[CompletionKey, Completion]


def wanted_completions(
    session: Session, requests: Sequence[RewardRequest], prompts: Sequence[Prompt], source: str
) -> Wanted:
    """What ``store_completions`` would store or reuse; reads only. Every trajectory and
    document list is checked (ValidationFailed naming the item)."""
    trajectories = [
        None if r.trajectory is None else normalized_trajectory(r.trajectory, f"item {index}")
        for index, r in enumerate(requests)
    ]
    documents = [
        checked_documents(r.documents or [], f"item {index}") for index, r in enumerate(requests)
    ]
    keys = [
        (p.id, content_hash(r.completion), _extras_key(t, [[str(d.label), d.digest()] for d in ds]))
        for r, p, t, ds in zip(requests, prompts, trajectories, documents, strict=True)
    ]
    wanted = dict(zip(keys, zip(requests, trajectories, documents, strict=True), strict=True))
    stored: dict[CompletionKey, Completion] = {}
    for part in batches(sorted({(prompt_id, text) for prompt_id, text, _ in wanted})):
        for completion in session.scalars(
            select(Completion)
            .where(tuple_(Completion.prompt_id, Completion.content_hash).in_(part))
            .where(Completion.source == source)
            .options(selectinload(Completion.documents).selectinload(CompletionDocument.document))
            .order_by(Completion.id)
        ):
            extras = _extras_key(completion.messages, listed_documents(completion))
            stored.setdefault((completion.prompt_id, completion.content_hash, extras), completion)
    new = {key: value for key, value in wanted.items() if key not in stored}
    return Wanted(keys, new, {key: c for key, c in stored.items() if key in wanted})


def store_completions(
    session: Session, requests: Sequence[RewardRequest], prompts: Sequence[Prompt], source: str
) -> list[int]:
    """The id of each request's completion: one per distinct (prompt, text, trajectory,
    documents) for ``source``, reused if already stored, so a rollout seen again (the same
    text, and trajectory if any, for the same prompt) is one row, judged once. Every
    trajectory is checked before anything is stored (ValidationFailed naming the item)."""
    wanted = wanted_completions(session, requests, prompts, source)
    ids = {key: completion.id for key, completion in wanted.stored.items()}
    first_item = {key: index for index, key in reversed(list(enumerate(wanted.keys)))}
    plain: list[tuple[CompletionKey, dict[str, Any]]] = []
    listing: list[tuple[CompletionKey, Completion, list[ResolvedDocument]]] = []
    for key, (request, messages, listed) in wanted.new.items():
        row: dict[str, Any] = {
            "prompt_id": key[0],
            "external_id": None,
            "text": request.completion,
            "content_hash": key[1],
            "messages": messages,
            "source": source,
            "meta": {},
        }
        if not listed:
            plain.append((key, row))
            continue
        resolved = resolve_documents(session, listed, f"item {first_item[key]}")
        completion = Completion(**row)
        session.add(completion)
        listing.append((key, completion, resolved))
    if plain:
        # Multi-row inserts: ORM instances and their flush were a fifth of a batch's own time.
        inserted = insert_completions(session, [row for _, row in plain])
        ids.update(zip((key for key, _ in plain), inserted, strict=True))
    if listing:
        session.flush()  # their ids, which their documents need
        for key, completion, resolved in listing:
            attach_documents(session, completion, resolved)
            ids[key] = completion.id
        session.flush()
    return [ids[key] for key in wanted.keys]


def _extras_key(trajectory: list[dict[str, Any]] | None, documents: list[list[str]]) -> str | None:
    """What besides its prompt and text tells a completion apart: its trajectory and the
    documents it lists (None when it has neither)."""
    if trajectory is None and not documents:
        return None
    return content_hash({"trajectory": trajectory, "documents": documents})


def reward_result(completion_id: int, scores: Sequence[ScoredCompletion]) -> RewardResult:
    """The reward of a completion from its scores: None without exactly one usable rubric."""
    if not scores:
        return RewardResult(
            None,
            "no_rubric",
            completion_id=completion_id,
            reasons=["the prompt has no usable rubric version (approve one, or include drafts)"],
        )
    if len(scores) > 1:
        return ambiguous_result(completion_id, [s.rubric for s in scores])
    entry = scores[0]
    return RewardResult(
        entry.value,
        entry.status,
        entry.coverage,
        entry.rubric,
        completion_id,
        entry.reasons,
        entry.criteria,
        entry.failures,
        getattr(entry, "confidence", None),
    )


def ambiguous_result(completion_id: int, rubrics: Sequence[str]) -> RewardResult:
    """No reward: the prompt has several usable rubrics (``rubrics``) and the request named
    none of them."""
    return RewardResult(
        None,
        "ambiguous",
        completion_id=completion_id,
        reasons=[
            f"the prompt has {len(rubrics)} usable rubrics ({', '.join(rubrics)}): pass rubric"
        ],
    )


MaskedReward = str | float  # "mean", or the value itself


def fill_masked(rewards: Sequence[float | None], masked: MaskedReward) -> list[float]:
    """A number for every reward, for trainers that need one: a masked reward becomes
    ``masked``, or with ``"mean"`` the mean of the others (0.0 if all are masked), which
    leaves it no advantage under group normalization, as a masked reward has in TRL."""
    if masked == "mean":
        known = [r for r in rewards if r is not None]
        value = sum(known) / len(known) if known else 0.0
    else:
        value = float(masked)
    return [value if r is None else r for r in rewards]


def fill_masked_by_prompt(
    results: Sequence[RewardResult],
    prompts: Sequence[object],
    masked: MaskedReward,
    stored_means: Mapping[int, float],
) -> list[float]:
    """``fill_masked`` for a request whose items may be of several prompts, or one rollout of
    a prompt (OpenRLHF sends one rollout per request): with ``"mean"``, a masked reward is the
    mean of its prompt's other rewards in the request (group-normalized advantages are per
    prompt); without any, its prompt's mean so far under this judge (``stored_means``, by
    completion id: ``prompt_means``); else the mean of the request's rewards; else the
    judge's mean over every prompt (``RewardResult.judge_mean``); else 0.0."""
    rewards = [r.reward for r in results]
    if masked != "mean" or None not in rewards:
        return fill_masked(rewards, masked)
    known: dict[object, list[float]] = {}
    for prompt, reward in zip(prompts, rewards, strict=True):
        if reward is not None:
            known.setdefault(prompt, []).append(reward)
    everything = [r for r in rewards if r is not None]
    filled = []
    for result, prompt in zip(results, prompts, strict=True):
        if result.reward is not None:
            filled.append(result.reward)
        elif known.get(prompt):
            filled.append(sum(known[prompt]) / len(known[prompt]))
        elif result.completion_id is not None and result.completion_id in stored_means:
            filled.append(stored_means[result.completion_id])
        elif everything:
            filled.append(sum(everything) / len(everything))
        else:
            filled.append(result.judge_mean if result.judge_mean is not None else 0.0)
    return filled


def prompt_means(
    session: Session, completion_ids: Sequence[int], judge_config_hash: str, aggregation: str
) -> dict[int, float]:
    """For each completion, the mean of the scores its prompt's completions have under this
    judge config and aggregation (those with a value), where there is one."""
    if not completion_ids:
        return {}
    prompt_of: dict[int, int] = {}
    for part in batches(sorted(set(completion_ids))):
        prompt_of.update(
            session.execute(
                select(Completion.id, Completion.prompt_id).where(Completion.id.in_(part))
            ).all()
        )
    means: dict[int, float] = {}
    for part in batches(sorted(set(prompt_of.values()))):
        rows = session.execute(
            select(Completion.prompt_id, func.avg(Score.value))
            .join(Score, Score.completion_id == Completion.id)
            .join(JudgeConfig, JudgeConfig.id == Score.judge_config_id)
            .where(Completion.prompt_id.in_(part))
            .where(JudgeConfig.config_hash == judge_config_hash)
            .where(Score.aggregation == aggregation)
            .where(Score.value.is_not(None))
            .group_by(Completion.prompt_id)
        )
        means.update((prompt_id, float(mean)) for prompt_id, mean in rows if mean is not None)
    return {c: means[p] for c, p in prompt_of.items() if p in means}


def judge_mean(session: Session, judge_config_hash: str, aggregation: str) -> float | None:
    """The mean of every score under this judge config and aggregation (None without one)."""
    mean = session.scalar(
        select(func.avg(Score.value))
        .join(JudgeConfig, JudgeConfig.id == Score.judge_config_id)
        .where(JudgeConfig.config_hash == judge_config_hash)
        .where(Score.aggregation == aggregation)
        .where(Score.value.is_not(None))
    )
    return None if mean is None else float(mean)


def parse_masked(text: str) -> MaskedReward:
    """``"mean"`` or a finite number, from a query parameter or an environment variable."""
    import math

    if text.strip().lower() == "mean":
        return "mean"
    try:
        value = float(text)
    except ValueError:
        raise ValidationFailed(f"masked reward {text!r}: give 'mean' or a number") from None
    if not math.isfinite(value):
        raise ValidationFailed(f"masked reward {text!r}: give a finite number")
    return value
