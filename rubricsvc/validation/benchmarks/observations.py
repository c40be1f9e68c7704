"""What a benchmark's metric reads of the evaluation: its pairs and its interval settings.

Declared here as protocols, not imported from ``rubricsvc.validation.evaluation``: the
evaluation calls this package (``benchmark_figures``), so this package does not import it
back. ``evaluation.pairwise.PairObservation`` and ``evaluation.common.EvaluationOptions``
satisfy them.
"""

from __future__ import annotations

from typing import Protocol


class PairObservation(Protocol):
    """One pair of a label set as judged: the labellers' majority and the judge's verdict."""

    @property
    def prompt_id(self) -> int: ...

    @property
    def label(self) -> str: ...  # first / second / tie

    @property
    def judged(self) -> str | None: ...  # both orders combined; None: no valid verdict

    @property
    def orders(self) -> tuple[str | None, ...]: ...  # each order's verdict, first's side

    @property
    def tags(self) -> tuple[str, ...]: ...

    @property
    def item(self) -> str: ...  # the label item: a benchmark's record and pair

    @property
    def scores(self) -> tuple[float, float] | None: ...  # a scoring judge's two scores


class EvaluationOptions(Protocol):
    """The bootstrap settings a benchmark's intervals use."""

    @property
    def resamples(self) -> int: ...

    @property
    def level(self) -> float: ...

    @property
    def seed(self) -> int: ...
