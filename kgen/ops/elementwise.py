"""``kgen.elementwise`` and ``kgen.cast``: the elementwise family on the caller's arrays.

An operand is a scalar (a Python or NumPy number), an array of the output's shape, a row
vector (one value per column: shape ``(cols,)`` or ``(1, cols)``) or a column vector (shape
``(..., 1)`` with one value per row). The result is an array of the caller's library
(CuPy, PyTorch, JAX), computed on the caller's current stream without synchronising.

>>> # kgen.elementwise("a * x + y", x=x, y=y, a=2.0)            # a new array
>>> # kgen.elementwise("x * rsqrt(v + 1e-5)", x=x, v=v, out=x)  # in place (not for JAX)
>>> # kgen.cast(x, "bfloat16", scale=0.5)
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from kgen.errors import DtypeError, InputError, ShapeError
from kgen.kernels.memory.elements import DTYPES, element
from kgen.kernels.memory.cast import cast_problem
from kgen.kernels.memory.elementwise import elementwise_problem
from kgen.kernels.memory.expr import parse
from kgen.kernels.memory.family import rows_cols
from kgen.arrays import describe
from kgen.ops.caller import (CallerArray, caller_array, output_array, result_array, returned,
                              same_device)
from kgen.ops.launch import launch_family, pointer


def _is_scalar(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _output_shape(arrays: dict[str, CallerArray]) -> tuple[int, ...]:
    """The shape of the largest array operand (the others are it, or broadcast over it)."""
    shapes = sorted({a.shape for a in arrays.values()}, key=lambda s: (-math.prod(s), -len(s)))
    return shapes[0]


def _kind(a: CallerArray, name: str, shape: tuple[int, ...]) -> str:
    rows, cols = rows_cols(shape)
    if a.shape == shape or (math.prod(a.shape) == rows * cols and a.shape[-1:] == shape[-1:]):
        return "full"
    if len(a.shape) <= len(shape) and math.prod(a.shape) == cols and a.shape[-1:] == (cols,):
        return "row"
    if a.shape[-1:] == (1,) and math.prod(a.shape) == rows and a.shape[:-1] == shape[-len(a.shape):-1]:
        return "col"
    raise ShapeError(f"{name} has shape {a.shape}; with an output of shape {shape} an array operand is of that "
                     "shape, a row vector (one value per column) or a column vector (shape (..., 1))",
                     remedy="reshape it, or broadcast it with the array library first")


def elementwise(expr: str, *, out=None, dtype: str | None = None, out_dtype: str | None = None, **operands):
    """``expr`` evaluated element by element over ``operands`` (arrays and scalars by name),
    in float, into ``out`` (in place if it is one of the operands) or a new array of
    ``out_dtype`` (default: the arrays' dtype). ``dtype="bfloat16"`` says CuPy uint16 arrays
    hold bfloat16. Bad expressions are an ExpressionError naming the token."""
    e = parse(expr)
    unknown = sorted(set(operands) - set(e.names))
    missing = [n for n in e.names if n not in operands]
    if unknown or missing:
        raise InputError(f"{e.text!r} reads {', '.join(e.names)}; "
                         + (f"missing {', '.join(missing)}" if missing else f"not read: {', '.join(unknown)}"),
                         remedy="pass exactly the operands the expression names, by name")
    arrays = {n: caller_array(x, n, DTYPES, dtype) for n, x in operands.items() if not _is_scalar(x)}
    if not arrays:
        raise InputError("no array operand", remedy="pass at least one array")
    dtypes = {a.dtype for a in arrays.values()}
    if len(dtypes) != 1:
        raise DtypeError(f"the arrays hold {', '.join(sorted(dtypes))}; one elementwise call takes one dtype",
                         remedy="cast them to one dtype first (kgen.cast)")
    in_dtype = dtypes.pop()
    kinds = {a.kind for a in arrays.values()}
    if len(kinds) != 1:
        raise InputError(f"the arrays come from {', '.join(sorted(kinds))}", remedy="pass arrays of one library")
    kind = kinds.pop()
    like = next(iter(arrays.values()))
    out_info = describe(out, "out") if out is not None else None
    if out_dtype is None:        # the out given says it, else the inputs' dtype
        out_dtype = in_dtype if out_info is None else (
            "bfloat16" if out_info.dtype == "uint16" and in_dtype == "bfloat16" else out_info.dtype)
    element(out_dtype)
    shape = out_info.shape if out_info is not None else _output_shape(arrays)
    names = {n: ("scalar" if _is_scalar(x) else _kind(arrays[n], n, shape)) for n, x in operands.items()}
    given = output_array(out, like, shape, out_dtype)
    device = same_device([*arrays.values(), *([given] if given else [])])
    target = result_array(given, like, shape, out_dtype)
    if math.prod(shape) == 0:
        return returned(kind, target.obj, out_dtype)
    rows, cols = rows_cols(shape)
    problem = elementwise_problem(e.text, names, rows, cols, in_dtype, out_dtype)
    args = {n: (float(x) if names[n] == "scalar" else pointer(arrays[n])) for n, x in operands.items()}
    args["out"] = pointer(target)
    launch_family("elementwise", problem, device, kind, args)
    return returned(kind, target.obj, out_dtype)


def cast(x, dtype: str, *, scale: float | None = None, out=None, from_dtype: str | None = None):
    """``x`` converted to ``dtype`` (float32, float16, bfloat16; rounded to nearest even, NaN
    and Inf kept), multiplied by ``scale`` first when given. ``from_dtype="bfloat16"`` says
    a CuPy uint16 array holds bfloat16."""
    if dtype not in DTYPES:
        raise DtypeError(f"cast to {dtype!r}: the targets are {', '.join(DTYPES)}")
    a = caller_array(x, "x", DTYPES, from_dtype)
    given = output_array(out, a, a.shape, dtype)
    device = same_device([a, *([given] if given else [])])
    target = result_array(given, a, a.shape, dtype)
    if math.prod(a.shape) == 0:
        return returned(a.kind, target.obj, dtype)
    rows, cols = rows_cols(a.shape)
    problem = cast_problem(rows, cols, a.dtype, dtype, scale is not None)
    args = {"x": pointer(a), "out": pointer(target)}
    if scale is not None:
        args["scale"] = float(scale)
    launch_family("cast", problem, device, a.kind, args)
    return returned(a.kind, target.obj, dtype)
