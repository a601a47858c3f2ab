"""One view of any GPU array: CuPy, PyTorch, Numba, or anything with __cuda_array_interface__.

``describe(x)`` gives pointer, shape, strides in elements, dtype name and device, with no
copy and no synchronisation. Host arrays and unsupported types raise InputError subclasses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kgen.errors import DeviceError, DtypeError, InputError


@dataclass(frozen=True)
class ArrayInfo:
    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]   # in elements
    dtype: str
    device: int
    itemsize: int

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


def _device_of(obj: Any, ptr: int) -> int:
    dev = getattr(obj, "device", None)
    if dev is not None:
        if hasattr(dev, "id"):          # cupy.cuda.Device
            return int(dev.id)
        if getattr(dev, "type", None) == "cuda":   # torch.device
            return int(dev.index or 0)
    if ptr == 0:
        return 0
    from cupy.cuda import runtime

    attrs = runtime.pointerGetAttributes(ptr)
    return int(attrs.device)


def describe(obj: Any, name: str = "array") -> ArrayInfo:
    """ArrayInfo of a device array, or an InputError that says what to pass instead."""
    if isinstance(obj, np.ndarray):
        raise DeviceError(f"{name} is a NumPy array in host memory; kgen kernels run on the GPU",
                          remedy="pass cupy.asarray(x) (or a CUDA torch tensor)")
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None:
        if hasattr(obj, "__array__") or isinstance(obj, (list, tuple)):
            raise DeviceError(f"{name} ({type(obj).__name__}) is not a GPU array",
                              remedy="pass a CuPy array or a CUDA torch tensor")
        raise InputError(f"{name} ({type(obj).__name__}) is not an array kgen can read",
                         remedy="pass a CuPy array, a CUDA torch tensor, or an object with "
                                "__cuda_array_interface__")
    try:
        dtype = np.dtype(cai["typestr"])
    except TypeError:
        raise DtypeError(f"{name} has element type {cai['typestr']!r}, which kgen does not know") from None
    shape = tuple(int(s) for s in cai["shape"])
    ptr = int(cai["data"][0])
    if cai.get("strides") is None:
        strides, acc = [], 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        strides = tuple(reversed(strides))
    else:
        byte_strides = tuple(int(s) for s in cai["strides"])
        if any(s % dtype.itemsize for s in byte_strides):
            raise InputError(f"{name} has strides {byte_strides} bytes, not whole elements",
                             remedy="pass x.copy()")
        strides = tuple(s // dtype.itemsize for s in byte_strides)
    return ArrayInfo(ptr, shape, strides, dtype.name, _device_of(obj, ptr), dtype.itemsize)
