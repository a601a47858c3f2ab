"""``kgen.softmax`` and ``kgen.rmsnorm``: the row-wise normalisations over the last axis of the
caller's arrays (CuPy, PyTorch, JAX). The leading axes are flattened into rows (no copy: the
arrays are dense row-major); the result is an array of the caller's library, computed on the
caller's current stream without synchronising, into ``out`` where it is given (``out=x``
works in place, except for JAX arrays, which are immutable).

>>> # kgen.softmax(logits)                        # over the last axis, a new array
>>> # kgen.softmax(logits, out=logits)            # in place
>>> # kgen.rmsnorm(h, weight, eps=1e-5)           # h * rsqrt(mean(h^2) + eps) * weight
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from kgen.errors import DtypeError, InputError, LayoutError, ShapeError
from kgen.kernels.memory.elements import DTYPES
from kgen.kernels.memory.rownorm import rownorm_problem
from kgen.kernels.memory.family import rows_cols
from kgen.ops.caller import (CallerArray, caller_array, custom_op, output_array, result_array, returned, same_device,
                             torch_graph_call)
from kgen.ops.launch import launch_family, pointer


def _check_axis(axis: Any, ndim: int, op: str) -> None:
    """The axis must be the last one (None: the whole array, as one row)."""
    if axis is None:
        return
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise InputError(f"{op}: axis={axis!r} is not an integer", remedy="pass axis=-1 (the last axis)")
    last = max(ndim, 1) - 1
    if not -max(ndim, 1) <= axis <= last:
        raise InputError(f"{op}: axis={axis} is out of range for a {ndim}-d array", remedy="pass axis=-1")
    if axis % max(ndim, 1) != last:
        raise LayoutError(f"{op} runs over the last axis of a dense row-major array; axis={axis} of a {ndim}-d "
                          "array is not it",
                          remedy="move that axis last first (a contiguous x.swapaxes(axis, -1), or kgen.permute), "
                                 "and move it back after")


def _run(family: str, a: CallerArray, out: Any, operands: dict[str, Any], arrays: list, whole: bool = False):
    """Launch ``family`` over ``a``'s rows (all of it as one row when ``whole``) into ``out``
    (a new array when None); the result as the caller's library holds it."""
    given = output_array(out, a, a.shape, a.dtype)
    device = same_device([*arrays, *([given] if given else [])])      # checked before anything is made
    target = result_array(given, a, a.shape, a.dtype)
    rows, cols = (1, math.prod(a.shape)) if whole else rows_cols(a.shape)
    if rows * cols == 0:
        return returned(a.kind, target.obj, a.dtype)
    problem = rownorm_problem(family, rows, cols, a.dtype)
    launch_family(family, problem, device, a.kind, {**operands, "x": pointer(a), "out": pointer(target)})
    return returned(a.kind, target.obj, a.dtype)


def softmax(x, axis: int | None = -1, *, out=None, dtype: str | None = None):
    """``exp(x - max) / sum(exp(x - max))`` over the last axis (``axis=None``: over every
    element), in float, stable for any values: a row holding NaN or +Inf, or only -Inf,
    gives NaN. ``dtype="bfloat16"`` says CuPy uint16 arrays hold bfloat16. Inside
    ``torch.compile``, or where autograd records it, the call is the custom operator
    ``torch.ops.kgen.softmax`` (``kgen.torch``)."""
    if torch_graph_call(x):
        return custom_op("softmax")(x, axis, out=out, dtype=dtype)
    a = caller_array(x, "x", DTYPES, dtype)
    _check_axis(axis, len(a.shape), "softmax")
    return _run("softmax", a, out, {}, [a], whole=axis is None)


def rmsnorm(x, weight, eps: float = 1e-6, *, out=None, dtype: str | None = None):
    """``x * rsqrt(mean(x^2) + eps) * weight`` over the last axis, in float; ``weight`` holds
    one value per element of a row, in x's dtype. ``dtype="bfloat16"`` says CuPy uint16
    arrays hold bfloat16. Inside ``torch.compile``, or where autograd records it, the call is
    the custom operator ``torch.ops.kgen.rmsnorm`` (``kgen.torch``)."""
    if torch_graph_call(x, weight):
        return custom_op("rmsnorm")(x, weight, eps, out=out, dtype=dtype)
    a = caller_array(x, "x", DTYPES, dtype)
    w = caller_array(weight, "weight", DTYPES, dtype)
    cols = a.shape[-1] if a.shape else 1
    if math.prod(w.shape) != cols or (w.shape and w.shape[-1] != cols):
        raise ShapeError(f"rmsnorm: weight has shape {w.shape}; x's rows hold {cols} elements",
                         remedy=f"pass a weight of shape ({cols},)")
    if w.dtype != a.dtype:
        raise DtypeError(f"rmsnorm: weight holds {w.dtype}, x {a.dtype}", remedy="cast the weight to x's dtype")
    if w.kind != a.kind:
        raise InputError(f"rmsnorm: x is a {a.kind} array and weight a {w.kind} one",
                         remedy="pass arrays of one library")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps) or eps < 0:
        raise InputError(f"rmsnorm: eps={eps!r} is not a finite number >= 0", remedy="pass e.g. eps=1e-6")
    return _run("rmsnorm", a, out, {"weight": pointer(w), "eps": float(eps)}, [a, w])
