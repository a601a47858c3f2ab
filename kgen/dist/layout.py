"""Distributed layouts: which global rows and columns each rank holds.

Pure index arithmetic (NumPy, no communication), so every rule here is tested without MPI.
A layout puts the ranks on a process grid of P x Q, splits the rows over the P grid rows and
the columns over the Q grid columns; a rank holds the rows of its grid row times the columns
of its grid column, in increasing global order, as one dense local array.

============  ==========================================================================
replicated    grid 1 x 1: every rank holds the whole matrix
rows          grid p x 1: balanced row blocks (the first m % p ranks hold one row more)
cols          grid 1 x p: balanced column blocks
block2d       grid P x Q with P * Q = p (default: the squarest), balanced blocks both ways
cyclic2d      grid P x Q, blocks of mb x nb dealt round-robin (ScaLAPACK's block-cyclic)
============  ==========================================================================

Rank r sits at grid position (r // Q, r % Q) ("row" order) or (r % P, r // P) ("col"
order); the transpose of a row-ordered layout is col-ordered, so ``.T`` moves nothing.

>>> lay = resolve("rows", world=3)
>>> [len(owned(lay, (7, 4), r)[0]) for r in range(3)]
[3, 2, 2]
>>> str(resolve(cyclic2d(block=(2, 3)), world=4))
'cyclic2d(2x2, block 2x3)'
>>> resolve("block2d", world=6).grid
(2, 3)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from kgen.errors import DistLayoutError

KINDS = ("replicated", "rows", "cols", "block2d", "cyclic2d")
ORDERS = ("row", "col")


@dataclass(frozen=True)
class Layout:
    """A layout's name and parameters; ``grid`` may be None until ``resolve`` fits it to the
    ranks."""

    kind: str
    grid: tuple[int, int] | None = None
    block: tuple[int, int] = (1, 1)          # cyclic2d only: mb x nb
    order: str = "row"

    def __str__(self) -> str:
        if self.kind in ("replicated", "rows", "cols"):
            return self.kind
        grid = "?" if self.grid is None else f"{self.grid[0]}x{self.grid[1]}"
        text = f"{self.kind}({grid}"
        if self.kind == "cyclic2d":
            text += f", block {self.block[0]}x{self.block[1]}"
        if self.order != "row":
            text += f", {self.order} order"
        return text + ")"

    @property
    def replicated(self) -> bool:
        return self.kind == "replicated"

    @property
    def T(self) -> Layout:
        """The layout of the transposed matrix that holds every element on the same rank."""
        if self.kind in ("replicated",):
            return self
        if self.kind in ("rows", "cols"):
            other = "cols" if self.kind == "rows" else "rows"
            return Layout(other, None if self.grid is None else self.grid[::-1])
        return Layout(self.kind, None if self.grid is None else self.grid[::-1], self.block[::-1],
                      "col" if self.order == "row" else "row")


def block2d(grid: tuple[int, int] | None = None, order: str = "row") -> Layout:
    """Balanced blocks on a P x Q grid (default: the squarest grid of the ranks)."""
    return Layout("block2d", None if grid is None else tuple(grid), (1, 1), order)


def cyclic2d(block: tuple[int, int] = (1, 1), grid: tuple[int, int] | None = None,
             order: str = "row") -> Layout:
    """Blocks of ``block`` = (mb, nb) dealt round-robin over a P x Q grid."""
    return Layout("cyclic2d", None if grid is None else tuple(grid), tuple(block), order)


def default_grid(world: int) -> tuple[int, int]:
    """The squarest P x Q = world with P <= Q.

    >>> default_grid(4), default_grid(3), default_grid(12)
    ((2, 2), (1, 3), (3, 4))
    """
    p = math.isqrt(world)
    while world % p:
        p -= 1
    return p, world // p


def _pair(value, what: str) -> tuple[int, int]:
    try:
        a, b = value
        if int(a) != a or int(b) != b:
            raise ValueError
        return int(a), int(b)
    except (TypeError, ValueError):
        raise DistLayoutError(f"{what} must be two whole numbers, got {value!r}") from None


def resolve(spec: str | Layout, world: int) -> Layout:
    """The layout ``spec`` (a name or a ``Layout``) fitted to ``world`` ranks; raises
    DistLayoutError for a bad name, grid, block or order (no communication happens first)."""
    if not isinstance(world, int) or world < 1:
        raise DistLayoutError(f"a layout is fitted to 1 or more ranks, not {world!r}")
    if isinstance(spec, str):
        if spec not in KINDS:
            raise DistLayoutError(f"unknown layout {spec!r}; the layouts are {', '.join(KINDS)}")
        spec = Layout(spec)
    if not isinstance(spec, Layout):
        raise DistLayoutError(f"a layout is a name or a kgen.dist Layout, got {type(spec).__name__}")
    if spec.kind not in KINDS:
        raise DistLayoutError(f"unknown layout {spec.kind!r}; the layouts are {', '.join(KINDS)}")
    if spec.order not in ORDERS:
        raise DistLayoutError(f"rank order {spec.order!r} is neither 'row' nor 'col'")
    natural = {"replicated": (1, 1), "rows": (world, 1), "cols": (1, world)}.get(spec.kind)
    grid = spec.grid if spec.grid is not None else natural or default_grid(world)
    grid = _pair(grid, f"the grid of {spec.kind}")
    if natural is not None and grid != natural:
        raise DistLayoutError(f"{spec.kind} on {world} ranks has grid {natural[0]}x{natural[1]}, "
                              f"not {grid[0]}x{grid[1]}", remedy="leave out the grid, or use block2d")
    if grid[0] < 1 or grid[1] < 1 or (spec.kind != "replicated" and grid[0] * grid[1] != world):
        raise DistLayoutError(f"grid {grid[0]}x{grid[1]} does not fit {world} ranks "
                              f"({spec.kind} needs P x Q = {world})",
                              remedy=f"give a grid whose product is {world}, or none (default "
                                     f"{default_grid(world)[0]}x{default_grid(world)[1]})")
    block = _pair(spec.block, "the block of cyclic2d")
    if block[0] < 1 or block[1] < 1:
        raise DistLayoutError(f"cyclic2d block {block[0]}x{block[1]} must be at least 1x1")
    order = spec.order if spec.kind in ("block2d", "cyclic2d") else "row"
    return replace(spec, grid=grid, block=block if spec.kind == "cyclic2d" else (1, 1), order=order)


def coords(layout: Layout, rank: int) -> tuple[int, int]:
    """The grid position (grid row, grid column) of ``rank``."""
    p, q = layout.grid
    if layout.replicated:
        return 0, 0
    return (rank // q, rank % q) if layout.order == "row" else (rank % p, rank // p)


def rank_at(layout: Layout, pr: int, pc: int) -> int:
    """The rank at grid position (pr, pc) of a layout that is not replicated."""
    p, q = layout.grid
    return pr * q + pc if layout.order == "row" else pc * p + pr


def block_start(n: int, parts: int, i: int) -> int:
    """Where part ``i`` of ``n`` split into ``parts`` balanced blocks starts (i may be parts).

    >>> [block_start(7, 3, i) for i in range(4)]
    [0, 3, 5, 7]
    """
    return i * (n // parts) + min(i, n % parts)


def part_indices(n: int, parts: int, i: int, block: int | None = None) -> np.ndarray:
    """The global indices part ``i`` holds: a balanced block (``block`` None) or the
    ``block``-sized pieces dealt round-robin, in increasing order.

    >>> part_indices(10, 2, 1, block=3).tolist()
    [3, 4, 5, 9]
    """
    if block is None:
        return np.arange(block_start(n, parts, i), block_start(n, parts, i + 1), dtype=np.int64)
    g = np.arange(n, dtype=np.int64)
    return g[(g // block) % parts == i]


def part_of(n: int, parts: int, block: int | None = None) -> np.ndarray:
    """For each of ``n`` indices, the part that holds it."""
    g = np.arange(n, dtype=np.int64)
    if block is not None:
        return (g // block) % parts
    starts = np.array([block_start(n, parts, i) for i in range(1, parts)], dtype=np.int64)
    return np.searchsorted(starts, g, side="right")


def owned(layout: Layout, shape: tuple[int, int], rank: int) -> tuple[np.ndarray, np.ndarray]:
    """(global rows, global columns) ``rank`` holds, each in increasing order."""
    m, n = shape
    pr, pc = coords(layout, rank)
    p, q = layout.grid
    mb, nb = layout.block if layout.kind == "cyclic2d" else (None, None)
    return part_indices(m, p, pr, mb), part_indices(n, q, pc, nb)


def local_shape(layout: Layout, shape: tuple[int, int], rank: int) -> tuple[int, int]:
    rows, cols = owned(layout, shape, rank)
    return len(rows), len(cols)


def owners(layout: Layout, shape: tuple[int, int]) -> np.ndarray:
    """An m x n array of the rank holding each element (-1 for every element when replicated).

    >>> owners(resolve("cols", 2), (2, 3)).tolist()
    [[0, 0, 1], [0, 0, 1]]
    """
    m, n = shape
    if layout.replicated:
        return np.full((m, n), -1, dtype=np.int64)
    p, q = layout.grid
    mb, nb = layout.block if layout.kind == "cyclic2d" else (None, None)
    pr = part_of(m, p, mb)[:, None]
    pc = part_of(n, q, nb)[None, :]
    return pr * q + pc if layout.order == "row" else pc * p + pr


def received_elements(src: Layout, dst: Layout, shape: tuple[int, int], rank: int) -> int:
    """How many elements ``rank`` must receive to go from ``src`` to ``dst``: those it holds
    in ``dst`` and not in ``src`` (the least any redistribution can move to it)."""
    if src.replicated:
        return 0
    rows_s, cols_s = owned(src, shape, rank)
    rows_d, cols_d = owned(dst, shape, rank)
    keep = len(np.intersect1d(rows_s, rows_d, assume_unique=True)) * \
        len(np.intersect1d(cols_s, cols_d, assume_unique=True))
    return len(rows_d) * len(cols_d) - keep
