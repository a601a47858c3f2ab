"""Loading cubins and launching them through CuPy (the real launcher; tests use a fake)."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Sequence

import numpy as np

from kgen.measure.arg_pack import BoundLaunch, scale_output


_scratch: tempfile.TemporaryDirectory | None = None
DEFAULT_SHARED_BYTES = 48 * 1024     # a block's shared memory without the opt-in attribute


def _scratch_dir() -> str:
    global _scratch
    if _scratch is None:
        _scratch = tempfile.TemporaryDirectory(prefix="kgen-cubins-")
    return _scratch.name


def dynamic_shared_default(function: Any) -> int:
    """The dynamic shared memory a launch of ``function`` may ask for before opting in: 48 KiB
    less its static shared memory (a block's two together may not pass 48 KiB)."""
    return DEFAULT_SHARED_BYTES - int(function.shared_size_bytes)


class _StreamRef:
    """All CuPy's launch reads of a stream: its handle."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr


class CupyKernel:
    """One loaded kernel: ``launch`` on the current CuPy stream, ``scale`` an array in place."""

    def __init__(self, cubin: bytes | None, entry: str, path: str = ""):
        import cupy

        if not path:   # CuPy loads modules from files, lazily: keep the file for the process's life
            fd, path = tempfile.mkstemp(suffix=".cubin", dir=_scratch_dir())
            with os.fdopen(fd, "wb") as f:
                f.write(cubin)
        self._module = cupy.RawModule(path=path)
        self.entry = entry
        self.function = self._module.get_function(entry)
        self._smem_limit = dynamic_shared_default(self.function)

    def _allow_shared(self, shared_mem: int) -> None:
        if shared_mem > self._smem_limit:
            self.function.max_dynamic_shared_size_bytes = shared_mem
            self._smem_limit = shared_mem

    def bind(self, grid: Sequence[int], block: Sequence[int], shared_mem: int,
             template: Sequence[np.generic]) -> BoundLaunch:
        """A launch of this kernel with arguments of ``template``'s types (see BoundLaunch)."""
        self._allow_shared(shared_mem)
        return BoundLaunch(self.function.kernel, grid, block, shared_mem, template)   # the CUfunction

    def launch(self, grid: Sequence[int], block: Sequence[int], args: Sequence[Any], shared_mem: int = 0,
               stream: int | None = None) -> None:
        """Launch on ``stream`` (a cudaStream_t as an int), else on CuPy's current stream."""
        self._allow_shared(shared_mem)
        if stream is None:
            self.function(grid, block, args, shared_mem=shared_mem)
        else:
            self.function(grid, block, args, shared_mem=shared_mem, stream=_StreamRef(stream))

    @staticmethod
    def scale(array: Any, factor: float) -> None:
        scale_output(array, factor)

    @property
    def resources(self) -> dict:
        f = self.function
        return {"registers": int(f.num_regs), "local_bytes": int(f.local_size_bytes)}


class CupyLauncher:
    """Loads binaries into CupyKernels, allocates outputs and times a first call's candidates."""

    def __init__(self):
        self._flushers: dict[int, Any] = {}

    def load(self, binary) -> CupyKernel:
        return CupyKernel(binary.cubin, binary.entry, binary.path)

    def time_calls(self, calls: Sequence[Any], runs: int) -> list[float] | None:
        """Milliseconds of each of ``calls`` on CuPy's current device and stream: the median of
        ``runs`` runs, each after an L2 flush with the GPU held until it is queued
        (``kgen.measure.bench.time_runs``), in two rounds of opposite order, the mean of its
        two medians. None where the stream is being captured into a CUDA graph (nothing may
        wait on it then)."""
        import statistics

        import cupy

        from kgen.measure.bench import l2_flusher, time_runs
        from kgen.measurement import Timing

        stream = cupy.cuda.get_current_stream()
        if stream.is_capturing():
            return None
        device = cupy.cuda.Device().id
        flush = self._flushers.get(device)
        if flush is None:
            l2 = int(cupy.cuda.runtime.getDeviceProperties(device)["l2CacheSize"])
            flush = self._flushers[device] = l2_flusher(l2)
        timing = Timing(warmup=1, runs=runs)
        medians: list[list[float]] = [[] for _ in calls]
        order = list(range(len(calls)))
        for _ in range(2):
            for i in order:
                medians[i].append(statistics.median(time_runs(calls[i], timing, flush, hold=True)))
            order.reverse()
        return [sum(m) / len(m) for m in medians]

    @staticmethod
    def empty(shape, dtype, like=None):
        import cupy

        return cupy.empty(shape, dtype=dtype)
