"""The redistribution plan of one rank: which of its elements it keeps, sends to each peer
and receives from each peer when a matrix goes from one layout to another. Pure (no
communication), so a plan is checked against brute force without MPI.

Only elements whose owner changes move: an element the rank holds in both layouts stays; a
rank that holds every element (replicated source) sends nothing. Each piece is a Cartesian
product of local row and column positions, both in increasing global order, so the sender
packs ``shard[np.ix_(rows, cols)]`` and the receiver unpacks into the same positions of its
new shard.

>>> from kgen.dist.layout import resolve
>>> p = plan(resolve("rows", 2), resolve("cols", 2), (4, 4), world=2, rank=0)
>>> [(piece.peer, piece.size) for piece in p.sends], [(piece.peer, piece.size) for piece in p.recvs]
([(1, 4)], [(1, 4)])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kgen.dist.layout import Layout, owned


@dataclass(frozen=True)
class Piece:
    """Local positions (rows x cols) of the elements exchanged with ``peer``."""

    peer: int
    rows: np.ndarray
    cols: np.ndarray

    @property
    def size(self) -> int:
        return len(self.rows) * len(self.cols)


@dataclass(frozen=True)
class Plan:
    keep_src: tuple[np.ndarray, np.ndarray]      # positions in the old shard ...
    keep_dst: tuple[np.ndarray, np.ndarray]      # ... and where they go in the new one
    sends: tuple[Piece, ...]                     # positions in the old shard, by peer
    recvs: tuple[Piece, ...]                     # positions in the new shard, by peer

    def counts(self, world: int) -> tuple[list[int], list[int]]:
        """Elements sent to and received from each rank."""
        send, recv = [0] * world, [0] * world
        for piece in self.sends:
            send[piece.peer] = piece.size
        for piece in self.recvs:
            recv[piece.peer] = piece.size
        return send, recv


def _common(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    _, ia, ib = np.intersect1d(a, b, assume_unique=True, return_indices=True)
    return ia, ib


def plan(src: Layout, dst: Layout, shape: tuple[int, int], world: int, rank: int) -> Plan:
    """``rank``'s part of moving a ``shape`` matrix from layout ``src`` to ``dst`` (both resolved
    for ``world`` ranks)."""
    rows_s, cols_s = owned(src, shape, rank)
    rows_d, cols_d = owned(dst, shape, rank)
    keep_r = _common(rows_s, rows_d)
    keep_c = _common(cols_s, cols_d)
    sends, recvs = [], []
    if not src.replicated:
        for peer in range(world):
            if peer == rank:
                continue
            peer_rows_d, peer_cols_d = owned(dst, shape, peer)
            r, _ = _common(rows_s, peer_rows_d)
            c, _ = _common(cols_s, peer_cols_d)
            if len(r) and len(c):
                sends.append(Piece(peer, r, c))
            peer_rows_s, peer_cols_s = owned(src, shape, peer)
            _, r = _common(peer_rows_s, rows_d)
            _, c = _common(peer_cols_s, cols_d)
            if len(r) and len(c):
                recvs.append(Piece(peer, r, c))
    return Plan((keep_r[0], keep_c[0]), (keep_r[1], keep_c[1]), tuple(sends), tuple(recvs))
