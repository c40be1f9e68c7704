"""The bound on the text one judge request sends, checked when work is planned.

A per-criterion mode sends the judged prompt and response whole with every criterion: a 16 MB
response under 64 criteria is 64 requests of 16 MB each, tokenized and judged one by one. The
judgment and evidence bounds count requests and what citation checks read, not how long each
request is, so each planned request's judged text (the conversation, the response or the
responses it compares, the reference answer it is shown, a trajectory's rendering, the
criteria it asks about) is held to its judge's ``max_request_chars`` when its work is
planned (``scorer.plan_cases``: a reward batch's admission, a score job's submission,
``rubricsvc score``), before anything is stored or judged. Citation checks send a claim and
passages of bounded size (their cost is the evidence bound's) and are not counted here.
Characters, not tokens: nothing is tokenized before a judge is loaded (a token is about four
characters of English text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rubricsvc.errors import RubricsvcError
from rubricsvc.judging.config import JudgeSpec
from rubricsvc.judging.modes import Case, Item, Plan
from rubricsvc.judging.modes.text import TRAJECTORY_TOTAL_CHARS


class RequestTooLong(RubricsvcError):
    """A planned judge request whose judged text passes its judge's ``max_request_chars``:
    ``chars`` in one request, at most ``bound``. The API answers 413."""

    exit_code = 2

    def __init__(self, message: str, *, chars: int, bound: int) -> None:
        super().__init__(message)
        self.chars = chars
        self.bound = bound


def check_request_sizes(spec: JudgeSpec, planned: Sequence[tuple[Case, Plan]]) -> None:
    """``RequestTooLong`` for the longest request of ``planned`` past ``spec``'s bound, naming
    its size, how many of the case's requests send that text and the bound."""
    bound = spec.max_request_chars
    for case, plan in planned:
        shared = _case_chars(case, spec.reference)
        sizes = [_item_chars(case, item, shared) for item in plan.items]
        longest = max(sizes, default=0)
        if longest <= bound:
            continue
        sending = [size for size in sizes if size > 0]
        raise RequestTooLong(
            f"{longest:,} characters of judged text in one request to judge {spec.name!r} "
            f"(mode {spec.mode}: the conversation, {_response_words(plan.items)} and what it "
            f"asks; {len(sending)} such request(s) for this completion, {sum(sending):,} "
            f"characters in all): at most {bound:,} a request (the judge's max_request_chars); "
            "send a shorter response, or judge it with a judge whose context holds it",
            chars=longest,
            bound=bound,
        )


def _case_chars(case: Case, reference: bool) -> int:
    """What every request of ``case`` that shows its completion sends of it: the conversation,
    the response and (with ``reference``) the prompt's reference answer."""
    chars = _messages_chars(case.completion.messages) + len(case.completion.response)
    if reference and case.completion.reference:
        chars += len(case.completion.reference)
    return chars


def _item_chars(case: Case, item: Item, shared: int) -> int:
    if item.citation is not None:
        return 0  # a claim and bounded passages: the evidence bound's
    criteria = item.rubric or ((item.criterion,) if item.criterion is not None else ())
    chars = sum(len(c.text) + len(c.explanation or "") for c in criteria)
    if item.responses:  # compared completions: each response, the conversation once
        chars += _messages_chars(case.completion.messages)
        chars += sum(len(r.response) for r in item.responses)
    else:
        chars += shared
    if any(c.on_trajectory for c in criteria):
        chars += TRAJECTORY_TOTAL_CHARS  # its rendering is cut to this
    return chars


def _messages_chars(messages: Sequence[dict[str, Any]]) -> int:
    return sum(len(str(m.get("content") or "")) for m in messages)


def _response_words(items: Sequence[Item]) -> str:
    return "the responses it compares" if any(i.responses for i in items) else "the response"
