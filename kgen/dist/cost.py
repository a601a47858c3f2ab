"""Which distributed GEMM algorithm a call runs when it names none: an alpha-beta cost model.

For each algorithm, the model counts, per rank, the bytes it receives (its inputs brought to
the algorithm's layouts, the algorithm's own collectives, its result brought to the layout
asked for) and the latency steps, and charges

    seconds = alpha * steps + max over ranks of (bytes received) / bandwidth

with alpha = KGEN_DIST_ALPHA_US and bandwidth = KGEN_DIST_BANDWIDTH_GBS; the cheapest wins,
ties going to the earlier of ALGORITHMS. Every rank multiplies the same m n k / p, so flops
do not enter. Latency steps: a redistribution (an alltoallv) p - 1, an allgather, a
reduce-scatter or a broadcast among g ranks ceil(log2 g) (recursive doubling, binomial
trees), SUMMA two broadcasts per k panel. This is a stand-in: the GPU backend will store the
measured choice as a tuned family in the database, as kgen does for kernels.

The algorithms and the layouts they compute in:

==============  ==============================  ================================
allgather       A replicated (the all-gather),  C cols   (1-D tensor parallel:
                B cols                                   column-parallel linear)
reduce_scatter  A cols, B rows (k split)        C rows   (partial products summed
                                                         by a reduce-scatter)
summa           A, B block2d on one grid        C block2d (panels of k broadcast
                                                          along grid rows and columns)
==============  ==============================  ================================

>>> from kgen.dist.layout import resolve
>>> case = GemmCase(512, 512, 512, 4, 4, 4, resolve("replicated", 4), resolve("cols", 4))
>>> choose(case, alpha_s=5e-6, beta_s=1e-10)       # A already replicated, B already cols: free
'allgather'
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kgen.dist.layout import Layout, block_start, coords, local_shape, received_elements, resolve

ALGORITHMS = ("allgather", "reduce_scatter", "summa")


@dataclass(frozen=True)
class GemmCase:
    """What the choice depends on: C (m x n) = A (m x k) @ B (k x n) on ``world`` ranks,
    with the operands' element size, the accumulator's, and the layouts (resolved)."""

    m: int
    n: int
    k: int
    world: int
    itemsize: int
    acc_itemsize: int
    a: Layout
    b: Layout
    c: Layout | None = None          # C's layout when beta * C is added
    out: Layout | None = None        # the layout asked for the result (None: the algorithm's)


@dataclass(frozen=True)
class Estimate:
    algorithm: str
    bytes: int              # most bytes any rank receives
    steps: int              # latency steps
    seconds: float


def summa_grid(a: Layout, world: int) -> Layout:
    """SUMMA's block2d layout: A's grid when A is row-ordered block2d already, else the squarest."""
    if a.kind == "block2d" and a.order == "row":
        return a
    return resolve("block2d", world)


def algorithm_layouts(algorithm: str, a: Layout, world: int) -> tuple[Layout, Layout, Layout]:
    """(A's, B's, C's) layouts ``algorithm`` computes in."""
    if algorithm == "allgather":
        return resolve("replicated", world), resolve("cols", world), resolve("cols", world)
    if algorithm == "reduce_scatter":
        return resolve("cols", world), resolve("rows", world), resolve("rows", world)
    grid = summa_grid(a, world)
    return grid, grid, grid


def _log2(g: int) -> int:
    return math.ceil(math.log2(g)) if g > 1 else 0


def summa_panels(k: int, grid: tuple[int, int], panel: int) -> list[tuple[int, int]]:
    """SUMMA's k panels: A's column blocks (over Q) cut at B's row blocks (over P), each cut
    again to at most ``panel`` wide (0: no limit).

    >>> summa_panels(7, (2, 3), 0)
    [(0, 3), (3, 4), (4, 5), (5, 7)]
    """
    p, q = grid
    cuts = sorted({block_start(k, q, j) for j in range(q + 1)} | {block_start(k, p, i) for i in range(p + 1)})
    out = []
    for lo, hi in zip(cuts, cuts[1:]):
        step = panel if panel > 0 else hi - lo
        out.extend((s, min(s + step, hi)) for s in range(lo, hi, step))
    return out


def estimate(case: GemmCase, algorithm: str, alpha_s: float, beta_s: float, panel: int = 0) -> Estimate:
    """The model's cost of ``algorithm`` for ``case`` (``beta_s``: seconds per byte)."""
    m, n, k, p = case.m, case.n, case.k, case.world
    la, lb, lc = algorithm_layouts(algorithm, case.a, p)
    recv = [0] * p
    steps = 0

    def move(src: Layout | None, dst: Layout, shape: tuple[int, int], itemsize: int) -> None:
        nonlocal steps
        if src is None or src == dst:
            return
        counts = [received_elements(src, dst, shape, r) for r in range(p)]
        if any(counts):
            steps += _log2(p) if dst.replicated else p - 1
            for r in range(p):
                recv[r] += counts[r] * itemsize

    move(case.a, la, (m, k), case.itemsize)           # for allgather, this is the all-gather itself
    move(case.b, lb, (k, n), case.itemsize)
    move(case.c, lc, (m, n), case.itemsize)
    if algorithm == "reduce_scatter" and p > 1:
        steps += _log2(p)
        for r in range(p):
            recv[r] += local_shape(lc, (m, n), r)[0] * n * (p - 1) * case.acc_itemsize
    if algorithm == "summa" and p > 1:
        grid_p, grid_q = lc.grid
        steps += len(summa_panels(k, lc.grid, panel)) * (_log2(grid_p) + _log2(grid_q))
        for r in range(p):
            pr, pc = coords(lc, r)
            a_rows = local_shape(la, (m, k), r)[0]
            b_cols = local_shape(lb, (k, n), r)[1]
            a_own = block_start(k, grid_q, pc + 1) - block_start(k, grid_q, pc)
            b_own = block_start(k, grid_p, pr + 1) - block_start(k, grid_p, pr)
            recv[r] += (a_rows * (k - a_own) + b_cols * (k - b_own)) * case.itemsize
    if case.out is not None:
        move(lc, case.out, (m, n), case.itemsize)
    most = max(recv)
    return Estimate(algorithm, most, steps, alpha_s * steps + beta_s * most)


def estimates(case: GemmCase, alpha_s: float, beta_s: float, panel: int = 0) -> list[Estimate]:
    return [estimate(case, a, alpha_s, beta_s, panel) for a in ALGORITHMS]


def choose(case: GemmCase, alpha_s: float, beta_s: float, panel: int = 0) -> str:
    """The cheapest algorithm under the model (ties: the earlier of ALGORITHMS)."""
    costs = estimates(case, alpha_s, beta_s, panel)
    best = min(range(len(costs)), key=lambda i: (costs[i].seconds, i))
    return costs[best].algorithm
