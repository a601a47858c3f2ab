"""``kgen.permute`` and ``kgen.transpose``: the permute family on the caller's arrays.

The result is a new contiguous array of the caller's library (CuPy, PyTorch, JAX) with the
permuted shape, or ``out``, computed on the caller's current stream without synchronising.

>>> # kgen.permute(x, (0, 2, 3, 1))        # NCHW -> NHWC
>>> # kgen.transpose(a)                    # a 2-D transpose, a.T made contiguous
>>> # kgen.permute(x, (1, 0, 2), out=y)    # into y (not for JAX)
"""

from __future__ import annotations

import math

from kgen.errors import InputError, ShapeError
from kgen.kernels.memory.elements import DTYPES
from kgen.kernels.memory.permutation import check_axes
from kgen.kernels.memory.permute import permute_problem
from kgen.ops.caller import CallerArray, caller_array, output_array, result_array, returned, same_device
from kgen.ops.launch import launch_family, pointer


def permute(x, axes, *, out=None, dtype: str | None = None):
    """``x`` with its axes permuted: output axis ``i`` is ``x``'s axis ``axes[i]`` (NumPy's
    ``transpose(x, axes)``, PyTorch's ``x.permute(*axes)``), as a contiguous array, into ``out``
    when given. ``dtype="bfloat16"`` says a CuPy uint16 array holds bfloat16. Axes that are
    not a permutation of ``x``'s dimensions are a ShapeError; a strided ``x`` a LayoutError."""
    a = caller_array(x, "x", DTYPES, dtype)
    axes = check_axes(axes, len(a.shape))
    shape = tuple(a.shape[i] for i in axes)
    given = output_array(out, a, shape, a.dtype)
    device = same_device([a, *([given] if given else [])])
    target = result_array(given, a, shape, a.dtype)
    if _overlap(a, target):
        raise InputError("out overlaps x: a permutation cannot be written over its input",
                         remedy="pass an out that shares no memory with x, or leave out= out")
    if math.prod(shape) == 0:
        return returned(a.kind, target.obj, a.dtype)
    problem = permute_problem(a.shape, axes, a.dtype)
    launch_family("permute", problem, device, a.kind, {"x": pointer(a), "out": pointer(target)})
    return returned(a.kind, target.obj, a.dtype)


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
