"""The redistribution service: a shard in one layout becomes the shard of another, moving
only the elements whose owner changes, in one alltoallv of exactly those elements (an
allgatherv when the target is replicated: the same elements, through the collective made
for it). Also the gathers and the scatter that bring a whole matrix to or from ranks.

These functions take the communicator, layouts, global shape and local arrays (NumPy or CuPy:
each works in its shard's module); DistMatrix (kgen.dist.matrix) calls them after its ranks
agreed on the call.
"""

from __future__ import annotations

import numpy as np

from kgen.dist.comm import Communicator
from kgen.dist.compute import array_module, index
from kgen.dist.layout import Layout, local_shape, owned
from kgen.dist.plan import plan


def move(comm: Communicator, src: Layout, dst: Layout, shape: tuple[int, int], local):
    """This rank's shard of the matrix in layout ``dst``, given its shard in ``src``."""
    if src == dst:
        return local
    if dst.replicated:
        return gather(comm, src, shape, local, root=None)
    xp = array_module(local)
    me, world = comm.rank, comm.size
    p = plan(src, dst, shape, world, me)
    new = xp.empty(local_shape(dst, shape, me), dtype=local.dtype)
    new[index(xp, *p.keep_dst)] = local[index(xp, *p.keep_src)]
    if src.replicated:                       # every rank held every element: nothing moves
        return new
    send_counts, recv_counts = p.counts(world)
    parts = [local[index(xp, piece.rows, piece.cols)].reshape(-1) for piece in p.sends]
    send = xp.concatenate(parts) if parts else xp.empty(0, dtype=local.dtype)
    recv = comm.alltoallv(send, send_counts, recv_counts)
    at = 0
    for piece in p.recvs:
        new[index(xp, piece.rows, piece.cols)] = recv[at:at + piece.size].reshape(len(piece.rows), len(piece.cols))
        at += piece.size
    return new


def _assemble(layout: Layout, shape: tuple[int, int], flat, world: int):
    xp = array_module(flat)
    out = xp.empty(shape, dtype=flat.dtype)
    at = 0
    for r in range(world):
        rows, cols = owned(layout, shape, r)
        size = len(rows) * len(cols)
        out[index(xp, rows, cols)] = flat[at:at + size].reshape(len(rows), len(cols))
        at += size
    return out


def gather(comm: Communicator, layout: Layout, shape: tuple[int, int], local, root: int | None):
    """The whole matrix on every rank (``root`` None) or on ``root`` (None elsewhere)."""
    if layout.replicated:
        return local.copy() if root is None or comm.rank == root else None
    counts = [int(np.prod(local_shape(layout, shape, r))) for r in range(comm.size)]
    if root is None:
        return _assemble(layout, shape, comm.allgatherv(local.reshape(-1), counts), comm.size)
    flat = comm.gatherv(local.reshape(-1), counts, root)
    return None if flat is None else _assemble(layout, shape, flat, comm.size)


def scatter(comm: Communicator, layout: Layout, shape: tuple[int, int], whole, dtype: np.dtype, root: int,
            xp=np):
    """This rank's shard of ``root``'s ``whole`` matrix (other ranks pass None), an array of
    ``xp`` (``whole``'s module on the root)."""
    me = comm.rank
    if layout.replicated:
        buf = whole if me == root else xp.empty(shape, dtype=dtype)
        return comm.bcast(xp.ascontiguousarray(buf, dtype=dtype), root)
    recv_counts = [0] * comm.size
    recv_counts[root] = int(np.prod(local_shape(layout, shape, me))) if me != root else 0
    if me == root:
        pieces = [xp.ascontiguousarray(whole[index(xp, *owned(layout, shape, r))], dtype=dtype)
                  for r in range(comm.size)]
        send_counts = [p.size if r != root else 0 for r, p in enumerate(pieces)]
        send = xp.concatenate([p.reshape(-1) for r, p in enumerate(pieces) if r != root] or
                              [xp.empty(0, dtype=dtype)])
    else:
        send_counts, send = [0] * comm.size, xp.empty(0, dtype=dtype)
    recv = comm.alltoallv(send, send_counts, recv_counts)
    if me == root:
        return pieces[root]
    return recv.reshape(local_shape(layout, shape, me))
