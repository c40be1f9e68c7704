"""Two responses of one prompt compared under the rubric, in both orders.

For each peer (another completion of the prompt under the same rubric version) a case plans
two judgments, one per order, keyed on the order shown: the (peer, this) judgment of one case
is the (this, peer) judgment's mirror of the other's, so a group of n completions costs
n(n-1) calls in all, whoever asks. Each call is one forward pass: the probability of "1"
(the first shown is better), "2" (the second) and "0" (a tie). A judgment's value is the
first response's chance of winning, P(1) + P(0)/2; a case reads each order from its own side
and averages them, so a judge that prefers whatever comes first cancels out, and an order
whose verdict the other order contradicts is recorded as a position inconsistency. The
completion's score is its mean chance of winning against its peers, usable as a reward.
A comparison that failed is left out, never counted as a loss, unless a response caused it
(``scoring.attribution``): then it is that response's loss (its worst value) and its peer's win.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rubricsvc.backends.types import ChoiceRequest, ChoiceResult, Generation
from rubricsvc.judging import keys
from rubricsvc.judging import verdicts as v
from rubricsvc.judging.aggregation import Status
from rubricsvc.judging.failures import FailureClass
from rubricsvc.judging.modes import text
from rubricsvc.judging.modes.assess import NOT_JUDGED, charged_to, failure_class
from rubricsvc.judging.modes.base import (
    Assessment,
    AssessOptions,
    Call,
    CallContext,
    Case,
    CompletionView,
    CriterionView,
    Item,
    Plan,
    RubricCriterion,
    Ruling,
)
from rubricsvc.neutral import judged

# The answer tokens: single digits, one token in every vocabulary we know.
FIRST, SECOND, TIE = "1", "2", "0"
LABELS = {FIRST: "first", SECOND: "second", TIE: "tie"}
# Seen from the other side: the first shown in one order is the second in the other.
MIRRORED = {"first": "second", "second": "first", "tie": "tie"}


def rubric_lines(criteria: Sequence[CriterionView]) -> str:
    """The rubric as weighted lines, as the holistic mode shows it."""
    return "\n".join(f"- [{c.weight:+g}] {judged(c.text)}" for c in criteria)


def comparison_verdict(probs: Mapping[str, float]) -> v.Verdict:
    """The first response's chance of winning, from the three answer tokens' probabilities."""
    mass = math.fsum(probs.get(t, 0.0) for t in LABELS)
    if mass < v.MIN_VERDICT_MASS:
        raise v.VerdictParseError(f"the judge put only {mass:.4f} of its probability on 1/2/0")
    share = {LABELS[t]: probs.get(t, 0.0) / mass for t in LABELS}
    label = max(share, key=lambda name: share[name])
    return v.Verdict(
        share["first"] + share["tie"] / 2,
        label,
        detail={"p_first": share["first"], "p_second": share["second"], "p_tie": share["tie"]},
    )


def pairwise_calls(context: CallContext, items: Sequence[Item]) -> list[Call]:
    """One forward pass per ordered pair."""
    calls = []
    for item in items:
        first, second = item.responses
        chat = context.template.render(
            conversation=text.render_conversation(first.messages),
            first=judged(first.response),
            second=judged(second.response),
            criteria=rubric_lines(item.rubric),
        )
        request = ChoiceRequest(chat, (FIRST, SECOND, TIE))

        def parse(result: Generation | ChoiceResult, key: str = item.key) -> dict[str, v.Verdict]:
            return {key: comparison_verdict(text.probs_of(result))}

        calls.append(Call(request, (item.key,), parse))
    return calls


def ordered_pair_keys(case: Case, peer: CompletionView) -> tuple[str, str]:
    """The keys of (this, peer) and (peer, this) under the case's judge and rubric version."""
    return keys.pair_keys(
        case.judge_hash, case.rubric_hash, case.prompt_hash, case.response_hash, peer.response_hash
    )


# A comparison one of its responses made fail is that response's loss (its worst value) and so
# the other's win, read from either side: the first shown wins, or the second does.
FIRST_WINS = Ruling(1.0, "first")
SECOND_WINS = Ruling(0.0, "second")


def win_share(forward: Ruling, backward: Ruling) -> tuple[float | None, bool | None]:
    """This response's chance of beating the peer from the two orders' rulings (forward: this
    shown first), and whether the orders agree (None unless both were judged)."""
    sides = []
    if forward.value is not None:
        sides.append(forward.value)
    if backward.value is not None:
        sides.append(1.0 - backward.value)
    if not sides:
        return None, None
    consistent = None
    if forward.value is not None and backward.value is not None:
        consistent = forward.label == MIRRORED.get(backward.label or "")
    return math.fsum(sides) / len(sides), consistent


