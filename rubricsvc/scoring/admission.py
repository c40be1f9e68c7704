"""The bound on what one request may cost, checked before anything is stored or judged.

Work is counted in judgments as the judge's verdict mode plans them (``scoring.workload``),
each once, the cache not subtracted, a check criterion as one; what its citation checks cost
besides (``scorer.EvidenceCost``) is bounded apart. One rule for a reward batch (the reward
pipeline's admit stage) and a score job (the API's ``api.work``): past either bound the
request is refused with ``TooMuchWork``, naming the figure, its parts and the bound.
"""

from __future__ import annotations

from typing import Literal

from rubricsvc.errors import RubricsvcError
from rubricsvc.scoring.scorer import Workload
from rubricsvc.scoring.workload import evidence_refusal

Figure = Literal["judgments", "evidence"]


class TooMuchWork(RubricsvcError):
    """A request whose planned work passes a bound: ``figure`` (judgments, or the evidence
    cost of citation checks) is ``total``, at most ``bound``; ``field`` names the part of the
    request that asks for it (None: the request as a whole). The message says all of it."""

    def __init__(
        self, message: str, *, figure: Figure, total: int, bound: int, field: str | None
    ) -> None:
        super().__init__(message)
        self.figure = figure
        self.total = total
        self.bound = bound
        self.field = field


def bound_work(
    work: Workload,
    *,
    max_judgments: int,
    max_evidence: int,
    what: str,
    advice: str,
    field: str | None,
) -> None:
    """Raise ``TooMuchWork`` where ``work`` passes ``max_judgments`` judgments (``what``: the
    count of what asked for them, as ``completions: 12``) or ``max_evidence`` (the figure's
    parts named); ``advice`` ends the message (what to send instead)."""
    if work.total > max_judgments:
        raise TooMuchWork(
            f"{work.total} judgments ({what}; planned by the judge's mode: {work.judgments}; "
            f"check criteria: {work.checks}): at most {max_judgments} {advice}",
            figure="judgments",
            total=work.total,
            bound=max_judgments,
            field=field,
        )
    refusal = evidence_refusal(work.evidence, max_evidence)
    if refusal is not None:
        raise TooMuchWork(
            f"{refusal} {advice}",
            figure="evidence",
            total=work.evidence.total,
            bound=max_evidence,
            field=field,
        )
