"""Fake device arrays, kernels and a launcher: the call path with no GPU (kernels really compile)."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np

BASE = 0x7F00_0000_0000          # a 256-byte aligned fake device address


class FakeArray:
    """Just enough of a CUDA array: __cuda_array_interface__ and .device.id."""

    def __init__(self, shape, dtype="float32", ptr=BASE, strides=None, device=0):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.ptr = ptr
        self.elem_strides = strides
        self.device = SimpleNamespace(id=device)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def __cuda_array_interface__(self):
        strides = None if self.elem_strides is None else tuple(s * self.dtype.itemsize for s in self.elem_strides)
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "strides": strides, "version": 3}

    @property
    def T(self):
        s = self.elem_strides or (self.shape[1], 1)
        return FakeArray(self.shape[::-1], self.dtype, self.ptr, s[::-1], self.device.id)


class FakeKernel:
    def __init__(self, binary):
        self.binary = binary
        self.entry = binary.entry
        self.launches = []
        self.scales = []

    def launch(self, grid, block, args, shared_mem=0, stream=None):
        self.launches.append(SimpleNamespace(grid=tuple(grid), block=tuple(block), args=list(args),
                                             shared_mem=shared_mem, stream=stream))

    def bind(self, grid, block, shared_mem, template):
        """A launch with fixed geometry, recorded like ``launch``, each value in its slot's type
        (as an ArgPack stores it)."""
        assert all(isinstance(v, np.generic) for v in template)

        def launch(values, stream=None):
            assert len(values) == len(template)
            typed = [v if isinstance(v, np.generic) else type(t)(v) for t, v in zip(template, values)]
            self.launch(grid, block, typed, shared_mem, stream)

        return launch

    def scale(self, array, factor):
        self.scales.append((array, factor))


class FakeLauncher:
    def __init__(self):
        self.kernels: list[FakeKernel] = []
        self.allocated = []

    def load(self, binary):
        assert binary.cubin and binary.entry
        k = FakeKernel(binary)
        self.kernels.append(k)
        return k

    def empty(self, shape, dtype, like=None):
        out = FakeArray(shape, dtype, ptr=BASE + 0x1000_0000 * (len(self.allocated) + 1),
                        device=like.device.id if like is not None else 0)
        self.allocated.append(out)
        return out

    @property
    def launches(self):
        return [(k, l) for k in self.kernels for l in k.launches]


@contextmanager
def fake_dispatch(target):
    """A Dispatcher over an in-memory store and a FakeLauncher, made the default for the block."""
    from kgen.db import MemoryStore
    from kgen.dispatch import Dispatcher, set_default_dispatcher

    launcher = FakeLauncher()
    dispatcher = Dispatcher(db=MemoryStore(), launcher=launcher, targets={0: target})
    old = set_default_dispatcher(dispatcher)
    try:
        yield SimpleNamespace(launcher=launcher, dispatcher=dispatcher)
    finally:
        set_default_dispatcher(old)


def recorded_gpu(recording, seed: int = 0):
    """A stand-in for a GPU that answers from a recording as if it measured here: its trials
    are ordinary measurements (a ReplayRunner's are marked ``replay`` and never dispatched)."""
    import dataclasses

    from kgen.measurement import Timing
    from kgen.runners.replay import ReplayRunner

    class RecordedGPU(ReplayRunner):
        def answer(self, task):
            return dataclasses.replace(super().answer(task), timing=Timing())

    return RecordedGPU(recording, seed=seed)


def differing_arguments(got, want) -> list[int]:
    """Indices where two kernel argument lists differ (tensor-map records compared by bytes)."""
    if len(got) != len(want):
        return [-1]

    def same(g, w):
        if getattr(g, "dtype", None) is not None and g.dtype.names:
            return bytes(memoryview(g)) == bytes(memoryview(w))
        return g == w

    return [i for i, (g, w) in enumerate(zip(got, want)) if not same(g, w)]
