"""A calibration map: a monotone map from a judge's probability to the frequency it stands for.

``rubricsvc judges calibrate`` fits one against human labels (``validation.calibration``) and
stores it in a judge config, where it is part of the hash: the calibrated judge's verdicts are
its own, never replayed from the uncalibrated judge's or mixed with them. The executor applies
it to each parsed verdict and keeps the judge's own value in the verdict's detail.

Only a mode whose verdict values are probabilities can be calibrated (one that declares
``gives_probability``, ``judging.modes``); a decoded verdict (yes = 1, no = 0) or a Likert
score has no confidence to correct.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from itertools import pairwise
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

# Probabilities are clamped into [EPSILON, 1 - EPSILON] before their logit is taken, so a judge
# that is certain (p = 0 or 1) still maps to a finite logit.
EPSILON = 1e-6

CalibrationMethod = Literal["platt", "isotonic"]


def logit(p: float) -> float:
    p = min(max(p, EPSILON), 1.0 - EPSILON)
    return math.log(p / (1.0 - p))


def sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)  # no overflow for a very negative x
    return e / (1.0 + e)


class CalibrationMap(BaseModel):
    """``platt``: ``sigmoid(a * logit(p) + b)`` with params ``a`` (>= 0) and ``b``.
    ``isotonic``: params ``x`` (strictly increasing probabilities, the pooled blocks' mean
    probability) and ``y`` (the blocks' label frequency, non-decreasing, in [0, 1]); between
    two breakpoints the map interpolates linearly, outside them it is flat.

    Either way the map is non-decreasing and lands in [0, 1]: it changes how confident a verdict
    says it is, never which of two responses the judge prefers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: CalibrationMethod
    params: dict[str, list[float] | float]

    @model_validator(mode="after")
    def _params_fit_the_method(self) -> CalibrationMap:
        if self.method == "platt":
            self._check_platt()
        else:
            self._check_isotonic()
        return self

    def _check_platt(self) -> None:
        if set(self.params) != {"a", "b"}:
            raise ValueError(f"a platt map has params a and b, not {sorted(self.params)}")
        a, b = self.params["a"], self.params["b"]
        if not isinstance(a, float | int) or not isinstance(b, float | int):
            raise ValueError("a platt map's params a and b are numbers")
        if not (math.isfinite(a) and math.isfinite(b)):
            raise ValueError("a platt map's params a and b are finite")
        if a < 0:
            raise ValueError(f"a platt map's slope a is at least 0 (monotone), not {a}")

    def _check_isotonic(self) -> None:
        if set(self.params) != {"x", "y"}:
            raise ValueError(f"an isotonic map has params x and y, not {sorted(self.params)}")
        x, y = self.params["x"], self.params["y"]
        if not isinstance(x, list) or not isinstance(y, list) or not x or len(x) != len(y):
            raise ValueError("an isotonic map's x and y are lists of one length, at least 1")
        if not all(0.0 <= v <= 1.0 for v in (*x, *y)):
            raise ValueError("an isotonic map's x and y lie in [0, 1]")
        if any(b <= a for a, b in pairwise(x)):
            raise ValueError("an isotonic map's x is strictly increasing")
        if any(b < a for a, b in pairwise(y)):
            raise ValueError("an isotonic map's y is non-decreasing (monotone)")

    def apply(self, p: float) -> float:
        """The calibrated probability of ``p`` (a probability in [0, 1])."""
        if self.method == "platt":
            a, b = self.params["a"], self.params["b"]
            assert isinstance(a, float | int) and isinstance(b, float | int)
            return sigmoid(a * logit(p) + b)
        x, y = self.params["x"], self.params["y"]
        assert isinstance(x, list) and isinstance(y, list)
        if p <= x[0]:
            return y[0]
        if p >= x[-1]:
            return y[-1]
        right = bisect_right(x, p)  # x[right - 1] <= p < x[right]
        x0, x1, y0, y1 = x[right - 1], x[right], y[right - 1], y[right]
        return min(1.0, max(0.0, y0 + (y1 - y0) * (p - x0) / (x1 - x0)))

    def describe(self) -> str:
        """One line: ``platt (a=1.234, b=-0.567)`` or ``isotonic (12 breakpoints)``."""
        if self.method == "platt":
            return f"platt (a={self.params['a']:.4g}, b={self.params['b']:.4g})"
        x = self.params["x"]
        return f"isotonic ({len(x) if isinstance(x, list) else 0} breakpoints)"
