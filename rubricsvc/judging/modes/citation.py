"""Citation criteria (kind ``citations``): are the response's cited claims supported by the
documents they cite?

The claims that carry a citation are found deterministically (``judging.readers.citations``); each
(claim, cited label) pair is matched to one of the completion's documents by its label (or by
the URL the response's reference list gives that label), and the judge is asked whether the
document, cut to the passages that bear on the claim (``judging.readers.evidence``), supports the
claim: one forward pass for P(yes) in ``criterion-prob``, a reasoned verdict line in the modes
that decode. A pair whose label names no document is unsupported without asking. The
criterion's value is the mean support over the pairs (the expected share of supported
citations); a response that cites nothing scores 0 on it. A check the claim itself made fail
(class ``response``: decided by a control call, ``scoring.attribution``) counts as that claim
unsupported; any other failed check masks the criterion, as a failed judgment masks any judged
criterion.

The question, the template and the passage budget are the mode's own wording: they are hashed
through each per-criterion mode's ``wording`` version.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rubricsvc.backends.types import ChoiceRequest, ChoiceResult, Generation
from rubricsvc.hashing import content_hash
from rubricsvc.judging import keys
from rubricsvc.judging import verdicts as v
from rubricsvc.judging.failures import FailureClass, ResponseFailurePolicy
from rubricsvc.judging.modes import text
from rubricsvc.judging.modes.base import (
    Call,
    CallContext,
    Case,
    CompletionView,
    DocumentView,
    Item,
    Ruling,
)
from rubricsvc.judging.readers.citations import extract_citations
from rubricsvc.judging.readers.evidence import PassageIndex, document_passages
from rubricsvc.judging.templates import PromptTemplate, load_template
from rubricsvc.neutral import judged

TEMPLATE = "citation_support"
QUESTION = "Does the document support the claim?"
# A pair at or above this support counts as supported in the criterion's detail.
SUPPORTED = 0.5
# How much of a claim a score's detail lists (the judge reads it whole).
LISTED_CLAIM_CHARS = 300
NO_DOCUMENT = "no document with this label"


@dataclass(frozen=True)
class CitedPair:
    """One claim and one label it cites, with the document that label names (if any)."""

    claim: str
    label: str
    document: DocumentView | None


@dataclass(frozen=True)
class CitationPlan:
    """A citations criterion's pairs, each with the judgment key that decides it (None: no
    document to check it against)."""

    pairs: tuple[tuple[CitedPair, str | None], ...]


@functools.cache
def citation_template() -> PromptTemplate:
    return load_template(TEMPLATE)


def cited_pairs(completion: CompletionView) -> list[CitedPair]:
    """Every (claim, label) the response cites, matched to the completion's documents: by
    label, else by the URL its reference list gives the label."""
    citations = extract_citations(completion.response)
    by_label = {d.label: d for d in completion.documents}
    by_url = {d.url: d for d in completion.documents if d.url}
    pairs = []
    for claim in citations.claims:
        for label in claim.labels:
            document = by_label.get(label)
            reference = citations.references.get(label)
            if document is None and reference is not None and reference.url:
                document = by_url.get(reference.url)
            pairs.append(CitedPair(claim.text, label, document))
    return pairs


def plan_citations(case: Case) -> tuple[list[Item], CitationPlan]:
    """The judgments a citations criterion needs for ``case`` (each pair with a document,
    once per claim and document), and its plan."""
    items: list[Item] = []
    planned: list[tuple[CitedPair, str | None]] = []
    seen: set[str] = set()
    for pair in cited_pairs(case.completion):
        if pair.document is None:
            planned.append((pair, None))
            continue
        key = keys.citation_key(
            case.judge_hash, content_hash(pair.claim), pair.document.content_hash
        )
        planned.append((pair, key))
        if key not in seen:
            seen.add(key)
            items.append(Item(key, None, citation=pair))
    return items, CitationPlan(tuple(planned))


def _document_block(pair: CitedPair, held: dict[str, PassageIndex]) -> str:
    assert pair.document is not None
    document = pair.document
    head = [f"Title: {judged(document.title)}"] if document.title else []
    head += [f"URL: {judged(document.url)}"] if document.url else []
    # Each document is indexed once and kept (``held``) for its other claims: indexing it
    # again for each claim made a report cost its claims times its documents' size.
    body = judged(document_passages(document.content_hash, document.text, pair.claim, held))
    return "\n".join([*head, body]) if head else body


def citation_calls(context: CallContext, items: Sequence[Item], decode: bool) -> list[Call]:
    """One call per (claim, document): P(yes) from one forward pass, or (``decode``) a
    reasoned reply ending in a verdict line, with the judge's sampling settings."""
    template = citation_template()
    calls = []
    held: dict[str, PassageIndex] = {}  # the documents these checks cite, each indexed once
    for item in items:
        pair = item.citation
        assert isinstance(pair, CitedPair) and pair.document is not None
        fields = {"document": _document_block(pair, held), "claim": judged(pair.claim)}
        if decode:
            question = (
                f"{QUESTION} Explain in one or two sentences, then write your verdict alone on "
                "the last line, exactly in this form: VERDICT: YES or VERDICT: NO"
            )
            chat = template.render(**fields, question=question)
            calls.append(
                Call(
                    text.generation(context, chat),
                    (item.key,),
                    functools.partial(_from_text, item.key),
                )
            )
        else:
            question = f"{QUESTION} Answer with one word: Yes or No."
            chat = template.render(**fields, question=question)
            # Grouped by document: the checks of one document share its prefix.
            request = ChoiceRequest(
                chat, v.YES_TOKENS + v.NO_TOKENS, group=pair.document.content_hash
            )
            calls.append(Call(request, (item.key,), functools.partial(_from_probs, item.key)))
    return calls


