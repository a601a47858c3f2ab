"""Loading cubins and launching them through CuPy (the real launcher; tests use a fake)."""

from __future__ import annotations

import os
import tempfile
import threading
from typing import Any, Sequence

import numpy as np


_scratch: tempfile.TemporaryDirectory | None = None


def _scratch_dir() -> str:
    global _scratch
    if _scratch is None:
        _scratch = tempfile.TemporaryDirectory(prefix="kgen-cubins-")
    return _scratch.name


class _StreamRef:
    """All CuPy's launch reads of a stream: its handle."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr


class ArgPack:
    """Kernel arguments laid out once in host memory, as cuLaunchKernel's ``kernelParams``
    reads them: an array of pointers, one to each value. ``write`` replaces the values that
    are not the very objects written last; a slot keeps its type (a Python int or float
    given for it is converted)."""

    def __init__(self, template: Sequence[np.generic]):
        if not all(isinstance(value, np.generic) for value in template):
            raise TypeError("an argument template holds NumPy scalars, not "
                            + ", ".join(sorted({type(v).__name__ for v in template if not isinstance(v, np.generic)})))
        offsets, end = [], 0
        for value in template:
            align = min(value.nbytes, 16)                    # each value at its natural alignment
            end = -(-end // align) * align
            offsets.append(end)
            end += value.nbytes
        self._bytes = np.zeros(max(end, 1), np.uint8)
        self._slots = [self._bytes[o:o + v.nbytes].view(v.dtype) for o, v in zip(offsets, template)]
        self._last: list[Any] = [None] * len(template)
        self._pointers = np.array([self._bytes.ctypes.data + o for o in offsets], np.uintp)
        self.params = self._pointers.ctypes.data          # void** for cuLaunchKernel
        self.write(template)

    def write(self, values: Sequence[Any]) -> None:
        last, slots = self._last, self._slots
        for i, value in enumerate(values):
            if value is not last[i]:
                slots[i][0] = value
                last[i] = value

    def values(self) -> list:
        """What the arguments hold now (one NumPy scalar each)."""
        return [slot[0] for slot in self._slots]


def _three(dims: Sequence[int] | int) -> tuple[int, int, int]:
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    return (*dims, 1, 1, 1)[:3]


class BoundLaunch:
    """A kernel with its grid, block, shared memory and argument types fixed. A call writes
    the argument values into its ArgPack and calls cuLaunchKernel on ``stream`` (a
    cudaStream_t as an int), else on CuPy's current stream: no per-argument conversion."""

    def __init__(self, function, grid, block, shared_mem: int, template: Sequence[np.generic]):
        import cupy

        self._launch = cupy.cuda.driver.launchKernel
        self._current_stream = cupy.cuda.get_current_stream
        self._function = function.ptr
        self._shape = (*_three(grid), *_three(block), int(shared_mem))
        self._pack = ArgPack(template)
        self._lock = threading.Lock()          # one writer of the pack at a time

    def __call__(self, values: Sequence[Any], stream: int | None = None) -> None:
        if stream is None:
            stream = self._current_stream().ptr
        with self._lock:
            self._pack.write(values)
            self._launch(self._function, *self._shape, stream, self._pack.params, 0)


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
        self._smem_limit = 48 * 1024

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
        import cupy

        view = cupy.asarray(array)
        if factor == 0 and view.flags.c_contiguous:   # beta = 0 ignores whatever C held, NaN included
            cupy.cuda.runtime.memsetAsync(view.data.ptr, 0, view.nbytes, cupy.cuda.get_current_stream().ptr)
        elif factor == 0:
            view.fill(0)
        elif factor != 1:
            view *= factor

    @property
    def resources(self) -> dict:
        f = self.function
        return {"registers": int(f.num_regs), "local_bytes": int(f.local_size_bytes)}


class CupyLauncher:
    """Loads binaries into CupyKernels and allocates outputs."""

    def load(self, binary) -> CupyKernel:
        return CupyKernel(binary.cubin, binary.entry, binary.path)

    @staticmethod
    def empty(shape, dtype, like=None):
        import cupy

        return cupy.empty(shape, dtype=dtype)
