"""The three distributed GEMM algorithms. Each brings its operands to the
layouts it computes in (kgen.dist.cost lists them), multiplies through the context's local
compute (the one local-GEMM seam), and returns (C's layout, this rank's C shard).

All-gather and reduce-scatter overlap their collective with the local GEMMs in ``chunks``
pieces (each rank's row block of C cut into that many): the collective of one piece is
begun (``Communicator.allgatherv_start``, ``reduce_scatter_start``: MPI's non-blocking
collectives on host ranks, NCCL on a second stream on GPU ranks) before the GEMM of the
piece beside it runs. The same bytes move as with one piece, in ``chunks`` times the
messages. All-gather chunks where A is already in row blocks (from another layout, the
redistribution to row blocks would move more than the one all-gather). SUMMA's pieces are
its k panels: the broadcasts of the next panel are begun before this panel's GEMM runs.
"""

from __future__ import annotations

import numpy as np

from kgen.dist.compute import array_module, finish
from kgen.dist.cost import algorithm_layouts, summa_panels
from kgen.dist.layout import Layout, block_start, coords, local_shape, resolve
from kgen.dist.redistribute import move


def _operands(ctx, algorithm: str, A, B, C, beta):
    la, lb, lc = algorithm_layouts(algorithm, A.layout, ctx.comm.size)
    a = move(ctx.comm, A.layout, la, A.shape, A.local)
    b = move(ctx.comm, B.layout, lb, B.shape, B.local)
    c = move(ctx.comm, C.layout, lc, C.shape, C.local) if C is not None and beta != 0 else None
    return lc, a, b, c


def row_pieces(m: int, world: int, chunks: int) -> list[list[tuple[int, int]]]:
    """For each of ``chunks`` pieces, each rank's global rows (start, stop) in it: every
    rank's row block cut into ``chunks`` balanced parts.

    >>> row_pieces(7, 2, 2)
    [[(0, 2), (4, 6)], [(2, 4), (6, 7)]]
    """
    blocks = [(block_start(m, world, r), block_start(m, world, r + 1)) for r in range(world)]
    return [[(s + block_start(e - s, chunks, i), s + block_start(e - s, chunks, i + 1)) for s, e in blocks]
            for i in range(chunks)]


def allgather(ctx, A, B, C, alpha: float, beta: float, panel: int, chunks: int = 1) -> tuple[Layout, object]:
    """All-gather A, then C's columns = A @ B's columns (1-D tensor parallel); in ``chunks``
    pieces of A's rows where A is in row blocks, each piece's GEMM beside the next's gather."""
    comm = ctx.comm
    if chunks <= 1 or A.layout != resolve("rows", comm.size):
        lc, a, b, c = _operands(ctx, "allgather", A, B, C, beta)
        return lc, ctx.compute.product(a, b, alpha, beta, c, A.dtype)
    _, lb, lc = algorithm_layouts("allgather", A.layout, comm.size)
    b = move(comm, B.layout, lb, B.shape, B.local)
    c = move(comm, C.layout, lc, C.shape, C.local) if C is not None and beta != 0 else None
    (m, k), first = A.shape, block_start(A.shape[0], comm.size, comm.rank)
    xp = array_module(A.local)

    def start(pieces):
        s, e = pieces[comm.rank]
        return comm.allgatherv_start(A.local[s - first:e - first].reshape(-1), [(e - s) * k for s, e in pieces])

    plan, out = row_pieces(m, comm.size, chunks), None
    pending = start(plan[0])
    for i, pieces in enumerate(plan):
        rows = pending.wait().reshape(-1, k)
        if i + 1 < len(plan):
            pending = start(plan[i + 1])
        c_rows = xp.concatenate([c[s:e] for s, e in pieces]) if c is not None else None
        part = ctx.compute.product(rows, b, alpha, beta, c_rows, A.dtype)
        if out is None:
            out = xp.empty((m, part.shape[1]), dtype=part.dtype)
        at = 0
        for s, e in pieces:
            out[s:e] = part[at:at + e - s]
            at += e - s
    return lc, out


