"""What every tensor-core GEMM family shares: the problem, the operands, the reference.

C = act(alpha * op(A) @ op(B) + beta * C + bias), with A and B in float16, bfloat16,
float32 read as tf32 (opt-in), or float64; accumulation in float32 (float64 for float64);
C in ``out_dtype``. ``epilogue`` names the fused tail: none, relu, gelu, bias, bias_relu,
bias_gelu (bias is one value per column of C, in ``out_dtype``; gelu is the erf form).

CuPy has no bfloat16: on the GPU side bfloat16 arrays are CuPy uint16 arrays holding the
bit patterns (``to_bf16`` / ``from_bf16`` convert).

>>> p = tc_problem("gemm_mma", 128, 64, 32, "bfloat16", "TN", epilogue="bias_gelu")
>>> p.key
'gemm_mma|align_a=8|align_b=8|dtype=bfloat16|epilogue=bias_gelu|k=32|layout=TN|m=128|n=64|out_dtype=bfloat16|precision=native'
>>> epilogue_parts(p)
(True, 'gelu')
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from kgen.kernels.gemm import rules
from kgen.kernels.gemm.dtypes import ITEMSIZE, STORAGE, TC_INPUTS, TC_OUTPUTS, epilogue_parts
from kgen.kernels.gemm.problem import tc_problem
from kgen.kernels.gemm.family import GemmFamily
from kgen.problem import Problem
from kgen.spec import Check, KernelSpec

def type_context(problem: Problem) -> dict[str, Any]:
    """C++ spellings and sizes the templates need for the problem's dtypes and epilogue."""
    in_t, acc_t, in_size, short = TC_INPUTS[problem["dtype"]]
    out_t, out_size = TC_OUTPUTS[problem["out_dtype"]]
    bias, act = epilogue_parts(problem)
    return dict(dtype=problem["dtype"], out_dtype=problem["out_dtype"], layout=problem["layout"],
                in_t=in_t, acc_t=acc_t, out_t=out_t, in_size=in_size, out_size=out_size,
                in_store_t=STORAGE[problem["dtype"]], out_store_t=STORAGE[problem["out_dtype"]],
                short=short, has_bias=int(bias), activation=act)


# ---- bfloat16 as uint16 bit patterns (GPU side) ---------------------------------------------

def to_bf16(x):
    """CuPy float32 array -> uint16 bfloat16 bits, rounded to nearest even."""
    import cupy

    u = cupy.ascontiguousarray(x, dtype=cupy.float32).view(cupy.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(cupy.uint16)


def from_bf16(bits):
    """uint16 bfloat16 bits -> CuPy float32 array (exact)."""
    import cupy

    return (cupy.ascontiguousarray(bits).astype(cupy.uint32) << 16).view(cupy.float32)


def to_tf32(x, rounding: str = "nearest"):
    """float32 values as a tensor core reads them as tf32 (10 mantissa bits), as float32:
    ``nearest`` (ties away, as cvt.rna.tf32.f32 converts) or ``truncate`` (the low 13 bits
    dropped, as an MMA reading raw float32 does)."""
    import cupy

    u = cupy.ascontiguousarray(x, dtype=cupy.float32).view(cupy.uint32)
    if rounding == "nearest":
        u = u + 0x1000
    return (u & 0xFFFFE000).astype(cupy.uint32).view(cupy.float32)


def as_float64(arr, dtype: str):
    """Any operand or output as float64 (bfloat16 bits decoded)."""
    import cupy

    if dtype == "bfloat16":
        return from_bf16(arr).astype(cupy.float64)
    return arr.astype(cupy.float64)


def epilogue_reference(problem: Problem, ref, bias):
    """``ref`` (float64, the output's last axis its columns) with the problem's epilogue applied:
    ``bias`` (one value per column, in ``out_dtype``) added, then relu or gelu (erf form)."""
    has_bias, act = epilogue_parts(problem)
    if has_bias:
        ref = ref + as_float64(bias, problem["out_dtype"])
    if act == "relu":
        ref = ref.clip(0.0, None)
    elif act == "gelu":
        from cupyx.scipy.special import erf

        ref = 0.5 * ref * (1.0 + erf(ref / math.sqrt(2.0)))
    return ref


# tolerance on max |error| / max |reference|, by output dtype (float32 out of half inputs is tighter)
_TOLERANCE = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-4, "float64": 1e-12}


