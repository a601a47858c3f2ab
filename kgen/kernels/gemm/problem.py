"""GEMM problems, built in one place: ``gemm_problem`` for the CUDA-core family,
``tc_problem`` for a tensor-core family; both default the alignment to what fresh arrays of
the shape allow.

>>> gemm_problem(100, 64, 32, "float32", "TN").key
'gemm|align_a=4|align_b=4|dtype=float32|k=32|layout=TN|m=100|n=64'
>>> p = tc_problem("gemm_mma", 128, 64, 32, "bfloat16", "TN", epilogue="bias_gelu")
>>> p.key
'gemm_mma|align_a=8|align_b=8|dtype=bfloat16|epilogue=bias_gelu|k=32|layout=TN|m=128|n=64|out_dtype=bfloat16|precision=native'
"""

from __future__ import annotations

from kgen.errors import DtypeError, KgenError
from kgen.kernels.gemm import rules
from kgen.kernels.gemm.dtypes import DTYPES, ITEMSIZE, TC_INPUTS, checked_output
from kgen.problem import Problem

LAYOUTS = ("NN", "NT", "TN", "TT")


def gemm_problem(m: int, n: int, k: int, dtype: str = "float32", layout: str = "NN",
                 align_a: int | None = None, align_b: int | None = None) -> Problem:
    """A GEMM problem; alignment defaults to the widest 16-byte vector the shapes allow."""
    size = DTYPES[dtype][2]
    lda = k if layout[0] == "N" else m
    ldb = n if layout[1] == "N" else k
    return Problem.of("gemm", m=m, n=n, k=k, dtype=dtype, layout=layout,
                      align_a=align_a if align_a is not None else rules.natural_alignment(lda, size),
                      align_b=align_b if align_b is not None else rules.natural_alignment(ldb, size))


def tc_problem(family: str, m: int, n: int, k: int, dtype: str = "bfloat16", layout: str = "NN",
               out_dtype: str | None = None, epilogue: str = "none", align_a: int | None = None,
               align_b: int | None = None) -> Problem:
    """A tensor-core GEMM problem; alignment defaults to what fresh arrays of the shape allow."""
    if dtype not in TC_INPUTS:
        raise DtypeError(f"tensor-core GEMM takes {sorted(TC_INPUTS)}; got {dtype}")
    out_dtype = checked_output(dtype, out_dtype, epilogue)
    if layout not in LAYOUTS:
        raise KgenError(f"unknown layout {layout!r}", remedy="use NN, NT, TN or TT")
    size = ITEMSIZE[dtype]
    lda = k if layout[0] == "N" else m
    ldb = n if layout[1] == "N" else k
    return Problem.of(family, m=m, n=n, k=k, dtype=dtype, out_dtype=out_dtype, layout=layout,
                      epilogue=epilogue, precision="tf32" if dtype == "float32" else "native",
                      align_a=align_a if align_a is not None else rules.natural_alignment(lda, size),
                      align_b=align_b if align_b is not None else rules.natural_alignment(ldb, size))
