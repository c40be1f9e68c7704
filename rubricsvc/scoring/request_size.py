"""The bound on the text one judge request sends, and who pays when a request passes it.

A per-criterion mode sends the judged prompt and response whole with every criterion: a 16 MB
response under 64 criteria is 64 requests of 16 MB each, tokenized and judged one by one. The
judgment and evidence bounds count requests and what citation checks read, not how long each
request is, so each judgment's request (the conversation, the response or the responses it
compares, the reference answer it is shown, a trajectory's rendering, the criteria it asks
about) is held to its judge's ``max_request_chars`` before it is sent
(``CallExecutor.run``, the one path every judgment takes). A request past it is never sent;
its judgment fails at once, and is classed as a request the judge's context would refuse
(``judging.failures``):

- the response's doing when the same request with the judged text replaced by the canary
  (``scoring.attribution``) fits: class ``response``, charged the criterion's worst value,
  as a response that overflows the judge's context is. A comparison (pairwise, group) is
  attributed as a failed one is: each response tried alone among canaries, the culprits are
  those that pass the bound so, and all of them when none does (they passed it together); a
  group is judged again with only its culprits replaced, so the rest of it is still scored;
- else the conversation, reference and criteria alone pass it: the configuration's doing
  (class ``infrastructure``, masked), named in the error.

Not refused at admission: one over-long rollout among a batch's 64 must cost that rollout,
not the batch; a refusal would let one response deny the reward to every other, and a trainer
that drops a refused batch would mask it. Characters, not tokens: nothing is tokenized before
a judge is loaded (a token is about four characters of English text). Citation checks send a
claim and passages of bounded size (their cost is the evidence bound's) and are not counted.
The bound is not in the judge's hash (it decides what is sent, not what a judge answers), so
a judgment failed by it is never kept as settled: raising the bound judges it next time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.modes import CompletionView, Item
from rubricsvc.judging.modes.text import TRAJECTORY_TOTAL_CHARS
from rubricsvc.scoring.attribution import CANARY_RESPONSE

# Where a judgment's detail records that its request passed the bound (never settled).
TOO_LONG = "request_too_long"


@dataclass(frozen=True)
class TooLong:
    """A judgment whose request passes its judge's bound: ``chars`` of judged text, at most
    ``bound``. ``charged``: the judged text's doing; ``culprits``: for a comparison, the
    response hashes whose replacement makes it fit."""

    key: str
    chars: int
    bound: int
    charged: bool
    culprits: tuple[str, ...] = ()
    innocent: frozenset[str] = frozenset()

    def message(self, spec: JudgeSpec) -> str:
        head = (
            f"{self.chars:,} characters of judged text in one request to judge {spec.name!r} "
            f"(mode {spec.mode}): at most {self.bound:,} a request (the judge's "
            "max_request_chars); not sent"
        )
        if not self.charged:
            return (
                f"{head}: the conversation, reference and criteria alone pass it; raise "
                "max_request_chars, or judge with a judge whose context holds them"
            )
        if self.culprits:
            return f"{head}: {len(self.culprits)} of the responses it compares are too long"
        return f"{head}: the response is too long for this judge"

    def detail(self) -> dict[str, Any]:
        detail: dict[str, Any] = {TOO_LONG: {"chars": self.chars, "bound": self.bound}}
        if self.culprits:  # what ``charged_to`` reads, as for a canary's culprits
            detail["attribution"] = {"culprits": list(self.culprits)}
        return detail


def too_long(spec: JudgeSpec, completion: CompletionView, items: Sequence[Item]) -> list[TooLong]:
    """The judgments among ``items`` (of ``completion``) whose request passes
    ``spec.max_request_chars``, each with who caused it."""
    bound = spec.max_request_chars
    conversation = messages_chars(completion.messages)
    reference = len(completion.reference or "") if spec.reference else 0
    found = []
    for item in items:
        if item.citation is not None:
            continue  # a claim and bounded passages: the evidence bound's
        criteria = item.rubric or ((item.criterion,) if item.criterion is not None else ())
        fixed = conversation + sum(len(c.text) + len(c.explanation or "") for c in criteria)
        if any(c.on_trajectory for c in criteria):
            fixed += TRAJECTORY_TOTAL_CHARS  # its rendering is cut to this
        if item.responses:  # compared completions: each response, the conversation once
            found.extend(_compared(item, fixed, bound))
            continue
        fixed += reference
        chars = fixed + len(completion.response)
        if chars > bound:
            fits_without = fixed + len(CANARY_RESPONSE) <= bound
            found.append(TooLong(item.key, chars, bound, charged=fits_without))
    return found


def _compared(item: Item, fixed: int, bound: int) -> list[TooLong]:
    """As ``scoring.attribution`` attributes a failed comparison: each response alone among
    canaries; the culprits are those too long so, all of them when none is."""
    canary = len(CANARY_RESPONSE)
    hashes = [r.response_hash for r in item.responses]
    lengths = {r.response_hash: len(r.response) for r in item.responses}
    chars = fixed + sum(lengths[h] for h in hashes)
    if chars <= bound:
        return []
    if fixed + canary * len(hashes) > bound:  # too long whatever the responses say
        return [TooLong(item.key, chars, bound, charged=False)]

    def size(kept: set[str]) -> int:  # with every response but ``kept`` replaced
        return fixed + sum(lengths[h] if h in kept else canary for h in hashes)

    shown = list(dict.fromkeys(hashes))
    culprits = [h for h in shown if size({h}) > bound] or shown
    innocent = frozenset(shown) - set(culprits)
    if size(set(innocent)) > bound:
        innocent = frozenset()  # the rest is too long together: nothing to judge again
    return [TooLong(item.key, chars, bound, True, tuple(culprits), innocent)]


def messages_chars(messages: Sequence[dict[str, Any]]) -> int:
    return sum(len(str(m.get("content") or "")) for m in messages)