def tolerance(problem: Problem) -> float:
    """Max |error| / max |reference| allowed for a tensor-core problem's output."""
    if problem["dtype"] == "float32":
        return 1e-3
    return _TOLERANCE[problem["out_dtype"]]


def compare_output(name: str, got, want, tol: float) -> Check:
    """Output ``name`` (float64) against the float64 reference: finite everywhere, and max
    |error| within ``tol`` of max |reference|."""
    import cupy

    if not bool(cupy.isfinite(got).all()):
        return Check(False, float("inf"), f"{name} holds NaN or Inf (unwritten or overflowed)")
    scale = float(cupy.abs(want).max()) or 1.0
    err = float(cupy.abs(got - want).max()) / scale
    if not err <= tol:
        return Check(False, err, f"{name}: max error {err:.3g} over tolerance {tol:.1g}")
    return Check(True, err)


class TensorCoreGemm(GemmFamily, KernelSpec):
    """Operands, reference, check and baseline of the tensor-core GEMM families.

    Subclasses set ``family`` and ``template`` and implement ``space``, ``context``,
    ``launch``, ``args`` and ``default_config``.
    """

    shape_params = ("m", "n", "k")
    outputs = ("c",)
    options = ("--std=c++17",)
    tf32_rounding = "nearest"     # how the kernels turn float32 operands into tf32 (see to_tf32; None: they don't)
    export_runtime = "tc_gemm_module.py"     # exact problems, arguments replayed from ``arg_recipe``

    def problem(self, m: int, n: int, k: int, dtype: str = "bfloat16", layout: str = "NN",
                **kw) -> Problem:
        return tc_problem(self.family, m, n, k, dtype, layout, **kw)

    def supports(self, problem: Problem, target) -> bool:
        """Whether this family can run ``problem`` on ``target`` at all."""
        return problem["dtype"] in TC_INPUTS

    def context(self, problem: Problem, config, space) -> dict[str, Any]:
        """What changes the binary: types, layout, epilogue and the config (shapes are arguments)."""
        ctx = type_context(problem)
        ctx.update(space.full_values(config.as_dict()))
        ctx["entry"] = config.name
        return ctx

    def arg_builder(self, problem: Problem, config, lds: tuple):
        """A function (a, b, c, bias pointers (0: none), alpha, beta, stream=None, device=None)
        -> kernel arguments, with everything else (m, n, k, lda, ldb, ldc) fixed now;
        ``stream`` (a cudaStream_t) and ``device`` are the launch's (None: CuPy's current
        ones), for kernels with a workspace per stream. Families whose kernels take other
        arguments override this."""
        scalar = np.float64 if problem["dtype"] == "float64" else np.float32
        dims = (np.int32(problem["m"]), np.int32(problem["n"]), np.int32(problem["k"]),
                np.int64(max(lds[0], 1)), np.int64(max(lds[1], 1)), np.int64(max(lds[2], 1)))
        u64 = np.uint64

        def build(pa, pb, pc, pbias, alpha, beta, stream=None, device=None):
            return (u64(pa), u64(pb), u64(pc), u64(pbias), *dims, scalar(alpha), scalar(beta))

        return build

    def export_files(self) -> dict[str, Path]:
        return {"_rules.py": Path(rules.__file__)}

    def export_extras(self, target, bests, write_kernel) -> dict[str, Any]:
        return {"itemsize": {dtype: ITEMSIZE[dtype] for dtype in TC_INPUTS}}

    def arg_recipe(self, problem: Problem, config) -> list[dict]:
        """The kernel's arguments as data (``kgen.export_runtime.replay``), which an exported
        package rebuilds at call time: the arguments ``arg_builder`` makes."""
        scalar = "float64" if problem["dtype"] == "float64" else "float32"
        return [{"pointer": "a"}, {"pointer": "b"}, {"pointer": "c"}, {"pointer": "bias", "optional": True},
                *({"value": problem[x], "type": "int32"} for x in ("m", "n", "k")),
                *({"ld": x, "type": "int64"} for x in "abc"),
                {"scalar": "alpha", "type": scalar, "default": 1.0}, {"scalar": "beta", "type": scalar, "default": 0.0}]

    def args(self, problem: Problem, config, operands: Mapping[str, Any]) -> list:
        from kgen.arrays import describe

        a, b, c = (describe(operands[x], x) for x in ("a", "b", "c"))
        bias = operands.get("bias")
        layout = problem["layout"]
        lda = a.strides[0] if layout[0] == "N" else a.strides[1]
        ldb = b.strides[0] if layout[1] == "N" else b.strides[1]
        build = self.arg_builder(problem, config, (lda, ldb, c.strides[0]))
        return list(build(a.ptr, b.ptr, c.ptr, describe(bias, "bias").ptr if bias is not None else 0,
                          operands.get("alpha", 1.0), operands.get("beta", 0.0)))

    # ---- measurement (GPU) ------------------------------------------------------------
    def inputs(self, problem: Problem, seed: int) -> dict[str, Any]:
        import cupy

        rng = cupy.random.default_rng(seed)
        m, n, k, dtype, layout = (problem[x] for x in ("m", "n", "k", "dtype", "layout"))
        out = problem["out_dtype"]

        def values(shape, dt):
            x = (rng.random(shape, dtype=cupy.float32) * 2 - 1)
            if dt == "bfloat16":
                return to_bf16(x)
            return x.astype(dt)

        def operand(rows, cols, transposed, align):
            """Row-major storage (transposed: a view of its transpose) whose row stride is a
            multiple of ``align``: a staged problem's padded rows (``staging``)."""
            r, c = (cols, rows) if transposed else (rows, cols)
            x = values((r, -(-c // align) * align), dtype)[:, :c]
            return x.T if transposed else x

        has_bias, _ = epilogue_parts(problem)
        c = cupy.empty((m, n), dtype=cupy.uint16 if out == "bfloat16" else out)
        c.fill(0xFFFF if out == "bfloat16" else cupy.nan)
        return {"a": operand(m, k, layout[0] == "T", problem["align_a"]),
                "b": operand(k, n, layout[1] == "T", problem["align_b"]), "c": c,
                "bias": values((n,), out) if has_bias else None, "alpha": 1.0, "beta": 0.0}

    def reference(self, problem: Problem, operands: Mapping[str, Any]) -> dict[str, Any]:
        dtype, out = problem["dtype"], problem["out_dtype"]
        a, b = operands["a"], operands["b"]
        if dtype == "float32" and self.tf32_rounding:      # the tensor cores see tf32
            a, b = to_tf32(a, self.tf32_rounding), to_tf32(b, self.tf32_rounding)
        ref = operands.get("alpha", 1.0) * (as_float64(a, dtype) @ as_float64(b, dtype))
        beta = operands.get("beta", 0.0)
        if beta:
            ref += beta * as_float64(operands["c"], out)
        return {"c": epilogue_reference(problem, ref, operands.get("bias"))}

    def tolerance(self, problem: Problem) -> float:
        return tolerance(problem)

    def check(self, problem: Problem, arrays: Mapping[str, Any], expected: Mapping[str, Any]) -> Check:
        return compare_output("c", as_float64(arrays["c"], problem["out_dtype"]), expected["c"],
                              self.tolerance(problem))

    def baseline(self, problem: Problem, operands: Mapping[str, Any]):
        """cuBLAS through PyTorch (bias and activation as separate PyTorch ops), else CuPy."""
        try:
            return torch_baseline(problem, operands)
        except ImportError:
            pass
        import cupy

        if problem["dtype"] == "bfloat16" or problem["epilogue"] != "none" \
                or problem["dtype"] != problem["out_dtype"] or problem["dtype"] == "float32":
            return None
        a, b, c = operands["a"], operands["b"], operands["c"]
        return lambda: cupy.matmul(a, b, out=c)

    def flops(self, problem: Problem) -> float:
        return 2.0 * problem["m"] * problem["n"] * problem["k"]

    def bytes(self, problem: Problem) -> float:
        size = ITEMSIZE[problem["dtype"]]
        out = TC_OUTPUTS[problem["out_dtype"]][1]
        m, n, k = problem["m"], problem["n"], problem["k"]
        return float(size * (m * k + k * n) + out * m * n)


def torch_view(arr, dtype: str):
    """A PyTorch tensor over a CuPy array's memory (uint16 bits read as bfloat16)."""
    import torch

    t = torch.from_dlpack(arr)
    return t.view(torch.bfloat16) if dtype == "bfloat16" else t


def torch_baseline(problem: Problem, operands: Mapping[str, Any]):
    """cuBLAS through torch.matmul (tf32 allowed for tf32 problems), then bias and activation."""
    import torch

    dtype, out = problem["dtype"], problem["out_dtype"]
    a, b = torch_view(operands["a"], dtype), torch_view(operands["b"], dtype)
    c = torch_view(operands["c"], out)
    bias = torch_view(operands["bias"], out) if operands.get("bias") is not None else None
    _, act = epilogue_parts(problem)
    torch.backends.cuda.matmul.allow_tf32 = dtype == "float32"
    stream = torch_stream_of_cupy()

    def run():
        with torch.cuda.stream(stream):
            if out == dtype:
                torch.matmul(a, b, out=c)
            else:
                c.copy_(torch.matmul(a, b))
            if bias is not None:
                c.add_(bias)
            if act == "relu":
                torch.relu_(c)
            elif act == "gelu":
                c.copy_(torch.nn.functional.gelu(c))

    return run


def cupy_stream_ptr() -> int:
    import cupy

    return cupy.cuda.get_current_stream().ptr


def torch_stream_of_cupy():
    """A PyTorch stream for CuPy's current one (PyTorch's default stream for the legacy one), so a
    PyTorch baseline runs where the measured kernels run."""
    import torch

    ptr = cupy_stream_ptr()
    return torch.cuda.ExternalStream(ptr) if ptr else torch.cuda.default_stream()


def modelled_time(m: int, n: int, bm: int, bn: int, sms: int) -> float:
    """Relative time of an m x n output in bm x bn tiles on ``sms`` SMs, one tile per SM at a
    time: the waves the persistent scheduler runs (ceil(tiles / sms)), each as long as one
    tile's work over the tile's efficiency; a larger tile reuses each loaded operand byte in
    more MMAs, efficiency (area / 128x256)^0.25, about 0.59 at 64x64 and 0.84 at 128x128.
    gemm_wgmma ranks its default tiles by it. In the whole recorded space of the H200
    (tests/data, the template of 2026-12-02) its default runs at 0.965 (1000^3), 0.978
    (2048^3), 1.0 (4096^3), 0.948 (3000x5000x720) and 0.78 (128x4096x4096, where the second
    pick is the optimum) of the optimum. On the recording of the 2026-11-30 template the
    exponent 0.15 had taken 128x192 tiles at 3000x5000x720 (0.89), and the kgen search then
    needed 24 trials to reach 95 % of the optimum there against 8 with 0.25."""
    area = bm * bn
    waves = -(-(-(-m // bm) * -(-n // bn)) // sms)
    return waves * area / min(1.0, (area / (128 * 256)) ** 0.25)
