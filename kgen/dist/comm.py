"""The communicator interface every kgen.dist backend implements, and the traffic it counts.

A backend moves array payloads (1-D, contiguous, any supported dtype; NumPy arrays on host
ranks, CuPy arrays on GPU ranks) with a handful of
collectives; the public methods here count what each rank sends and receives and call the
backend's ``_``-methods, which only move data. The counts are the payload each rank hands
to, or takes from, other ranks in the collective's plain meaning, whatever schedule the
library runs underneath (a tree broadcast relays data through ranks that are not counted as
senders):

- ``alltoallv``: what goes to / comes from other ranks, exactly;
- ``allgatherv``: a rank sends its piece to each of the p - 1 others and receives theirs;
- ``gatherv``: a rank sends its piece to the root, which receives the others';
- ``bcast``: the root sends the buffer to each of the others, which receive it once;
- ``reduce_scatter``: a rank sends every block but its own and receives p - 1 copies of its own;
- ``allreduce``: a reduce-scatter then an allgather of the balanced blocks.

Small Python objects (``allgather_object``, ``bcast_object``: the descriptors kgen.dist agrees
on before a collective) are not counted. ``messages`` counts collective calls that move data.

>>> t = Traffic()
>>> t.add(8, 16); t.sent, t.received, t.messages
(8, 16, 1)
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from kgen.dist.compute import array_module
from kgen.dist.layout import block_start


@dataclass
class Traffic:
    """Bytes this rank sent to and received from other ranks, and the collectives that moved
    any; shared by a communicator and the ones split from it."""

    sent: int = 0
    received: int = 0
    messages: int = 0

    def add(self, sent: int, received: int) -> None:
        self.sent += int(sent)
        self.received += int(received)
        if sent or received:
            self.messages += 1

    def reset(self) -> None:
        self.sent = self.received = self.messages = 0

    def snapshot(self) -> Traffic:
        return Traffic(self.sent, self.received, self.messages)


REDUCE_OPS = ("sum", "max")


class Pending:
    """A collective begun (``Communicator.allgatherv_start``, ``reduce_scatter_start``, ``bcast_start``):
    ``wait()`` gives its result, so a rank computes between the start and the wait. A backend
    that moves data only synchronously gives one already done."""

    def __init__(self, result=None, finish=None):
        self._result, self._finish = result, finish

    def wait(self):
        """The collective's result, once this rank has it (its stream ordered after it, on GPU
        ranks)."""
        if self._finish is not None:
            self._result, self._finish = self._finish(), None
        return self._result


class Communicator(ABC):
    """A group of ranks and the collectives kgen.dist needs, counted in ``traffic``."""

    def __init__(self, rank: int, size: int, traffic: Traffic | None = None):
        self.rank, self.size = rank, size
        self.traffic = traffic if traffic is not None else Traffic()

    # ---- counted collectives (arrays) ------------------------------------------------------

    def alltoallv(self, send: np.ndarray, send_counts: Sequence[int], recv_counts: Sequence[int]) -> np.ndarray:
        """Send ``send_counts[d]`` consecutive elements of ``send`` to each rank d; the result
        holds ``recv_counts[s]`` elements from each rank s, in rank order."""
        me, size = self.rank, send.dtype.itemsize
        self.traffic.add((sum(send_counts) - send_counts[me]) * size, (sum(recv_counts) - recv_counts[me]) * size)
        return self._alltoallv(_contiguous(send), list(send_counts), list(recv_counts))

    def allgatherv(self, send: np.ndarray, counts: Sequence[int]) -> np.ndarray:
        """Every rank's ``send`` (``counts[r]`` elements from rank r), concatenated in rank order."""
        self._count_allgatherv(send, counts)
        return self._allgatherv(_contiguous(send), list(counts))

    def allgatherv_start(self, send: np.ndarray, counts: Sequence[int]) -> Pending:
        """``allgatherv`` begun: its result comes from the Pending's ``wait()``; the same traffic."""
        self._count_allgatherv(send, counts)
        return self._allgatherv_start(_contiguous(send), list(counts))

    def _count_allgatherv(self, send: np.ndarray, counts: Sequence[int]) -> None:
        size = send.dtype.itemsize
        self.traffic.add(counts[self.rank] * (self.size - 1) * size, (sum(counts) - counts[self.rank]) * size)

    def gatherv(self, send: np.ndarray, counts: Sequence[int], root: int) -> np.ndarray | None:
        """As allgatherv, on ``root`` only (None elsewhere)."""
        size = send.dtype.itemsize
        if self.rank == root:
            self.traffic.add(0, (sum(counts) - counts[root]) * size)
        else:
            self.traffic.add(counts[self.rank] * size, 0)
        return self._gatherv(_contiguous(send), list(counts), root)

    def bcast(self, buf: np.ndarray, root: int) -> np.ndarray:
        """``root``'s ``buf`` on every rank (others pass a buffer of the same shape and dtype)."""
        self._count_bcast(buf, root)
        return self._bcast(_contiguous(buf), root)

    def bcast_start(self, buf: np.ndarray, root: int) -> Pending:
        """``bcast`` begun: its result comes from the Pending's ``wait()``; the same traffic."""
        self._count_bcast(buf, root)
        return self._bcast_start(_contiguous(buf), root)

    def _count_bcast(self, buf: np.ndarray, root: int) -> None:
        if self.size > 1:
            if self.rank == root:
                self.traffic.add(buf.nbytes * (self.size - 1), 0)
            else:
                self.traffic.add(0, buf.nbytes)

    def allreduce(self, x: np.ndarray, op: str = "sum") -> np.ndarray:
        """The elementwise ``op`` ("sum" or "max") of every rank's ``x``."""
        self._check_op(op)
        if self.size > 1:
            mine = _balanced(x.size, self.size)[self.rank]
            moved = (x.size - mine) * self.reduction_dtype(x.dtype).itemsize
            self.traffic.add(2 * moved, 2 * moved)
        return self._allreduce(_contiguous(x), op)

    def reduce_scatter(self, x: np.ndarray, counts: Sequence[int], op: str = "sum") -> np.ndarray:
        """Block r (``counts[r]`` elements, in order) of the elementwise ``op`` of every rank's
        ``x``, on rank r."""
        self._count_reduce_scatter(x, counts, op)
        return self._reduce_scatter(_contiguous(x), list(counts), op)

    def reduce_scatter_start(self, x: np.ndarray, counts: Sequence[int], op: str = "sum") -> Pending:
        """``reduce_scatter`` begun: its result comes from the Pending's ``wait()``; the same traffic."""
        self._count_reduce_scatter(x, counts, op)
        return self._reduce_scatter_start(_contiguous(x), list(counts), op)

    def _count_reduce_scatter(self, x: np.ndarray, counts: Sequence[int], op: str) -> None:
        self._check_op(op)
        size = self.reduction_dtype(x.dtype).itemsize
        self.traffic.add((sum(counts) - counts[self.rank]) * size, counts[self.rank] * (self.size - 1) * size)

    def reduction_dtype(self, dtype: np.dtype) -> np.dtype:
        """The dtype a reduction of ``dtype`` travels in (a backend without half-precision
        sums widens them)."""
        return dtype

    # ---- uncounted: small objects, synchronisation, sub-groups ----------------------------

    @abstractmethod
    def allgather_object(self, obj) -> list:
        """Every rank's picklable ``obj``, in rank order."""

    @abstractmethod
    def bcast_object(self, obj, root: int):
        """``root``'s picklable ``obj`` on every rank."""

    @abstractmethod
    def barrier(self) -> None:
        """Return once every rank has called it."""

    @abstractmethod
    def split(self, color: int, key: int) -> Communicator:
        """The ranks that passed the same ``color``, ordered by ``key``; shares ``traffic``."""

    def free(self) -> None:
        """Release what the backend holds for this communicator."""

    def alive(self, timeout_s: float) -> None:
        """Return once every rank has reached this call, or raise RankLostError after
        ``timeout_s`` seconds (0: wait for ever); a backend without a way to tell returns."""

    # ---- what a backend implements --------------------------------------------------------

    @abstractmethod
    def _alltoallv(self, send: np.ndarray, send_counts: list[int], recv_counts: list[int]) -> np.ndarray: ...

    @abstractmethod
    def _allgatherv(self, send: np.ndarray, counts: list[int]) -> np.ndarray: ...

    @abstractmethod
    def _gatherv(self, send: np.ndarray, counts: list[int], root: int) -> np.ndarray | None: ...

    @abstractmethod
    def _bcast(self, buf: np.ndarray, root: int) -> np.ndarray: ...

    @abstractmethod
    def _allreduce(self, x: np.ndarray, op: str) -> np.ndarray: ...

    @abstractmethod
    def _reduce_scatter(self, x: np.ndarray, counts: list[int], op: str) -> np.ndarray: ...

    def _allgatherv_start(self, send: np.ndarray, counts: list[int]) -> Pending:
        """A backend with asynchronous collectives begins it here; this one runs it now."""
        return Pending(self._allgatherv(send, counts))

    def _reduce_scatter_start(self, x: np.ndarray, counts: list[int], op: str) -> Pending:
        """A backend with asynchronous collectives begins it here; this one runs it now."""
        return Pending(self._reduce_scatter(x, counts, op))

    def _bcast_start(self, buf: np.ndarray, root: int) -> Pending:
        """A backend with asynchronous collectives begins it here; this one runs it now."""
        return Pending(self._bcast(buf, root))

    @staticmethod
    def _check_op(op: str) -> None:
        if op not in REDUCE_OPS:
            raise ValueError(f"reduction {op!r} is not one of {REDUCE_OPS}")


def poll(ready, timeout_s: float, first_nap: float = 1e-5, longest_nap: float = 1e-3) -> bool:
    """Call ``ready()`` with doubling naps between calls until it is true (True), or until
    ``timeout_s`` seconds have passed (False; 0 or less: no limit)."""
    start, nap = time.monotonic(), first_nap
    while not ready():
        if timeout_s > 0 and time.monotonic() - start > timeout_s:
            return False
        time.sleep(nap)
        nap = min(nap * 2, longest_nap)
    return True


def offsets(counts) -> list[int]:
    """Where each of consecutive pieces of ``counts`` elements starts."""
    out, at = [], 0
    for c in counts:
        out.append(at)
        at += c
    return out


def _contiguous(x):
    """``x`` as a C-contiguous array of its own module (NumPy or CuPy)."""
    return array_module(x).ascontiguousarray(x)


def _balanced(n: int, parts: int) -> list[int]:
    return [block_start(n, parts, i + 1) - block_start(n, parts, i) for i in range(parts)]
