"""GEMM's dtype tables, each decided here once: what the CUDA-core family stores and computes
in, what the tensor-core families take and write, their C++ spellings and sizes, and the
fused epilogues.

>>> ITEMSIZE["bfloat16"], allowed_outputs("float16"), epilogue_name(True, "gelu")
(2, ('float16', 'float32'), 'bias_gelu')
"""

from __future__ import annotations

from kgen.errors import KgenError
from kgen.problem import Problem

# CUDA cores: storage C type, compute C type, storage bytes, compute bytes, short name, tolerance
DTYPES: dict[str, tuple[str, str, int, int, str, float]] = {
    "float32": ("float", "float", 4, 4, "f32", 1e-4),
    "float64": ("double", "double", 8, 8, "f64", 1e-11),
    "float16": ("unsigned short", "float", 2, 4, "f16", 4e-3),
}

# input dtype -> (C++ input type, accumulator C++ type, input bytes, short name)
TC_INPUTS: dict[str, tuple[str, str, int, str]] = {
    "float16": ("__half", "float", 2, "f16"),
    "bfloat16": ("__nv_bfloat16", "float", 2, "bf16"),
    "float32": ("float", "float", 4, "tf32"),
    "float64": ("double", "double", 8, "f64"),
}
# output dtype -> (C++ type, bytes)
TC_OUTPUTS: dict[str, tuple[str, int]] = {
    "float16": ("__half", 2), "bfloat16": ("__nv_bfloat16", 2), "float32": ("float", 4),
    "float64": ("double", 8),
}
# header-free storage spelling (16-bit values as their bits; see templates/common/convert.cuh)
STORAGE = {"float16": "unsigned short", "bfloat16": "unsigned short", "float32": "float",
            "float64": "double"}
EPILOGUES = ("none", "relu", "gelu", "bias", "bias_relu", "bias_gelu")
ACTIVATIONS = ("none", "relu", "gelu")
ITEMSIZE = {d: v[2] for d, v in TC_INPUTS.items()}


def allowed_outputs(dtype: str) -> tuple[str, ...]:
    """Output dtypes a tensor-core GEMM of ``dtype`` inputs can write."""
    if dtype in ("float16", "bfloat16"):
        return (dtype, "float32")
    return (dtype,)


def checked_output(dtype: str, out_dtype: str | None, epilogue: str) -> str:
    """The output dtype of a tensor-core problem of ``dtype`` inputs (``dtype`` where None),
    checked with its epilogue: a typed error names what is wrong."""
    from kgen.errors import DtypeError, InputError

    out_dtype = out_dtype or dtype
    if out_dtype not in allowed_outputs(dtype):
        raise DtypeError(f"{dtype} inputs can write {list(allowed_outputs(dtype))}, not {out_dtype}",
                         remedy="choose another out_dtype, or leave it out")
    if epilogue not in EPILOGUES:
        raise InputError(f"unknown epilogue {epilogue!r}", remedy=f"use one of {list(EPILOGUES)}")
    return out_dtype


def epilogue_name(bias: bool, activation: str | None) -> str:
    act = activation or "none"
    if act not in ACTIVATIONS:
        raise KgenError(f"unknown activation {activation!r}", remedy=f"use one of {list(ACTIVATIONS)}")
    if bias:
        return "bias" if act == "none" else f"bias_{act}"
    return act


def epilogue_parts(problem: Problem) -> tuple[bool, str]:
    """(has a bias, activation) of the problem's epilogue."""
    e = problem["epilogue"]
    if e.startswith("bias"):
        return True, e[5:] or "none"
    return False, e
