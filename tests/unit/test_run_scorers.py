"""A training run gives back what its scorers hold: every scorer made during the run is closed
when it ends (``closed_with_the_run``), however the run ends; scorers made outside a run are
left to their owner."""

from __future__ import annotations

import pytest

from trainer import scorers
from trainer.config import ScorerSettings


def test_the_scorers_a_run_made_are_closed_when_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[object] = []
    monkeypatch.setattr(scorers.InProcessScorer, "close", lambda self: closed.append(self))
    outside = scorers.make_scorer(ScorerSettings())
    with pytest.raises(RuntimeError), scorers.closed_with_the_run():
        reward = scorers.make_scorer(ScorerSettings())
        with scorers.closed_with_the_run():  # a nested run closes its own
            inner = scorers.make_scorer(ScorerSettings())
        assert closed == [inner]
        gold = scorers.make_scorer(ScorerSettings(judge="other"))
        raise RuntimeError("the run failed")
    assert closed == [inner, reward, gold]
    assert outside not in closed
    assert scorers._RUN_SCORERS == []


def test_providers_left_open_are_closed_and_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[object] = []
    from rubricsvc.backends.provider import BackendProvider

    monkeypatch.setattr(BackendProvider, "close_all", lambda self: closed.append(self))
    left = scorers.shared_provider(ScorerSettings(), None)  # a scorer's, never released
    assert scorers.close_shared_providers() == 1
    assert closed == [left] and scorers._SHARED == {} and scorers.judge_loads() == 0
    assert scorers.close_shared_providers() == 0  # nothing left the second time
