"""kgen.dist's NcclCommunicator on 1 to 4 threads of one process, with no GPU: CuPy arrays are
host arrays that carry a ``.data.ptr`` and NCCL is a stand-in that copies bytes between those
addresses (grouped sends and receives, broadcast, all-reduce and reduce-scatter in NCCL's
meaning). What is checked is the communicator's own bookkeeping — offsets, counts, each rank's
own piece, padding of unequal blocks, the traffic counts — against NumPy; the real NCCL runs in
tests/test_gpu_dist.py."""

from __future__ import annotations

import ctypes
import sys
import threading
import types
from collections import defaultdict

import numpy as np
import pytest

import kgen.dist.comm as comm_module
from kgen.dist.comm_nccl import NcclCommunicator


class DeviceArray(np.ndarray):
    """A host array standing in for a CuPy one: ``.data.ptr`` is its address."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


def _device(x) -> DeviceArray:
    return np.ascontiguousarray(x).view(DeviceArray)


def _fake_cupy() -> types.ModuleType:
    cupy = types.ModuleType("cupy")
    cupy.uint8 = np.uint8
    cupy.empty = lambda n, dtype: np.empty(n, dtype=dtype).view(DeviceArray)
    cupy.zeros = lambda n, dtype: np.zeros(n, dtype=dtype).view(DeviceArray)
    cupy.ascontiguousarray = _device
    stream = types.SimpleNamespace(ptr=0, synchronize=lambda: None)
    cupy.cuda = types.ModuleType("cupy.cuda")
    cupy.cuda.get_current_stream = lambda: stream
    return cupy


KINDS = {1: np.uint8, 7: np.float32, 8: np.float64}


class FakeNccl:
    """NCCL's semantics for ``size`` ranks on threads, by byte copies between addresses."""

    NCCL_UINT8, NCCL_FLOAT32, NCCL_FLOAT64, NCCL_SUM, NCCL_MAX = 1, 7, 8, 0, 2

    def __init__(self, size: int):
        self.size = size
        self.mail: dict = defaultdict(list)
        self.cond = threading.Condition()
        self.barrier = threading.Barrier(size)
        self.slots: list = [None] * size
        self.local = threading.local()

    # group semantics: a group's sends are posted before its receives wait
    def groupStart(self):
        self.local.ops = []

    def groupEnd(self):
        ops, self.local.ops = self.local.ops, None
        for op in ops:
            if op[0] == "send":
                self._post(*op[1:])
        for op in ops:
            if op[0] == "recv":
                self._take(*op[1:])

    def _post(self, me, peer, address, count):
        with self.cond:
            self.mail[(me, peer)].append(ctypes.string_at(address, count))
            self.cond.notify_all()

    def _take(self, me, peer, address, count):
        with self.cond:
            assert self.cond.wait_for(lambda: self.mail[(peer, me)], timeout=10), f"rank {me} got nothing from {peer}"
            data = self.mail[(peer, me)].pop(0)
        assert len(data) == count, (me, peer, len(data), count)
        ctypes.memmove(address, data, count)

    def comm(self, rank: int):
        return _Comm(self, rank)


class _Comm:
    def __init__(self, world: FakeNccl, rank: int):
        self.world, self.rank = world, rank

    def send(self, address, count, kind, peer, stream):
        assert kind == 1 and getattr(self.world.local, "ops", None) is not None, "sends are grouped bytes"
        self.world.local.ops.append(("send", self.rank, peer, address, count))

    def recv(self, address, count, kind, peer, stream):
        assert kind == 1 and getattr(self.world.local, "ops", None) is not None, "receives are grouped bytes"
        self.world.local.ops.append(("recv", self.rank, peer, address, count))

    def _array(self, address, count, kind):
        return np.ctypeslib.as_array((ctypes.c_byte * (count * np.dtype(KINDS[kind]).itemsize)).from_address(address)
                                     ).view(KINDS[kind])

    def _gather(self, value):
        w = self.world
        w.slots[self.rank] = np.array(value, copy=True)
        w.barrier.wait()
        every = list(w.slots)
        w.barrier.wait()
        return every

    def bcast(self, address, count, kind, root, stream):
        data = ctypes.string_at(address, count) if self.rank == root else None
        every = self._gather(np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8))
        ctypes.memmove(address, every[root].tobytes(), count)

    def allReduce(self, send, recv, count, kind, op, stream):
        every = self._gather(self._array(send, count, kind))
        out = np.sum(every, axis=0) if op == 0 else np.max(every, axis=0)
        self._array(recv, count, kind)[:] = out

    def reduceScatter(self, send, recv, count, kind, op, stream):
        every = self._gather(self._array(send, count * self.world.size, kind))
        out = np.sum(every, axis=0) if op == 0 else np.max(every, axis=0)
        self._array(recv, count, kind)[:] = out[self.rank * count:(self.rank + 1) * count]


