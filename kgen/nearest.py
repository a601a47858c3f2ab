"""The nearest tuned problems of a problem: one ranking, for the tuner's warm start and for dispatch.

Two problems compare when they are of one family and agree on every parameter but the
shape ones (dtype, layout, alignment ...); their distance is the Euclidean distance of the
shapes' log2 (``Problem.distance``). Problems that do not compare are never near.

>>> from kgen.problem import Problem
>>> p = Problem.of("gemm", m=1024, n=1024, k=1024, dtype="float32")
>>> keys = ["gemm|dtype=float32|k=1024|m=4096|n=1024",     # 2 away
...         "gemm|dtype=float32|k=1024|m=2048|n=1024",     # 1 away
...         "gemm|dtype=float64|k=1024|m=1024|n=1024",     # another dtype: never near
...         "not a key"]
>>> nearest_problems(p, keys, ("m", "n", "k"))
['gemm|dtype=float32|k=1024|m=2048|n=1024', 'gemm|dtype=float32|k=1024|m=4096|n=1024']
>>> nearest_problems(p, keys, ("m", "n", "k"), within=1.5)
['gemm|dtype=float32|k=1024|m=2048|n=1024']
"""

from __future__ import annotations

import math
from typing import Iterable

from kgen.problem import Problem


def nearest_problems(problem: Problem, keys: Iterable[str], shape_params: Iterable[str],
                     within: float = math.inf) -> list[str]:
    """The keys among ``keys`` of problems comparable with ``problem`` and at most ``within``
    away, nearest first (ties by key); ``problem``'s own key, if given, comes first (0 away).
    A key that does not parse (a shared database's damaged row) is passed over."""
    shape = tuple(shape_params)
    ranked = []
    for key in keys:
        try:
            d = problem.distance(Problem.from_key(key), shape)
        except Exception:
            continue
        if math.isfinite(d) and d <= within:
            ranked.append((d, key))
    return [key for _, key in sorted(ranked)]
