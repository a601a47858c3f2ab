"""A GEMM's operands as the caller passes them: their layouts read from strides, the output
checked, the problem they make; typed errors name what is wrong and how to mend it."""

from __future__ import annotations

from kgen.kernels.gemm import rules
from kgen.kernels.gemm.dtypes import DTYPES
from kgen.kernels.gemm.problem import gemm_problem
from kgen.problem import Problem


def operand_layout(info, name: str) -> tuple[str, int]:
    """('N', ld) for row-major storage, ('T', ld) for column-major (a transposed view)."""
    from kgen.errors import LayoutError

    found = rules.operand_layout(info.shape, info.strides)
    if found is not None:
        return found
    raise LayoutError(f"{name} has strides {info.strides} (elements) for shape {info.shape}: "
                      "neither row-major nor a transposed view of a row-major array",
                      remedy=f"pass {name}.copy()")


def check_output(ci, m: int, n: int, out_dtype: str, stored_as: tuple[str, ...], device: int) -> None:
    """Typed errors unless ``ci`` (ArrayInfo of c) is a row-major m x n array of ``out_dtype``
    (held as one of ``stored_as``) on ``device``."""
    from kgen.errors import DeviceError, DtypeError, LayoutError, ShapeError

    if ci.shape != (m, n):
        raise ShapeError(f"c has shape {list(ci.shape)}, expected [{m}, {n}]")
    if ci.dtype not in stored_as:
        raise DtypeError(f"c is {ci.dtype} but the output dtype is {out_dtype}", remedy=f"pass c as {out_dtype}")
    if ci.device != device:
        raise DeviceError(f"c is on device {ci.device}, a and b on device {device}")
    if n > 1 and ci.strides[1] != 1 or (m > 1 and ci.strides[0] < n):
        raise LayoutError(f"c must be row-major (strides [ldc, 1], ldc >= n); has strides {list(ci.strides)}",
                          remedy="pass a C-contiguous c, and copy the result where it must go")


def matmul_shape(ai, bi) -> tuple[int, int, int]:
    """m, n, k of ``a @ b`` from their ArrayInfos; ShapeError unless both are 2-D and k agrees."""
    from kgen.errors import ShapeError

    if len(ai.shape) != 2 or len(bi.shape) != 2:
        raise ShapeError(f"gemm takes 2-D arrays (3-D: a batch); got a{list(ai.shape)} and b{list(bi.shape)}",
                         remedy="reshape to 2-D, or pass 3-D arrays for a batch of GEMMs")
    (m, k), (k2, n) = ai.shape, bi.shape
    if k != k2:
        raise ShapeError(f"inner dimensions differ: a is {m}x{k}, b is {k2}x{n}",
                         remedy="pass b with as many rows as a has columns")
    return m, n, k


def problem_from_operands(a, b, c=None) -> tuple[Problem, int]:
    """The GEMM problem of ``a @ b`` (into ``c``) and the device it runs on, from strides."""
    from kgen.arrays import describe, one_library
    from kgen.errors import DeviceError, DtypeError

    one_library(a=a, b=b, c=c)
    ai, bi = describe(a, "a"), describe(b, "b")
    m, n, k = matmul_shape(ai, bi)
    if ai.dtype != bi.dtype or ai.dtype not in DTYPES:
        raise DtypeError(f"gemm needs a and b of one dtype among {sorted(DTYPES)}; got {ai.dtype} and {bi.dtype}",
                         remedy="cast with .astype(...)")
    if ai.device != bi.device:
        raise DeviceError(f"a is on device {ai.device} and b on device {bi.device}")
    if c is not None:
        check_output(describe(c, "c"), m, n, ai.dtype, (ai.dtype,), ai.device)
    la, lda = operand_layout(ai, "a")
    lb, ldb = operand_layout(bi, "b")
    problem = gemm_problem(m, n, k, ai.dtype, la + lb, rules.alignment(ai.ptr, lda, ai.itemsize),
                           rules.alignment(bi.ptr, ldb, bi.itemsize))
    return problem, ai.device
