"""Verdict modes: how one judge call is built, and how its output becomes verdicts.

Every prompt puts the long shared part first (instructions, conversation, response) and
the criterion last, so a backend can reuse the shared prefix across a completion's criteria.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from rubricsvc.judging import verdicts as v
from rubricsvc.judging.config import JudgeSpec, VerdictMode
from rubricsvc.judging.neutral import judged
from rubricsvc.judging.templates import PromptTemplate
from rubricsvc.judging.types import ChoiceRequest, ChoiceResult, Generation, GenerationRequest


@dataclass(frozen=True)
class CriterionView:
    """What a judge needs of a criterion."""

    id: int
    text: str
    explanation: str | None
    weight: float
    scale: dict[str, Any]
    theme: str | None = None

    @classmethod
    def of(cls, criterion: Any) -> CriterionView:
        """The view of a stored criterion (``models.Criterion``)."""
        return cls(
            criterion.id,
            criterion.text,
            criterion.explanation,
            criterion.weight,
            criterion.scale,
            criterion.theme,
        )

    @property
    def levels(self) -> list[dict[str, Any]] | None:
        return self.scale.get("levels") if self.scale.get("type") == "ordinal" else None

    @property
    def scores(self) -> list[int]:
        return [int(level["score"]) for level in self.levels or []]


@dataclass(frozen=True)
class CompletionView:
    """What a judge needs of a completion: the conversation so far and the response."""

    id: int
    messages: list[dict[str, Any]]
    response: str
    reference: str | None = None


@dataclass(frozen=True)
class Item:
    """One judgment to make: a criterion (or, in holistic mode, the whole rubric) and its key."""

    key: str
    criterion: CriterionView | None


Request = GenerationRequest | ChoiceRequest
Parser = Callable[[Generation | ChoiceResult], dict[str, v.Verdict]]


@dataclass(frozen=True)
class Call:
    """One backend request that decides the judgments ``keys``."""

    request: Request
    keys: tuple[str, ...]
    parse: Parser


class ModeError(Exception):
    """An item that this mode cannot judge at all (no reference report, ...): not retried."""


def render_conversation(messages: Sequence[dict[str, Any]]) -> str:
    if len(messages) == 1 and messages[0].get("role") == "user":
        return judged(str(messages[0]["content"]))
    return "\n\n".join(f"[{judged(str(m['role']))}]\n{judged(str(m['content']))}" for m in messages)


def _criterion_block(criterion: CriterionView) -> str:
    text = f"Criterion: {judged(criterion.text)}"
    if criterion.explanation:
        text += f"\nDetails: {judged(criterion.explanation)}"
    return text


def _levels_block(criterion: CriterionView) -> str:
    return "\n".join(
        f"{level['score']}: {judged(str(level['description']))}" for level in criterion.levels or []
    )


def _generation(spec: JudgeSpec, chat: list[dict[str, str]], attempt: int) -> GenerationRequest:
    # A retry with sampling on gets a new seed: the same seed would repeat the same failure.
    seed = None if spec.seed is None else spec.seed + attempt
    return GenerationRequest(
        chat, max_tokens=spec.max_tokens, temperature=spec.temperature, seed=seed
    )


def _text_of(result: Generation | ChoiceResult) -> str:
    assert isinstance(result, Generation)
    return result.text


def _probs_of(result: Generation | ChoiceResult) -> dict[str, float]:
    assert isinstance(result, ChoiceResult)
    return result.probs


# -- per-criterion modes ---------------------------------------------------------------


def _binary_probs(key: str, result: Generation | ChoiceResult) -> dict[str, v.Verdict]:
    return {key: v.binary_from_probs(_probs_of(result))}


def _ordinal_probs(
    key: str, scores: list[int], result: Generation | ChoiceResult
) -> dict[str, v.Verdict]:
    return {key: v.ordinal_from_probs(_probs_of(result), scores)}


def _binary_text(key: str, result: Generation | ChoiceResult) -> dict[str, v.Verdict]:
    return {key: v.binary_from_text(_text_of(result))}


def _ordinal_text(
    key: str, scores: list[int], result: Generation | ChoiceResult
) -> dict[str, v.Verdict]:
    return {key: v.ordinal_from_text(_text_of(result), scores)}


def _framed(completion: CompletionView) -> dict[str, str]:
    """The conversation and response as template fields: rendered and defused once per completion."""
    return {
        "conversation": render_conversation(completion.messages),
        "response": judged(completion.response),
    }


def _question(criterion: CriterionView) -> str:
    if criterion.levels:
        return (
            f"{_criterion_block(criterion)}\nRate how well the response meets the criterion:\n"
            f"{_levels_block(criterion)}"
        )
    return f"{_criterion_block(criterion)}\nDoes the response meet the criterion?"


def _criteria_of(items: Sequence[Item]) -> list[tuple[Item, CriterionView]]:
    pairs = []
    for item in items:
        assert item.criterion is not None  # per-criterion modes never get the holistic item
        pairs.append((item, item.criterion))
    return pairs


def criterion_prob_calls(
    spec: JudgeSpec,
    template: PromptTemplate,
    completion: CompletionView,
    items: Sequence[Item],
    attempt: int,
) -> list[Call]:
    framed = _framed(completion)
    calls = []
    for item, criterion in _criteria_of(items):
        if criterion.levels:
            question = f"{_question(criterion)}\nAnswer with one number."
            choices = tuple(str(s) for s in criterion.scores)
            parse: Parser = partial(_ordinal_probs, item.key, criterion.scores)
        else:
            question = f"{_question(criterion)} Answer with one word: Yes or No."
            choices = v.YES_TOKENS + v.NO_TOKENS
            parse = partial(_binary_probs, item.key)
        chat = template.render(**framed, question=question)
        calls.append(
            Call(ChoiceRequest(chat, choices, group=str(completion.id)), (item.key,), parse)
        )
    return calls


def criterion_text_calls(
    spec: JudgeSpec,
    template: PromptTemplate,
    completion: CompletionView,
    items: Sequence[Item],
    attempt: int,
) -> list[Call]:
    framed = _framed(completion)
    calls = []
    for item, criterion in _criteria_of(items):
        if criterion.levels:
            verdict_format = f"VERDICT: <one of {', '.join(map(str, criterion.scores))}>"
            parse: Parser = partial(_ordinal_text, item.key, criterion.scores)
        else:
            verdict_format = "VERDICT: YES or VERDICT: NO"
            parse = partial(_binary_text, item.key)
        chat = template.render(
            **framed, question=_question(criterion), verdict_format=verdict_format
        )
        calls.append(Call(_generation(spec, chat, attempt), (item.key,), parse))
    return calls


# -- several criteria per call ---------------------------------------------------------


def _numbered(criteria: Sequence[CriterionView]) -> str:
    lines = []
    for number, criterion in enumerate(criteria, start=1):
        line = f"{number}. {judged(criterion.text)}"
        if criterion.explanation:
            line += f" ({judged(criterion.explanation)})"
        if criterion.levels:
            line += " Scale: " + "; ".join(
                f"{lv['score']} = {judged(str(lv['description']))}" for lv in criterion.levels
            )
        lines.append(line)
    return "\n".join(lines)


def multi_criterion_calls(
    spec: JudgeSpec,
    template: PromptTemplate,
    completion: CompletionView,
    items: Sequence[Item],
    attempt: int,
) -> list[Call]:
    framed = _framed(completion)
    calls = []
    for start in range(0, len(items), spec.max_criteria):
        chunk = list(items[start : start + spec.max_criteria])
        criteria = [item.criterion for item in chunk if item.criterion is not None]
        example = ", ".join(
            f'"{n}": {criterion.scores[-1] if criterion.levels else chr(34) + "yes" + chr(34)}'
            for n, criterion in enumerate(criteria, start=1)
        )
        chat = template.render(
            **framed,
            criteria=_numbered(criteria),
            answer_format=f'"yes" or "no" (a number for a criterion with a scale), e.g. {{{example}}}',
        )

        def parse(
            result: Generation | ChoiceResult, chunk: list[Item] = chunk
        ) -> dict[str, v.Verdict]:
            answer = v.json_object(_text_of(result))
            v.expect_keys(answer, len(chunk))
            return {
                item.key: _multi_verdict(answer[str(n)], item)
                for n, item in enumerate(chunk, start=1)
            }

        calls.append(Call(_generation(spec, chat, attempt), tuple(i.key for i in chunk), parse))
    return calls


def _multi_verdict(raw: Any, item: Item) -> v.Verdict:
    criterion = item.criterion
    assert criterion is not None
    if criterion.levels:
        if not isinstance(raw, int) or isinstance(raw, bool) or raw not in criterion.scores:
            raise v.VerdictParseError(f"{raw!r} is not one of the levels {criterion.scores}")
        return v.Verdict(v.ordinal_value(raw, criterion.scores), str(raw))
    if not isinstance(raw, str) or raw.strip().lower() not in {"yes", "no"}:
        raise v.VerdictParseError(f'{raw!r} is not "yes" or "no"')
    label = raw.strip().lower()
    return v.Verdict(1.0 if label == "yes" else 0.0, label)


# -- the whole rubric at once ----------------------------------------------------------


def holistic_calls(
    spec: JudgeSpec,
    template: PromptTemplate,
    completion: CompletionView,
    items: Sequence[Item],
    attempt: int,
    rubric: Sequence[CriterionView] = (),
) -> list[Call]:
    (item,) = items
    lines = "\n".join(f"- [{c.weight:+g}] {judged(c.text)}" for c in rubric)
    chat = template.render(
        **_framed(completion),
        criteria=lines,
        likert_max=str(spec.likert_max),
    )

    def parse(result: Generation | ChoiceResult) -> dict[str, v.Verdict]:
        return {item.key: v.likert_from_text(_text_of(result), spec.likert_max)}

    return [Call(_generation(spec, chat, attempt), (item.key,), parse)]


# -- target against a reference, per dimension (RACE) ----------------------------------


REFERENCE_SCALE_MAX = 10


def reference_relative_calls(
    spec: JudgeSpec,
    template: PromptTemplate,
    completion: CompletionView,
    items: Sequence[Item],
    attempt: int,
) -> list[Call]:
    if not completion.reference:
        raise ModeError(
            "reference-relative judging needs the prompt's reference answer; it has none"
        )
    by_theme: dict[str, list[Item]] = defaultdict(list)
    for item in items:
        assert item.criterion is not None
        by_theme[item.criterion.theme or "overall"].append(item)
    framed = _framed(completion)
    reference = judged(completion.reference)
    calls = []
    for theme, members in by_theme.items():
        chat = template.render(
            **framed,
            reference=reference,
            dimension=judged(theme),
            criteria=_numbered([m.criterion for m in members if m.criterion is not None]),
        )

        def parse(
            result: Generation | ChoiceResult, members: list[Item] = members
        ) -> dict[str, v.Verdict]:
            answer = v.json_object(_text_of(result))
            v.expect_keys(answer, len(members))
            return {
                item.key: _pair_verdict(answer[str(n)]) for n, item in enumerate(members, start=1)
            }

        calls.append(Call(_generation(spec, chat, attempt), tuple(m.key for m in members), parse))
    return calls


def _pair_verdict(raw: Any) -> v.Verdict:
    if not isinstance(raw, dict) or set(raw) != {"target", "reference"}:
        raise v.VerdictParseError(f'{raw!r} is not {{"target": <0-10>, "reference": <0-10>}}')
    scores = []
    for side in ("target", "reference"):
        score = raw[side]
        if (
            isinstance(score, bool)
            or not isinstance(score, int | float)
            or not 0 <= score <= REFERENCE_SCALE_MAX
        ):
            raise v.VerdictParseError(f"{side} score {score!r} is not a number from 0 to 10")
        scores.append(float(score))
    target, reference = scores
    return v.Verdict(
        target / REFERENCE_SCALE_MAX,
        f"{target:g} vs {reference:g}",
        detail={"target": target, "reference": reference},
    )


CallBuilder = Callable[[JudgeSpec, PromptTemplate, CompletionView, Sequence[Item], int], list[Call]]

BUILDERS: dict[VerdictMode, CallBuilder] = {
    VerdictMode.CRITERION_PROB: criterion_prob_calls,
    VerdictMode.CRITERION_TEXT: criterion_text_calls,
    VerdictMode.MULTI_CRITERION: multi_criterion_calls,
    VerdictMode.REFERENCE_RELATIVE: reference_relative_calls,
}
