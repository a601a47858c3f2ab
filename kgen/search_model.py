"""The kgen sampler's estimate of a config's time from the configs measured so far.

An additive model of the log time: one learned effect per (parameter, value), fitted by
ridge regression on the successful measurements of this tune. GEMM parameters act largely
independently on the log time (a wider vector load helps at any tile; a deeper pipeline
helps at most), so a few dozen measurements rank the unmeasured configs far better than
their distance from the best does, and the ridge keeps a value never seen at the mean.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

import numpy as np

from kgen.space import Space


class AdditiveModel:
    """``predict(values)``: the estimated log time of a config (lower is faster)."""

    def __init__(self, space: Space, ridge: float = 1.0):
        self._columns: dict[tuple[str, object], int] = {}
        for p in space.params:
            if len(p.choices) > 1:                 # a fixed parameter explains nothing
                for value in p.choices:
                    self._columns[(p.name, value)] = len(self._columns)
        self._names = sorted({name for name, _ in self._columns})
        self._ridge = ridge
        self._mean = 0.0
        self._effects = np.zeros(len(self._columns))

    def _row(self, values: Mapping) -> np.ndarray:
        row = np.zeros(len(self._columns))
        for name in self._names:
            j = self._columns.get((name, values.get(name)))
            if j is not None:
                row[j] = 1.0
        return row

    def fit(self, measured: Iterable[tuple[Mapping, float]]) -> "AdditiveModel":
        """Fit to (config values, time in ms) pairs."""
        pairs = [(values, time_ms) for values, time_ms in measured if time_ms > 0]
        if not pairs:
            raise ValueError("the model needs at least one successful measurement")
        x = np.array([self._row(values) for values, _ in pairs])
        y = np.array([math.log(time_ms) for _, time_ms in pairs])
        self._mean = float(y.mean())
        gram = x.T @ x + self._ridge * np.eye(len(self._columns))
        self._effects = np.linalg.solve(gram, x.T @ (y - self._mean))
        return self

    def predict(self, values: Mapping) -> float:
        return self._mean + float(self._row(values) @ self._effects)