class Pairwise:
    """Each completion against each peer, both orders; the score is the mean win share."""

    name = "pairwise"
    template = "pairwise"
    aggregation: str | None = "pairwise"
    decodes = False  # one forward pass per order
    options: frozenset[str] = frozenset({"group_size"})
    wording = "1"
    compares = True
    # P(first better) is a probability, but of a win, not of a criterion met.
    gives_probability = False
    per_criterion = False
    judges_pairs = True

    def plan(self, case: Case) -> Plan:
        rubric = tuple(c.view for c in case.criteria)
        own = own_view(case)
        items = []
        for peer in case.peers:
            if peer.response_hash == case.response_hash:
                continue  # the same text: a tie by definition, nothing to ask
            forward, backward = ordered_pair_keys(case, peer)
            items.append(Item(forward, None, rubric=rubric, responses=(own, peer)))
            items.append(Item(backward, None, rubric=rubric, responses=(peer, own)))
        return Plan(items, {})

    def count(self, criteria: Sequence[RubricCriterion]) -> int:
        return 2  # per peer; a completion's peers are not known from its rubric alone

    def calls(self, context: CallContext, items: Sequence[Item]) -> list[Call]:
        return pairwise_calls(context, items)

    def assess(
        self, case: Case, plan: Plan, rulings: Mapping[str, Ruling], options: AssessOptions
    ) -> Assessment:
        assessment = Assessment(None, 0.0, Status.MASKED, [])
        shares: list[float] = []
        compared = [p for p in case.peers if p.response_hash != case.response_hash]
        for peer in compared:
            forward_key, backward_key = ordered_pair_keys(case, peer)
            given = (rulings.get(forward_key, NOT_JUDGED), rulings.get(backward_key, NOT_JUDGED))
            charged = [charged_to(r, case.response_hash, options.response_failure) for r in given]
            # An order this response broke counts as its loss; one its peer broke, as its win.
            forward = (
                given[0] if charged[0] is None else (SECOND_WINS if charged[0] else FIRST_WINS)
            )
            backward = (
                given[1] if charged[1] is None else (FIRST_WINS if charged[1] else SECOND_WINS)
            )
            share, consistent = win_share(forward, backward)
            if any(c is not None for c in charged):
                consistent = None  # a charged loss says nothing of the judge's position bias
            entry: dict[str, Any] = {
                "peer": peer.id,
                # As a criterion row reads (weight, text): each peer counts alike.
                "weight": 1.0,
                "text": f"against completion {peer.id} (verdicts "
                f"{forward.label or 'failed'} / {backward.label or 'failed'}, this one first / second)",
                "status": "ok" if share is not None else "failed",
                "verdict": None if consistent is not False else "inconsistent",
                "value": share,
                "orders": [forward.value, backward.value],
                "verdicts": [forward.label, backward.label],
                "consistent": consistent,
            }
            for ruling, charge in zip(given, charged, strict=True):
                assessment.verdicts.append(ruling.value)
                if charge:
                    assessment.failures[FailureClass.RESPONSE.value] += 1
                    entry.update(status="unjudgeable", error=ruling.error)
                elif charge is False:
                    entry["note"] = f"the peer could not be judged, a win: {ruling.error}"
                elif ruling.value is None:
                    assessment.failures[failure_class(ruling)] += 1
                    entry.setdefault("error", ruling.error)
            assessment.criteria.append(entry)
            if share is not None:
                shares.append(share)
        if not compared:
            assessment.reasons.append(
                "pairwise needs another completion of the prompt with other text to compare with"
            )
            return assessment
        assessment.coverage = len(shares) / len(compared)
        inconsistent = sum(1 for e in assessment.criteria if e["consistent"] is False)
        if inconsistent:
            assessment.reasons.append(
                f"{inconsistent} of {len(compared)} comparisons changed verdict with the order "
                "shown (position inconsistency)"
            )
        if not shares or assessment.coverage < options.min_coverage:
            assessment.reasons.append(
                f"{len(compared) - len(shares)} of {len(compared)} comparisons failed"
            )
            return assessment
        assessment.value = math.fsum(shares) / len(shares)
        assessment.status = Status.OK if len(shares) == len(compared) else Status.PARTIAL
        return assessment


def own_view(case: Case) -> CompletionView:
    """The case's completion, with its hash, as a comparison shows it."""
    completion = case.completion
    if completion.response_hash:
        return completion
    return CompletionView(
        completion.id,
        completion.messages,
        completion.response,
        completion.reference,
        case.response_hash,
    )
