"""A tune's progress: the best time so far after each trial, and where it improved.

>>> best_so_far([3.0, None, 2.0, 2.5, 1.0])
[3.0, 3.0, 2.0, 2.0, 1.0]
>>> improvements([3.0, None, 2.0, 2.5, 1.0])
[(0, 3.0), (2, 2.0), (4, 1.0)]
>>> thin(list(range(10)), 4)
[0, 3, 6, 9]
>>> active_seconds([100.0, 101.5, None, 9000.0, 9002.0], pause=600)
([0.0, 1.5, None, 1.5, 3.5], [1.5])
"""

from __future__ import annotations

from typing import Iterable, Sequence, TypeVar

T = TypeVar("T")


def best_so_far(times: Iterable[float | None]) -> list[float | None]:
    """After each trial, the lowest time so far (None until a trial succeeds; a failed trial,
    None, keeps the best)."""
    out: list[float | None] = []
    best = None
    for t in times:
        if t is not None and (best is None or t < best):
            best = t
        out.append(best)
    return out


def improvements(times: Iterable[float | None]) -> list[tuple[int, float]]:
    """(trial index, new best) of every trial that lowered the best so far."""
    out: list[tuple[int, float]] = []
    for i, t in enumerate(times):
        if t is not None and (not out or t < out[-1][1]):
            out.append((i, t))
    return out


def thin(items: Sequence[T], most: int) -> list[T]:
    """At most ``most`` of ``items``, evenly spaced, the first and last kept (order kept, so
    a monotone sequence stays monotone)."""
    n = len(items)
    if n <= most:
        return list(items)
    if most <= 1:
        return list(items[:most])
    return [items[round(i * (n - 1) / (most - 1))] for i in range(most)]


def active_seconds(stamps: Sequence[float | None], pause: float) -> tuple[list[float | None], list[float]]:
    """Seconds since the first stamp (epoch seconds, in order; None: unreadable, kept None),
    with every gap longer than ``pause`` cut out (a tune resumed later); and where, on that
    axis, each cut was made."""
    out: list[float | None] = []
    cuts: list[float] = []
    prev, elapsed = None, 0.0
    for t in stamps:
        if t is None:
            out.append(None)
            continue
        if prev is not None:
            gap = t - prev
            if gap > pause:
                cuts.append(elapsed)
            else:
                elapsed += max(gap, 0.0)
        out.append(elapsed)
        prev = t
    return out, cuts
