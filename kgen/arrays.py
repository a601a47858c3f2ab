"""One view of any GPU array: CuPy, PyTorch (bfloat16 too), JAX, or anything with __cuda_array_interface__.

``describe(x)`` gives pointer, shape, strides in elements, dtype name and device, with no
copy and no synchronisation. Host arrays and unsupported types raise InputError subclasses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kgen.errors import DeviceError, DtypeError, InputError

KNOWN_DTYPES = ("float16", "bfloat16", "float32", "float64", "uint16", "int8", "int16", "int32", "int64",
                "uint8", "uint32", "uint64")


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

    @property
    def nbytes(self) -> int:
        """The bytes of the elements (a dense array's extent in memory)."""
        return self.size * self.itemsize


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


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def _describe_torch(obj: Any, name: str) -> ArrayInfo:
    """PyTorch tensors directly: their __cuda_array_interface__ refuses bfloat16."""
    if not obj.is_cuda:
        raise DeviceError(f"{name} is a PyTorch tensor on {obj.device}; kgen kernels run on the GPU",
                          remedy=f"pass {name}.cuda()")
    dtype = str(obj.dtype).removeprefix("torch.")
    if dtype not in KNOWN_DTYPES:
        raise DtypeError(f"{name} has dtype torch.{dtype}, which kgen does not know")
    return ArrayInfo(int(obj.data_ptr()), tuple(obj.shape), tuple(obj.stride()), dtype,
                     int(obj.device.index or 0), int(obj.element_size()))


def _describe_jax(obj: Any, name: str) -> ArrayInfo:
    """JAX arrays: always dense row-major; the buffer must be ready before a kernel reads it."""
    devices = list(obj.devices())
    if len(devices) != 1 or devices[0].platform != "gpu":
        raise DeviceError(f"{name} is a JAX array on {devices}; kgen needs one on a single GPU",
                          remedy=f"jax.device_put({name}, jax.devices('gpu')[0])")
    dtype = str(obj.dtype)
    if dtype not in KNOWN_DTYPES:
        raise DtypeError(f"{name} has dtype {dtype}, which kgen does not know")
    obj.block_until_ready()
    shape = tuple(int(s) for s in obj.shape)
    return ArrayInfo(int(obj.unsafe_buffer_pointer()), shape, _contiguous_strides(shape), dtype,
                     int(devices[0].id), int(obj.dtype.itemsize))


def array_kind(obj: Any) -> str:
    """'torch', 'jax' or 'cai' (CuPy and anything with __cuda_array_interface__)."""
    module = type(obj).__module__
    if module.startswith("torch") and hasattr(obj, "data_ptr"):
        return "torch"
    if module.startswith(("jax", "jaxlib")) and hasattr(obj, "unsafe_buffer_pointer"):
        return "jax"
    return "cai"


def one_library(**arrays: Any) -> str:
    """The array library (``array_kind``) all the given arrays (None: left out) come from; an
    InputError naming them when they mix libraries (the result's type would be a guess)."""
    kinds = {name: array_kind(x) for name, x in arrays.items() if x is not None}
    if len(set(kinds.values())) > 1:
        from kgen.errors import InputError

        raise InputError("the operands mix array libraries: " + ", ".join(f"{n} is {k}" for n, k in kinds.items()),
                         remedy="pass arrays of one library (torch.as_tensor / cupy.asarray / jax.dlpack convert "
                                "without a copy)")
    return next(iter(kinds.values()), "cai")


def describe(obj: Any, name: str = "array") -> ArrayInfo:
    """ArrayInfo of a device array, or an InputError that says what to pass instead."""
    kind = array_kind(obj)
    if kind == "torch":
        return _describe_torch(obj, name)
    if kind == "jax":
        return _describe_jax(obj, name)
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
        strides = _contiguous_strides(shape)
    else:
        byte_strides = tuple(int(s) for s in cai["strides"])
        if any(s % dtype.itemsize for s in byte_strides):
            raise InputError(f"{name} has strides {byte_strides} bytes, not whole elements",
                             remedy="pass x.copy()")
        strides = tuple(s // dtype.itemsize for s in byte_strides)
    return ArrayInfo(ptr, shape, strides, dtype.name, _device_of(obj, ptr), dtype.itemsize)


def device_pointer(value: Any, name: str = "array") -> int:
    """An operand's device address: a pointer as dispatch passes it (an integer), or an array's."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    return describe(value, name).ptr
