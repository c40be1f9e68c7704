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