def _from_probs(key: str, result: Generation | ChoiceResult) -> dict[str, v.Verdict]:
    return {key: v.binary_from_probs(text.probs_of(result))}


def _from_text(key: str, result: Generation | ChoiceResult) -> dict[str, v.Verdict]:
    return {key: v.binary_from_text(text.text_of(result))}


def split_citation_items(items: Sequence[Item]) -> tuple[list[Item], list[Item]]:
    """(citation checks, the other items)."""
    citing = [i for i in items if i.citation is not None]
    return citing, [i for i in items if i.citation is None]


def citations_outcome(
    plan: CitationPlan,
    rulings: Mapping[str, Ruling],
    response_failure: ResponseFailurePolicy = ResponseFailurePolicy.WORST,
) -> tuple[dict[str, Any], float | None]:
    """A citations criterion's entry fields and value: the mean support over its pairs (0
    when the response cites nothing), or None (masked) when a check failed for a reason out
    of the response's reach. A check the claim itself made fail (class ``response``) counts
    as that claim unsupported, so adding an unjudgeable claim never lifts a score."""
    values: list[float] = []
    unsupported: list[dict[str, Any]] = []
    charged = 0
    for pair, key in plan.pairs:
        if key is None:
            values.append(0.0)
            unsupported.append(_listed(pair, NO_DOCUMENT, None))
            continue
        ruling = rulings.get(key, Ruling(None, error="not judged"))
        if (
            ruling.value is None
            and ruling.failure == FailureClass.RESPONSE.value
            and response_failure == ResponseFailurePolicy.WORST
        ):
            charged += 1
            values.append(0.0)
            unsupported.append(_listed(pair, f"the claim could not be judged: {ruling.error}", 0.0))
            continue
        if ruling.value is None:
            failure = ruling.failure or FailureClass.INFRASTRUCTURE.value
            error = f"citation [{pair.label}]: {ruling.error or 'not judged'}"
            return {"status": "failed", "error": error, "failure": failure}, None
        values.append(ruling.value)
        if ruling.value < SUPPORTED:
            unsupported.append(_listed(pair, "not supported by the document", ruling.value))
    supported = sum(1 for value in values if value >= SUPPORTED)
    detail = {
        "count": len(values),
        "unjudgeable": charged,
        "supported": supported,
        "supported_ratio": supported / len(values) if values else 0.0,
        "unsupported": unsupported,
    }
    value = sum(values) / len(values) if values else 0.0
    verdict = f"{supported}/{len(values)} supported" if values else "no citations"
    return {"status": "ok", "verdict": verdict, "citations": detail}, value


def _listed(pair: CitedPair, reason: str, support: float | None) -> dict[str, Any]:
    claim = pair.claim
    if len(claim) > LISTED_CLAIM_CHARS:
        claim = claim[:LISTED_CLAIM_CHARS] + "…"
    listed: dict[str, Any] = {"claim": claim, "label": pair.label, "reason": reason}
    if support is not None:
        listed["support"] = support
    if pair.document is not None and pair.document.url:
        listed["url"] = pair.document.url
    return listed
