"""The caller's side of a call: which array library the operands come from, new outputs of
that library, and the caller's current stream. Shared by every user-facing operation so that
each returns the caller's array type and runs where the caller's work runs.

Depends on CuPy (and PyTorch or JAX where the caller uses them), each loaded on first use.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Iterator

from kgen.arrays import ArrayInfo, array_kind, describe
from kgen.errors import DtypeError, InputError, LayoutError, ShapeError


@dataclass(frozen=True)
class CallerArray:
    """One operand as given: the object, its library (``torch``, ``jax``, ``cai``), what
    ``kgen.arrays.describe`` read of it, and its element type (a CuPy uint16 array given with
    ``dtype="bfloat16"`` is bfloat16)."""

    obj: Any
    kind: str
    info: ArrayInfo
    dtype: str

    @property
    def shape(self) -> tuple[int, ...]:
        return self.info.shape

    @property
    def ptr(self) -> int:
        return self.info.ptr


def contiguous(info: ArrayInfo) -> bool:
    """Whether the array is dense and row-major (dimensions of one element may have any stride;
    an empty array is dense whatever its strides)."""
    if 0 in info.shape:
        return True
    expected = 1
    for size, stride in zip(reversed(info.shape), reversed(info.strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def caller_array(x: Any, name: str, dtypes: tuple[str, ...], dtype: str | None = None) -> CallerArray:
    """``x`` read as an operand of one of ``dtypes``: a typed error for a host array, another
    dtype or a strided view (the remedy: a contiguous copy)."""
    kind = array_kind(x)
    info = describe(x, name)
    found = info.dtype
    if found == "uint16" and dtype == "bfloat16":
        found = "bfloat16"
    elif dtype is not None and dtype != found:
        raise DtypeError(f"{name} holds {found}, not the {dtype} that dtype= names",
                         remedy="leave dtype= out, or give it only to say a uint16 CuPy array holds bfloat16")
    if found not in dtypes:
        hint = " (a uint16 CuPy array holding bfloat16 bits: pass dtype='bfloat16')" if found == "uint16" else ""
        raise DtypeError(f"{name} holds {found}; this operation takes {', '.join(dtypes)}{hint}",
                         remedy=f"convert it first, e.g. kgen.cast({name}, 'float32')")
    if not contiguous(info):
        raise LayoutError(f"{name} is a strided view (shape {info.shape}, strides {info.strides} in elements); "
                          "this operation reads dense row-major arrays",
                          remedy=f"pass a contiguous copy ({name}.copy() in CuPy, {name}.contiguous() in PyTorch), "
                                 "or kgen.permute it first")
    return CallerArray(x, kind, info, found)


def check_no_overlap(out: CallerArray | None, inputs: list[CallerArray], op: str) -> None:
    """An InputError where ``out``'s memory overlaps an input's (dense arrays: the kernel would
    read what it has already overwritten)."""
    if out is None:
        return
    start, end = out.ptr, out.ptr + out.info.nbytes
    for x in inputs:
        if x.ptr < end and start < x.ptr + x.info.nbytes and x.info.nbytes and out.info.nbytes:
            raise InputError(f"{op}: out overlaps an input's memory", remedy="pass an out of its own, or leave it out")


def same_device(arrays: list[CallerArray]) -> int:
    """The one device all ``arrays`` are on (an InputError otherwise)."""
    devices = {a.info.device for a in arrays}
    if len(devices) != 1:
        raise InputError(f"the operands are on devices {sorted(devices)}",
                         remedy="move them to one GPU first")
    return devices.pop()


def new_array(like: CallerArray, shape, dtype: str, launcher=None):
    """An uninitialised array of the caller's library (JAX: a CuPy array, made a JAX array by
    ``returned``), on ``like``'s device; bfloat16 outside PyTorch as uint16 bits."""
    if like.kind == "torch":
        import torch

        return torch.empty(tuple(shape), dtype=getattr(torch, dtype), device=like.obj.device)
    storage = "uint16" if dtype == "bfloat16" else dtype
    if launcher is not None:
        return launcher.empty(tuple(shape), storage, like=like.obj)
    import cupy

    with cupy.cuda.Device(like.info.device):
        return cupy.empty(tuple(shape), dtype=storage)


def empty_output(launcher, torch_caller: bool, like, shape, dtype: str):
    """A GEMM's new output, uninitialised: a PyTorch tensor on ``like``'s device for a PyTorch
    caller, else the launcher's array (bfloat16 as uint16 bits)."""
    if torch_caller:
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
    return launcher.empty(shape, "uint16" if dtype == "bfloat16" else dtype, like=like)


