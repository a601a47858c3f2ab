"""conv2d forward on the tensor cores: an implicit GEMM on mma.sync (sm_80 and later).

``y = act(conv2d(x, w) + bias)`` with x NHWC, w KRSC and y NPQK, bfloat16 or float16 (float32
read as tf32, by opt-in), float32 accumulation. The kernel is ``gemm_mma``'s main loop with A
gathered from the image in its copies (``templates/conv/conv2d_mma.cu.j2``), so its space is
``gemm_mma``'s on the implicit GEMM (``problem.gemm_view``) with copies planned once, and its
untuned default is the GEMM cost model's pick for that GEMM.

>>> from kgen.kernels.conv.problem import conv2d_problem
>>> spec, target = Conv2d(), Target.h200()
>>> p = conv2d_problem(32, 56, 56, 64, 64, 3, 3, padding=1, dtype="bfloat16")
>>> spec.default_config(p, target).name.startswith("conv2d_bf16_")
True
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kgen.kernels.conv.family import ConvFamily
from kgen.kernels.conv.problem import FAMILY, gemm_view, geometry
from kgen.kernels.gemm.dtypes import epilogue_parts
from kgen.kernels.gemm.mma import GemmMma
from kgen.kernels.gemm.tc import type_context
from kgen.problem import Problem, Target
from kgen.space import Config, Constraint, Param, Space
from kgen.spec import KernelSpec, Launch

_MMA = GemmMma()
_PLANNED = 1          # conv copies are always planned once (the GEMM's LP=1): the im2col plan is one


class Conv2d(ConvFamily, KernelSpec):
    family = FAMILY
    template = "conv/conv2d_mma.cu.j2"
    options = ("--std=c++17",)
    tf32_rounding = "nearest"        # as the GEMM's tf32 operands (cvt.rna.tf32.f32)
    gemm_family = "gemm_mma"
    fixed = {"LP": _PLANNED}

    def supports(self, problem: Problem, target: Target) -> bool:
        return target.cc >= (8, 0)

    # ---- what the tuner searches ---------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        """gemm_mma's space on the implicit GEMM, its copies planned once, each thread's A chunks
        of one k column (the im2col plan works out a tile's (r, s, c) once per thread)."""
        gemm = _MMA.space(gemm_view(problem), target)
        params = [Param("LP", (_PLANNED,), default=_PLANNED) if p.name == "LP" else p for p in gemm.params]

        def one_column(v) -> bool:
            warps = (v["BM"] // v["WM"]) * (v["BN"] // v["WN"]) * v["WK"]
            return (32 * warps) % (v["BK"] // v["VA"]) == 0

        constraints = [*gemm.constraints,
                       Constraint("a thread's A chunks in one k column", one_column, ("BM", "BN", "BK", "WM", "WN",
                                                                                      "WK", "VA"))]
        return Space(params, constraints, gemm.derived, gemm.namer).renamed("gemm_mma_", "conv2d_")

    # ---- render and launch ---------------------------------------------------------------------
    def context(self, problem: Problem, config: Config, space: Space) -> dict[str, Any]:
        ctx = type_context(gemm_view(problem))
        ctx.update(space.full_values(config.as_dict()))
        ctx.update(geometry(problem).template_values())
        ctx["entry"] = config.name
        return ctx

    def launch(self, problem: Problem, config: Config) -> Launch:
        return _MMA.launch(gemm_view(problem), config)

    def args(self, problem: Problem, config: Config, ops: Mapping[str, Any]) -> list:
        """The GEMM kernel's arguments: x, w, y and bias (0: none) as A, B, C and bias; M, N, K;
        A's leading dimension (unused: A is gathered), the weight's rows, y's rows."""
        m, n, k = geometry(problem).gemm
        has_bias, _ = epilogue_parts(problem)
        return [ops["x"], ops["w"], ops["y"], ops["bias"] if has_bias else np.uint64(0),
                np.int32(m), np.int32(n), np.int32(k), np.int64(problem["c"]), np.int64(k), np.int64(n),
                np.float32(1.0), np.float32(0.0)]