def reduce_scatter(ctx, A, B, C, alpha: float, beta: float, panel: int, chunks: int = 1) -> tuple[Layout, object]:
    """Each rank's k slice gives a partial m x n product; a reduce-scatter sums them and
    leaves each rank its rows; in ``chunks`` pieces of rows, each piece's reduce-scatter
    beside the next piece's GEMM."""
    lc, a, b, c = _operands(ctx, "reduce_scatter", A, B, C, beta)
    m, n = A.shape[0], B.shape[1]
    comm = ctx.comm
    if chunks <= 1:
        partial = ctx.compute.gemm(a, b)
        counts = [local_shape(lc, (m, n), r)[0] * n for r in range(comm.size)]
        mine = comm.reduce_scatter(partial.reshape(-1), counts, "sum")
        return lc, finish(mine.reshape(-1, n), alpha, beta, c, A.dtype)
    xp = array_module(a)

    def start(pieces):
        partial = ctx.compute.gemm(xp.concatenate([a[s:e] for s, e in pieces]), b)
        return comm.reduce_scatter_start(partial.reshape(-1), [(e - s) * n for s, e in pieces], "sum")

    plan, mine = row_pieces(m, comm.size, chunks), []
    pending = start(plan[0])
    for i in range(len(plan)):
        following = start(plan[i + 1]) if i + 1 < len(plan) else None     # its GEMM while this one reduces
        mine.append(pending.wait().reshape(-1, n))
        pending = following
    return lc, finish(xp.concatenate(mine), alpha, beta, c, A.dtype)


def summa(ctx, A, B, C, alpha: float, beta: float, panel: int, chunks: int = 1) -> tuple[Layout, object]:
    """SUMMA on a P x Q grid: for each k panel, its owners broadcast A's panel along grid rows
    and B's along grid columns, and every rank adds their product to its block of C
    (``chunks`` does not apply: its pieces are the panels)."""
    lc, a, b, c = _operands(ctx, "summa", A, B, C, beta)
    grid_p, grid_q = lc.grid
    pr, pc = coords(lc, ctx.comm.rank)
    row_comm, col_comm = ctx.grid_comms(lc)
    k = A.shape[1]
    a_start = [block_start(k, grid_q, j) for j in range(grid_q + 1)]
    b_start = [block_start(k, grid_p, i) for i in range(grid_p + 1)]
    acc_dtype = ctx.compute.gemm(a[:0, :0], b[:0, :0]).dtype
    xp = array_module(a)
    acc = xp.zeros((a.shape[0], b.shape[1]), dtype=acc_dtype)

    def start(k0, k1):
        """The broadcasts of the panel [k0, k1) begun: A's along the grid row, B's along the column."""
        qa = int(np.searchsorted(a_start, k0, side="right") - 1)       # grid column holding A's panel
        pb = int(np.searchsorted(b_start, k0, side="right") - 1)       # grid row holding B's panel
        a_panel = (a[:, k0 - a_start[qa]:k1 - a_start[qa]] if pc == qa
                   else xp.empty((a.shape[0], k1 - k0), dtype=a.dtype))
        b_panel = (b[k0 - b_start[pb]:k1 - b_start[pb], :] if pr == pb
                   else xp.empty((k1 - k0, b.shape[1]), dtype=b.dtype))
        return row_comm.bcast_start(a_panel, root=qa), col_comm.bcast_start(b_panel, root=pb)

    panels = summa_panels(k, lc.grid, panel)
    pending = start(*panels[0]) if panels else None
    for i in range(len(panels)):
        a_panel, b_panel = pending[0].wait(), pending[1].wait()
        if i + 1 < len(panels):
            pending = start(*panels[i + 1])                           # the next panel moves beside this GEMM
        acc += ctx.compute.gemm(a_panel, b_panel)
    return lc, finish(acc, alpha, beta, c, A.dtype)


RUN = {"allgather": allgather, "reduce_scatter": reduce_scatter, "summa": summa}