def output_array(out: Any, like: CallerArray, shape, dtype: str) -> CallerArray | None:
    """``out`` checked to take a result of ``shape`` and ``dtype`` in a call on ``like``: of the
    same library, writable (not JAX), dense; None when no ``out`` is given."""
    if out is None:
        return None
    if like.kind == "jax":
        raise InputError("JAX arrays are immutable: out= cannot be written", remedy="leave out= out")
    info = describe(out, "out")
    found = "bfloat16" if dtype == "bfloat16" and info.dtype == "uint16" else info.dtype
    if found != dtype:
        raise DtypeError(f"out holds {found}; the result is {dtype}", remedy=f"pass an out of dtype {dtype}, or leave out= out")
    target = caller_array(out, "out", (dtype,), dtype)
    if target.kind != like.kind:
        raise InputError(f"the operands are {like.kind} arrays and out a {target.kind} one",
                         remedy="pass arrays of one library")
    if tuple(target.shape) != tuple(shape):
        raise ShapeError(f"out has shape {target.shape}; the result has shape {tuple(shape)}",
                         remedy=f"pass an out of shape {tuple(shape)}, or leave out= out")
    return target


def result_array(target: CallerArray | None, like: CallerArray, shape, dtype: str) -> CallerArray:
    """``target`` (a checked ``out``), or a new array of ``like``'s library for the result."""
    if target is not None:
        return target
    obj = new_array(like, shape, dtype)
    return CallerArray(obj, array_kind(obj), describe(obj, "out"), dtype)


def returned(kind: str, array, dtype: str):
    """``array`` as the caller's library holds it: a JAX array for a JAX caller (bfloat16 bits
    read as bfloat16), the array itself otherwise."""
    return to_jax(array, dtype) if kind == "jax" else array


def to_jax(array, dtype: str):
    import jax
    import jax.numpy as jnp

    out = jax.dlpack.from_dlpack(array)
    return jax.lax.bitcast_convert_type(out, jnp.bfloat16) if dtype == "bfloat16" else out


def torch_stream(device: int) -> int:
    """PyTorch's current stream on ``device``, as a cudaStream_t: through the raw getter
    where this PyTorch has it (no Stream object made per call), else the public API."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(device)
    return torch.cuda.current_stream(device).cuda_stream


_EXTERNAL: dict[tuple[int, int], Any] = {}


@contextlib.contextmanager
def on_caller_stream(kind: str, device: int) -> Iterator[None]:
    """CuPy's current device and stream made the caller's for the launches inside: PyTorch's
    current stream for a PyTorch caller, CuPy's own otherwise."""
    import cupy

    with cupy.cuda.Device(device):
        if kind != "torch" or "torch" not in sys.modules:
            yield
            return
        ptr = torch_stream(device)
        stream = _EXTERNAL.get((device, ptr))
        if stream is None:
            with warnings.catch_warnings():     # newer CuPy prefers Stream.from_external(obj): we hold a handle
                warnings.simplefilter("ignore", DeprecationWarning)
                stream = _EXTERNAL[(device, ptr)] = cupy.cuda.ExternalStream(ptr, device)
        with stream:
            yield


# ---- torch.compile -------------------------------------------------------------------------
_custom_ops_provider: Any = None     # () -> the module of kgen's PyTorch custom operators (set by kgen/__init__)


def set_custom_ops(provider) -> None:
    """Say where the PyTorch custom operators come from (``kgen.torch``, injected by the
    package so that this layer does not import the one above it)."""
    global _custom_ops_provider
    _custom_ops_provider = provider


def torch_graph_call(*arrays) -> bool:
    """Whether the call belongs in PyTorch's graph: ``torch.compile`` is tracing it, or autograd
    records it (a tensor that requires grad, grad mode on). The operation then hands it to its
    custom operator (``custom_op``), which has a backward and which a compiled graph calls."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    for x in arrays:           # (a loop, not any(): this runs on every call of every operation)
        if getattr(x, "requires_grad", False):
            return torch.is_grad_enabled() or torch.compiler.is_compiling()
    return torch.compiler.is_compiling()


def custom_op(name: str):
    """The traceable form of kgen's operation ``name`` (``kgen.torch``)."""
    if _custom_ops_provider is None:
        raise InputError("kgen's PyTorch operators are not registered", remedy="import kgen.torch")
    return getattr(_custom_ops_provider(), name)
