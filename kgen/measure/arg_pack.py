"""Kernel arguments laid out once for cuLaunchKernel, launches that reuse them, the
scaling of an output that a split-K kernel then adds into, and the cheap reads of a CuPy
operand that a repeated call needs.

Depends on NumPy and CuPy only, both loaded on first use (importing this file loads
neither): ``kgen export`` copies it into exported packages.
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    import numpy as np


class ArgPack:
    """Kernel arguments laid out once in host memory, as cuLaunchKernel's ``kernelParams``
    reads them: an array of pointers, one to each value. ``write`` replaces the values that
    are not the very objects written last; a slot keeps its type (a Python int or float
    given for it is converted)."""

    def __init__(self, template: Sequence[np.generic]):
        import numpy as np

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


def scale_output(array: Any, factor: float) -> None:
    """``array *= factor`` on CuPy's current stream; factor 0 clears it (NaN included) with a
    memset where the array is contiguous."""
    import cupy

    view = cupy.asarray(array)
    if factor == 0 and view.flags.c_contiguous:
        cupy.cuda.runtime.memsetAsync(view.data.ptr, 0, view.nbytes, cupy.cuda.get_current_stream().ptr)
    elif factor == 0:
        view.fill(0)
    elif factor != 1:
        view *= factor


def cupy_ndarray() -> type | None:
    """cupy.ndarray once the caller has imported CuPy (its arrays take the fast path)."""
    return getattr(sys.modules.get("cupy"), "ndarray", None)


def data_pointer(x) -> int:
    """A device array's data pointer: CuPy's own attribute, else the array interface's."""
    ptr = getattr(getattr(x, "data", None), "ptr", None)
    return ptr if isinstance(ptr, int) else x.__cuda_array_interface__["data"][0]