class Host:
    def __init__(self, rank, size):
        self.rank, self.size = rank, size


@pytest.fixture
def fake(monkeypatch):
    cupy = _fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cupy.cuda)
    monkeypatch.setattr(comm_module, "array_module", lambda x: cupy if isinstance(x, DeviceArray) else np)

    def run(size: int, body):
        world = FakeNccl(size)
        cupy.cuda.nccl = world
        monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", world)
        results, errors = [None] * size, []

        def rank(r):
            try:
                results[r] = body(NcclCommunicator(world.comm(r), Host(r, size)))
            except BaseException as exc:        # noqa: BLE001 - reported below
                errors.append((r, exc))
                world.barrier.abort()

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors, errors
        return results

    return run


def _piece(r: int, n: int, dtype=np.float32):
    return _device(np.arange(n, dtype=dtype) + 100 * r)


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_allgatherv_and_gatherv_with_unequal_and_empty_pieces(fake, size):
    counts = [(3 * r + 1) % 5 for r in range(size)]            # 1, 4, 2, 0 ...
    want = np.concatenate([np.arange(c, dtype=np.float32) + 100 * r for r, c in enumerate(counts)])

    def body(comm):
        mine = _piece(comm.rank, counts[comm.rank])
        every = comm.allgatherv(mine, counts)
        at_root = comm.gatherv(mine, counts, root=size - 1)
        return every, at_root, comm.traffic.snapshot()

    for r, (every, at_root, traffic) in enumerate(fake(size, body)):
        assert np.array_equal(every, want)
        assert (at_root is None) == (r != size - 1) and (at_root is None or np.array_equal(at_root, want))
        assert traffic.received == (sum(counts) - counts[r]) * 4 + (sum(counts) - counts[r]) * 4 * (r == size - 1)


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_alltoallv_moves_each_block_to_its_rank(fake, size):
    def counts_from(s):
        return [(s + d) % 3 for d in range(size)]         # rank s sends (s + d) % 3 elements to rank d

    def body(comm):
        send_counts = counts_from(comm.rank)
        send = _device(np.concatenate([np.full(c, 10 * comm.rank + d, np.float64)
                                       for d, c in enumerate(send_counts)] or [np.zeros(0)]))
        recv_counts = [counts_from(s)[comm.rank] for s in range(size)]
        return comm.alltoallv(send, send_counts, recv_counts)

    for r, got in enumerate(fake(size, body)):
        want = np.concatenate([np.full(counts_from(s)[r], 10 * s + r, np.float64) for s in range(size)])
        assert np.array_equal(got, want)


@pytest.mark.parametrize("size", [1, 2, 3])
def test_bcast_allreduce_and_reduce_scatter(fake, size):
    counts = [r + 2 for r in range(size)]                    # unequal blocks: padded to the largest

    def body(comm):
        buf = _device(np.arange(5, dtype=np.float32) * 7) if comm.rank == 1 % size else _device(np.zeros(5, np.float32))
        got_b = comm.bcast(buf, root=1 % size)
        x = _device((np.arange(sum(counts)) + comm.rank).astype(np.float16))
        summed = comm.allreduce(x, "sum")
        biggest = comm.allreduce(_device(np.array([comm.rank, -comm.rank], np.float64)), "max")
        block = comm.reduce_scatter(_device(np.arange(sum(counts), dtype=np.float32) * (comm.rank + 1)), counts)
        return got_b, summed, biggest, block

    total = sum(range(1, size + 1))
    base = np.arange(sum(counts), dtype=np.float32)
    for r, (got_b, summed, biggest, block) in enumerate(fake(size, body)):
        assert np.array_equal(got_b, np.arange(5, dtype=np.float32) * 7)
        assert summed.dtype == np.float16
        assert np.array_equal(summed, sum((np.arange(sum(counts)) + q) for q in range(size)).astype(np.float16))
        assert np.array_equal(biggest, [size - 1, 0])
        start = sum(counts[:r])
        assert np.array_equal(block, base[start:start + counts[r]] * total)
