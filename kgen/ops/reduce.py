"""``kgen.reduce``: the reduce family on the caller's arrays.

sum, mean, max, min or argmax over the last axis (or the last few, or all of them), read in
float32 whatever the input, the result in the input's dtype (argmax: int64, the first index of
the largest value, a NaN counting as the largest). It comes back as an array of the caller's
library (CuPy, PyTorch, JAX), computed on the caller's current stream without synchronising.

>>> # kgen.reduce(x)                                   # each row's sum
>>> # kgen.reduce(x, "argmax")                         # each row's argmax, int64
>>> # kgen.reduce(x, "sum", axis=None, deterministic=True)   # the same bits every run
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from kgen.errors import InputError, ShapeError
from kgen.kernels.memory.elements import DTYPES
from kgen.kernels.memory.reduce import OPS, WORKSPACE_BYTES, output_dtype_of, reduce_problem
from kgen.ops.caller import caller_array, on_caller_stream, output_array, result_array, returned, same_device
from kgen.ops.launch import launch_family, pointer

# one workspace per (device, stream), zeroed when made: launches on one stream run one after
# another, and each leaves its counters and accumulators zeroed for the next
_WORKSPACES: dict[tuple[int, int], Any] = {}


def reduce_layout(shape: tuple[int, ...], axis) -> tuple[int, int, tuple[int, ...]]:
    """(rows, cols, result shape) of reducing ``axis`` (an int, a tuple of ints, or None for
    all) of a row-major array of ``shape``, as a reduction of each row of a rows x cols array:
    the reduced axes must be the last ones, but for axes of one element after them. A
    ShapeError with the remedy otherwise.

    >>> reduce_layout((4, 5, 6), -1), reduce_layout((4, 5, 6), (1, 2)), reduce_layout((4, 5, 6), None)
    ((20, 6, (4, 5)), (4, 30, (4,)), (1, 120, ()))
    >>> reduce_layout((4, 5, 1), 1)
    (4, 5, (4, 1))
    """
    ndim = len(shape)
    if axis is None:
        return 1, math.prod(shape), ()
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    picked = set()
    for a in axes:
        if isinstance(a, bool) or not isinstance(a, numbers.Integral):
            raise InputError(f"axis {axis!r}: an axis is an int", remedy="pass an int, a tuple of ints, or None")
        if ndim == 0 and int(a) in (0, -1):
            continue                        # a 0-d array: its one element
        if not -ndim <= int(a) < ndim:
            raise ShapeError(f"axis {a} is out of range for an array of {ndim} dimensions (shape {shape})",
                             remedy=f"pass an axis in [-{ndim}, {ndim - 1}], or None for all")
        picked.add(int(a) % ndim)
    if ndim == 0:
        return 1, 1, ()
    if not picked:
        raise InputError(f"axis {axis!r} names no axis", remedy="pass the axes to reduce, or None for all")
    kept = [p for p in range(ndim) if p not in picked]
    if any(shape[p] != 1 for p in kept if p > min(picked)):
        raise ShapeError(f"reducing axis {axis} of an array of shape {shape} reads it across the rows; "
                         "kgen.reduce reduces the last axes of a row-major array",
                         remedy="move the axes last first (x.transpose(...).copy() in CuPy, "
                                "x.movedim(axis, -1).contiguous() in PyTorch), or pass axis=None to reduce all")
    return (math.prod(shape[p] for p in kept), math.prod(shape[p] for p in sorted(picked)),
            tuple(shape[p] for p in kept))


def _fill(result, kind: str, device: int, dtype: str, value: float) -> None:
    """``result`` (the caller's library, or CuPy for JAX) set to ``value`` on the caller's stream."""
    if kind == "torch":
        result.fill_(value)
        return
    with on_caller_stream(kind, device):
        if dtype == "bfloat16":             # bits: 0 is 0.0, 0x7FC0 a NaN
            result.fill(0x7FC0 if math.isnan(value) else 0)
        else:
            result.fill(value)


def _workspace() -> np.uint64:
    """The workspace of the current device and stream (inside ``on_caller_stream``)."""
    import cupy

    key = (cupy.cuda.Device().id, cupy.cuda.get_current_stream().ptr)
    ws = _WORKSPACES.get(key)
    if ws is None:
        ws = _WORKSPACES.setdefault(key, cupy.zeros(WORKSPACE_BYTES, dtype=cupy.uint8))
    return np.uint64(ws.data.ptr)


def reduce(x, op: str = "sum", axis=-1, *, deterministic: bool = False, out=None, dtype: str | None = None):
    """``op`` (sum, mean, max, min, argmax) of ``x`` over ``axis``: -1 (each row), the last few
    axes as a tuple, or None (every element), accumulated in float32; the result in ``x``'s
    dtype (argmax: int64), written to ``out`` when given. ``deterministic=True`` gives a sum
    or mean the same bits on every run of the kernel chosen for it (no float atomics).
    ``dtype="bfloat16"`` says a CuPy uint16 array holds bfloat16.

    Empty reductions: a sum is 0 and a mean NaN; max, min and argmax raise a ShapeError."""
    if op not in OPS:
        raise InputError(f"reduce op {op!r} is not one kgen has", remedy=f"use one of {', '.join(OPS)}")
    a = caller_array(x, "x", DTYPES, dtype)
    rows, cols, shape = reduce_layout(a.shape, axis)
    out_dtype = output_dtype_of(op, a.dtype)
    if cols == 0 and op not in ("sum", "mean"):
        raise ShapeError(f"{op} of an empty array (shape {a.shape}, axis {axis}) has no value",
                         remedy="check the array is not empty first, or use sum or mean")
    given = output_array(out, a, shape, out_dtype)
    device = same_device([a, *([given] if given else [])])
    target = result_array(given, a, shape, out_dtype)
    if rows == 0:
        return returned(a.kind, target.obj, out_dtype)
    if cols == 0:
        _fill(target.obj, a.kind, device, out_dtype, 0.0 if op == "sum" else math.nan)
        return returned(a.kind, target.obj, out_dtype)
    problem = reduce_problem(op, rows, cols, a.dtype, deterministic)
    with on_caller_stream(a.kind, device):
        operands = {"x": pointer(a), "out": pointer(target), "workspace": _workspace()}
        launch_family("reduce", problem, device, a.kind, operands)
    return returned(a.kind, target.obj, out_dtype)
