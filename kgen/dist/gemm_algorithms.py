"""The three distributed GEMM algorithms. Each brings its operands to the
layouts it computes in (kgen.dist.cost lists them), multiplies through the context's local
compute (the one local-GEMM seam), and returns (C's layout, this rank's C shard).

Each step runs after the other (on GPU ranks, NCCL and the local GEMMs share the current
stream); chunked overlap of communication with the local GEMMs on two streams is not built.
"""

from __future__ import annotations

import numpy as np

from kgen.dist.compute import array_module, finish
from kgen.dist.cost import algorithm_layouts, summa_panels
from kgen.dist.layout import Layout, block_start, coords, local_shape
from kgen.dist.redistribute import move


def _operands(ctx, algorithm: str, A, B, C, beta):
    la, lb, lc = algorithm_layouts(algorithm, A.layout, ctx.comm.size)
    a = move(ctx.comm, A.layout, la, A.shape, A.local)
    b = move(ctx.comm, B.layout, lb, B.shape, B.local)
    c = move(ctx.comm, C.layout, lc, C.shape, C.local) if C is not None and beta != 0 else None
    return lc, a, b, c


def allgather(ctx, A, B, C, alpha: float, beta: float, panel: int) -> tuple[Layout, object]:
    """All-gather A, then C's columns = A @ B's columns (1-D tensor parallel)."""
    lc, a, b, c = _operands(ctx, "allgather", A, B, C, beta)
    return lc, ctx.compute.product(a, b, alpha, beta, c, A.dtype)


def reduce_scatter(ctx, A, B, C, alpha: float, beta: float, panel: int) -> tuple[Layout, object]:
    """Each rank's k slice gives a partial m x n product; a reduce-scatter sums them and
    leaves each rank its rows."""
    lc, a, b, c = _operands(ctx, "reduce_scatter", A, B, C, beta)
    partial = ctx.compute.gemm(a, b)
    m, n = A.shape[0], B.shape[1]
    counts = [local_shape(lc, (m, n), r)[0] * n for r in range(ctx.comm.size)]
    mine = ctx.comm.reduce_scatter(partial.reshape(-1), counts, "sum")
    return lc, finish(mine.reshape(-1, n), alpha, beta, c, A.dtype)


def summa(ctx, A, B, C, alpha: float, beta: float, panel: int) -> tuple[Layout, object]:
    """SUMMA on a P x Q grid: for each k panel, its owners broadcast A's panel along grid rows
    and B's along grid columns, and every rank adds their product to its block of C."""
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
    for k0, k1 in summa_panels(k, lc.grid, panel):
        qa = int(np.searchsorted(a_start, k0, side="right") - 1)       # grid column holding A's panel
        pb = int(np.searchsorted(b_start, k0, side="right") - 1)       # grid row holding B's panel
        a_panel = (a[:, k0 - a_start[qa]:k1 - a_start[qa]] if pc == qa
                   else xp.empty((a.shape[0], k1 - k0), dtype=a.dtype))
        b_panel = (b[k0 - b_start[pb]:k1 - b_start[pb], :] if pr == pb
                   else xp.empty((k1 - k0, b.shape[1]), dtype=b.dtype))
        a_panel = row_comm.bcast(a_panel, root=qa)
        b_panel = col_comm.bcast(b_panel, root=pb)
        acc += ctx.compute.gemm(a_panel, b_panel)
    return lc, finish(acc, alpha, beta, c, A.dtype)


RUN = {"allgather": allgather, "reduce_scatter": reduce_scatter, "summa": summa}
