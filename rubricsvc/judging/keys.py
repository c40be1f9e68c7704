"""Judgment cache keys: a hash of exactly the content a verdict depends on."""

from __future__ import annotations

from rubricsvc.hashing import content_hash


def criterion_key(
    judge_hash: str, criterion_hash: str, prompt_hash: str, response_hash: str
) -> str:
    """One criterion judged for one (prompt, response) by one judge config."""
    return content_hash(["criterion", judge_hash, criterion_hash, prompt_hash, response_hash])


def reference_key(
    judge_hash: str, criterion_hash: str, prompt_hash: str, reference_hash: str, response_hash: str
) -> str:
    """Like ``criterion_key``, and the reference report the response is compared with."""
    return content_hash(
        ["reference", judge_hash, criterion_hash, prompt_hash, reference_hash, response_hash]
    )


def holistic_key(judge_hash: str, rubric_hash: str, prompt_hash: str, response_hash: str) -> str:
    """The whole rubric version judged at once."""
    return content_hash(["holistic", judge_hash, rubric_hash, prompt_hash, response_hash])


def pairwise_key(
    judge_hash: str, rubric_hash: str, prompt_hash: str, first_hash: str, second_hash: str
) -> str:
    """Two responses compared under a rubric version, in the order shown (first, second): the
    other order is another judgment."""
    return content_hash(["pairwise", judge_hash, rubric_hash, prompt_hash, first_hash, second_hash])


def pair_keys(
    judge_hash: str, rubric_hash: str, prompt_hash: str, one_hash: str, other_hash: str
) -> tuple[str, str]:
    """The keys of a pair in both orders: (one shown first, the other shown first)."""
    return (
        pairwise_key(judge_hash, rubric_hash, prompt_hash, one_hash, other_hash),
        pairwise_key(judge_hash, rubric_hash, prompt_hash, other_hash, one_hash),
    )


def group_key(
    judge_hash: str, rubric_hash: str, prompt_hash: str, response_hashes: list[str], repeat: int
) -> str:
    """A group of responses scored together, whatever their order (the mode shuffles it per
    repeat): the group's hashes sorted, and which repeat this is."""
    return content_hash(
        ["group", judge_hash, rubric_hash, prompt_hash, sorted(response_hashes), repeat]
    )


def citation_key(judge_hash: str, claim_hash: str, document_hash: str) -> str:
    """One cited claim checked against one document: whoever cites it, the same check."""
    return content_hash(["citation", judge_hash, claim_hash, document_hash])
