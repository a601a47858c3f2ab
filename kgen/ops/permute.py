"""``kgen.permute`` and ``kgen.transpose``: the permute family on the caller's arrays.

The result is a new contiguous array of the caller's library (CuPy, PyTorch, JAX) with the
permuted shape, or ``out``, computed on the caller's current stream without synchronising.

>>> # kgen.permute(x, (0, 2, 3, 1))        # NCHW -> NHWC
>>> # kgen.transpose(a)                    # a 2-D transpose, a.T made contiguous
>>> # kgen.permute(x, (1, 0, 2), out=y)    # into y (not for JAX)
"""

from __future__ import annotations

import math

from kgen.errors import DtypeError, InputError, ShapeError
from kgen.kernels.memory.elements import DTYPES
from kgen.kernels.memory.permutation import check_axes
from kgen.kernels.memory.permute import permute_problem
from kgen.ops.caller import CallerArray, caller_array, new_array, returned, same_device
from kgen.ops.launch import launch_family, pointer


def permute(x, axes, *, out=None, dtype: str | None = None):
    """``x`` with its axes permuted: output axis ``i`` is ``x``'s axis ``axes[i]`` (NumPy's
    ``transpose(x, axes)``, PyTorch's ``x.permute(*axes)``), as a contiguous array, into ``out``
    when given. ``dtype="bfloat16"`` says a CuPy uint16 array holds bfloat16. Axes that are
    not a permutation of ``x``'s dimensions are a ShapeError; a strided ``x`` a LayoutError."""
    a = caller_array(x, "x", DTYPES, dtype)
    axes = check_axes(axes, len(a.shape))
    shape = tuple(a.shape[i] for i in axes)
    target = None
    if out is not None:
        if a.kind == "jax":
            raise InputError("JAX arrays are immutable: out= cannot be written", remedy="leave out= out")
        target = caller_array(out, "out", DTYPES, "bfloat16" if a.dtype == "bfloat16" else None)
        if target.shape != shape:
            raise ShapeError(f"out has shape {target.shape}; x of shape {a.shape} permuted by {axes} has {shape}",
                             remedy=f"pass an out of shape {shape}, or leave out= out")
        if target.dtype != a.dtype:
            raise DtypeError(f"out holds {target.dtype}, x {a.dtype}", remedy="pass an out of x's dtype")
        same_device([a, target])
        if _overlap(a, target):
            raise InputError("out overlaps x: a permutation cannot be written over its input",
                             remedy="pass an out that shares no memory with x, or leave out= out")
    result = target.obj if target is not None else new_array(a, shape, a.dtype)
    if math.prod(shape) == 0:
        return returned(a.kind, result, a.dtype)
    if target is None:
        target = caller_array(result, "out", DTYPES, "bfloat16" if a.dtype == "bfloat16" else None)
    problem = permute_problem(a.shape, axes, a.dtype)
    launch_family("permute", problem, a.info.device, a.kind, {"x": pointer(a), "out": pointer(target)})
    return returned(a.kind, result, a.dtype)


def _overlap(a: CallerArray, b: CallerArray) -> bool:
    """Whether the bytes of two dense arrays meet."""
    size_a, size_b = math.prod(a.shape) * a.info.itemsize, math.prod(b.shape) * b.info.itemsize
    return size_a > 0 and size_b > 0 and a.ptr < b.ptr + size_b and b.ptr < a.ptr + size_a


def transpose(x, *, out=None, dtype: str | None = None):
    """The 2-D ``x`` transposed, as a contiguous array (``permute(x, (1, 0))``)."""
    a = caller_array(x, "x", DTYPES, dtype)
    if len(a.shape) != 2:
        raise ShapeError(f"transpose takes a 2-D array; x has shape {a.shape}",
                         remedy="use kgen.permute(x, axes) for other ranks")
    return permute(x, (1, 0), out=out, dtype=dtype)
