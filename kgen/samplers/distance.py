"""How far apart two configs of a space are, by the positions of their values in each
parameter's ordered choices.

>>> from kgen.space import Param, Space
>>> space = Space([Param("TILE", (16, 32, 64, 128, 256)), Param("GROUP", (1, 8))])
>>> config_distance(space, dict(TILE=64, GROUP=8), dict(TILE=128, GROUP=1))
1.25
>>> move_distance(space, dict(TILE=64, GROUP=8), dict(TILE=128, GROUP=8))
1.25
"""

from __future__ import annotations

from kgen.space import Space


def _summed_over_params(space: Space, a: dict, b: dict, cost) -> float:
    """``cost(places, choices)`` summed over the parameters where ``a`` and ``b`` differ:
    ``places`` apart in the parameter's ordered ``choices``."""
    total = 0.0
    for p in space.params:
        if len(p.choices) > 1 and a[p.name] != b[p.name]:
            total += cost(abs(p.choices.index(a[p.name]) - p.choices.index(b[p.name])), len(p.choices))
    return total


def config_distance(space: Space, a: dict, b: dict) -> float:
    """How far apart two configs are: per parameter, the distance of their positions in its
    ordered choices over the span (0 same .. 1 ends), summed."""
    return _summed_over_params(space, a, b, lambda places, n: places / (n - 1))


def move_distance(space: Space, a: dict, b: dict) -> float:
    """How far apart two configs are in moves: per parameter, the places apart of their values
    in its ordered choices, each place counting one plus its share of the span (1/(choices - 1)),
    summed. Every config one move away is nearer than any two moves away; among one-move
    neighbours, a step of a many-valued parameter (a tile size) comes before a switch of a
    two-valued one."""
    return _summed_over_params(space, a, b, lambda places, n: places * (1 + 1 / (n - 1)))
