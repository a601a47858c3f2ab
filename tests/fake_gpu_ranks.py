"""GPU ranks without a GPU, for tests: each rank a thread whose "CuPy" arrays are host arrays
that carry a ``.data.ptr`` and refuse NumPy's functions (as CuPy arrays handed to NumPy by
mistake would), a ``cupy.cuda.nccl`` stand-in that copies bytes between those addresses in
NCCL's meaning (grouped sends and receives, broadcast, all-reduce, reduce-scatter; any number
of communicators), a host channel through shared slots, and local products by NumPy in the
accumulator type. ``rank_runner`` runs a body on every rank with its Context."""

from __future__ import annotations

import ctypes
import sys
import threading
import types
import uuid
from collections import defaultdict

import numpy as np

import kgen.dist.comm as comm_module
import kgen.dist.compute as compute_module
import kgen.dist.gemm_algorithms as algorithms_module
import kgen.dist.matrix as matrix_module
import kgen.dist.redistribute as redistribute_module
from kgen.dist.bootstrap import Launch
from kgen.dist.comm_nccl import NcclCommunicator
from kgen.dist.dtypes import accumulator
from kgen.dist.runtime import Context


class Device(np.ndarray):
    """A host array playing a CuPy one: ``.data.ptr`` is its address, and NumPy's functions
    refuse it (operators, methods and ufuncs work, as on CuPy)."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)

    def __array_function__(self, func, types_, args, kwargs):
        raise AssertionError(f"numpy.{func.__name__} called on a device array")


def plain(x):
    return x.view(np.ndarray) if isinstance(x, Device) else x


def device_array(x) -> Device:
    return np.asarray(x).view(Device)


def _fake_cupy() -> types.ModuleType:
    cp = types.ModuleType("cupy")
    cp.uint8, cp.ndarray = np.uint8, Device
    cp.empty = lambda shape, dtype=np.float64: device_array(np.empty(shape, dtype))
    cp.zeros = lambda shape, dtype=np.float64: device_array(np.zeros(shape, dtype))
    cp.full = lambda shape, value, dtype=None: device_array(np.full(shape, value, dtype))
    cp.ix_ = lambda *arrays: np.ix_(*[plain(a) for a in arrays])
    cp.asarray = lambda x, dtype=None: device_array(np.asarray(plain(x), dtype=dtype))
    cp.array = lambda x, dtype=None, order="K", copy=True: device_array(np.array(plain(x), dtype=dtype, order=order, copy=copy))
    cp.ascontiguousarray = lambda x, dtype=None: device_array(np.ascontiguousarray(plain(x), dtype=dtype))
    cp.concatenate = lambda arrays: device_array(np.concatenate([plain(a) for a in arrays]))
    cp.sum = lambda x, axis=None: device_array(np.sum(plain(x), axis=axis))
    cp.max = lambda x, axis=None: device_array(np.max(plain(x), axis=axis))
    cp.square = lambda x: device_array(np.square(plain(x)))
    cp.asnumpy = lambda x: np.array(plain(x))
    cp.cuda = types.ModuleType("cupy.cuda")
    cp.cuda.Stream = _Stream
    cp.cuda.get_current_stream = _Stream.current
    return cp


class _Event:
    """An event of a stand-in stream: its work is done when it is recorded."""

    done = True

    def synchronize(self):
        pass


class _Stream:
    """A CUDA stream stand-in: work runs when issued, so events are done at once; ``with``
    makes it the thread's current stream (each rank a thread), as CuPy's does."""

    _current = threading.local()

    def __init__(self, non_blocking: bool = False, ptr: int | None = None):
        self.ptr = id(self) if ptr is None else ptr
        self.waited = []

    @classmethod
    def current(cls) -> "_Stream":
        stack = cls._current.__dict__.setdefault("stack", [cls(ptr=0)])
        return stack[-1]

    def record(self, event=None) -> _Event:
        return _Event()

    def wait_event(self, event) -> None:
        self.waited.append(event)

    def synchronize(self) -> None:
        pass

    def __enter__(self):
        self.current()
        self._current.stack.append(self)
        return self

    def __exit__(self, *exc):
        self._current.stack.pop()


class FakeNcclModule:
    """``cupy.cuda.nccl`` for threads: communicators by unique id, groups per thread."""

    NCCL_UINT8, NCCL_FLOAT32, NCCL_FLOAT64, NCCL_SUM, NCCL_MAX = 1, 7, 8, 0, 2
    KINDS = {1: np.uint8, 7: np.float32, 8: np.float64}

    def __init__(self):
        self.worlds: dict = {}
        self.lock = threading.Lock()
        self.local = threading.local()

    def get_unique_id(self):
        return (uuid.uuid4().hex,)

    def NcclCommunicator(self, size, uid, rank):            # noqa: N802 - CuPy's name
        with self.lock:
            world = self.worlds.setdefault(uid, _World(size))
        return _Comm(self, world, rank)

    def groupStart(self):                                   # noqa: N802
        self.local.ops = []

    def groupEnd(self):                                     # noqa: N802
        ops, self.local.ops = self.local.ops, None
        for kind, world, *rest in ops:
            if kind == "send":
                world.post(*rest)
        for kind, world, *rest in ops:
            if kind == "recv":
                world.take(*rest)


class _World:
    def __init__(self, size):
        self.size, self.mail, self.cond = size, defaultdict(list), threading.Condition()
        self.barrier, self.slots = threading.Barrier(size), [None] * size

    def post(self, me, peer, address, count):
        with self.cond:
            self.mail[(me, peer)].append(ctypes.string_at(address, count))
            self.cond.notify_all()

    def take(self, me, peer, address, count):
        with self.cond:
            assert self.cond.wait_for(lambda: self.mail[(peer, me)], timeout=20), f"{me} got nothing from {peer}"
            data = self.mail[(peer, me)].pop(0)
        assert len(data) == count
        ctypes.memmove(address, data, count)

    def exchange(self, rank, value):
        self.slots[rank] = value
        self.barrier.wait()
        every = list(self.slots)
        self.barrier.wait()
        return every


class _Comm:
    def __init__(self, module, world, rank):
        self.module, self.world, self.rank = module, world, rank

    def _array(self, address, count, kind):
        dtype = np.dtype(FakeNcclModule.KINDS[kind])
        raw = (ctypes.c_byte * (count * dtype.itemsize)).from_address(address)
        return np.ctypeslib.as_array(raw).view(dtype)

    def send(self, address, count, kind, peer, stream):
        self.module.local.ops.append(("send", self.world, self.rank, peer, address, count))

    def recv(self, address, count, kind, peer, stream):
        self.module.local.ops.append(("recv", self.world, self.rank, peer, address, count))

    def bcast(self, address, count, kind, root, stream):
        every = self.world.exchange(self.rank, ctypes.string_at(address, count) if self.rank == root else None)
        ctypes.memmove(address, every[root], count)

    def allReduce(self, send, recv, count, kind, op, stream):      # noqa: N802
        every = self.world.exchange(self.rank, self._array(send, count, kind).copy())
        self._array(recv, count, kind)[:] = np.sum(every, axis=0) if op == 0 else np.max(every, axis=0)

    def reduceScatter(self, send, recv, count, kind, op, stream):  # noqa: N802
        every = self.world.exchange(self.rank, self._array(send, count * self.world.size, kind).copy())
        out = np.sum(every, axis=0) if op == 0 else np.max(every, axis=0)
        self._array(recv, count, kind)[:] = out[self.rank * count:(self.rank + 1) * count]

    def check_async_error(self):
        pass

    def abort(self):
        pass

    def destroy(self):
        pass


class ThreadHost:
    """The host channel of ranks that are threads: objects through shared slots."""

    def __init__(self, rank, size, shared):
        self.rank, self.size, self.shared, self.splits = rank, size, shared, 0

    def allgather_object(self, obj):
        return self.shared.exchange(self.rank, obj)

    def bcast_object(self, obj, root):
        return self.allgather_object(obj)[root]

    def barrier(self):
        self.shared.barrier.wait()

    def alive(self, timeout_s):
        self.shared.barrier.wait()

    def split(self, color, key):
        members = sorted((k, r) for c, k, r in self.allgather_object((color, key, self.rank)) if c == color)
        self.splits += 1
        with self.shared.lock:
            group = self.shared.groups.setdefault((self.splits, color), _Shared(len(members)))
        return ThreadHost([r for _, r in members].index(self.rank), len(members), group)

    def free(self):
        pass


class _Shared(_World):
    def __init__(self, size):
        super().__init__(size)
        self.lock, self.groups = threading.Lock(), {}


class ThreadCompute:
    """Device arrays, local products by NumPy in the accumulator type."""

    name = "kgen"

    def __init__(self, cp):
        self.xp = cp

    def gemm(self, a, b):
        acc = accumulator(np.dtype(a.dtype))
        return device_array(plain(a).astype(acc) @ plain(b).astype(acc))

    def product(self, a, b, alpha, beta, c, dtype):
        return compute_module.finish(self.gemm(a, b), alpha, beta, c, dtype)

    def asarray(self, x, dtype=None):
        return self.xp.ascontiguousarray(x, dtype=dtype)

    def to_host(self, x):
        return self.xp.asnumpy(x)


def rank_runner(monkeypatch):
    """``run(size, body)``: ``body(ctx, rank, size)`` on ``size`` thread ranks; their results
    (the fake CuPy and NCCL installed through ``monkeypatch``)."""
    cp, nccl = _fake_cupy(), FakeNcclModule()
    cp.cuda.nccl = nccl
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cp.cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", nccl)
    monkeypatch.setenv("KGEN_DIST_TUNED", "0")
    module_of = lambda x: cp if isinstance(x, Device) else np     # noqa: E731
    for module in (comm_module, compute_module, algorithms_module, matrix_module, redistribute_module):
        monkeypatch.setattr(module, "array_module", module_of)

    def run(size, body):
        shared = _Shared(size)
        hosts = [ThreadHost(r, size, shared) for r in range(size)]
        results, errors = [None] * size, []

        def rank(r):
            try:
                ctx = Context("nccl", NcclCommunicator.create(hosts[r]), ThreadCompute(cp), Launch(r, size, r, "test"))
                results[r] = body(ctx, r, size)
            except BaseException as exc:                    # noqa: BLE001 - reported below
                errors.append((r, repr(exc)))
                shared.barrier.abort()

        threads = [threading.Thread(target=rank, args=(r,)) for r in range(size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        return results

    return run


