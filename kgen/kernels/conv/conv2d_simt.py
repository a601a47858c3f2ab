"""conv2d forward in exact float32 on the CUDA cores: an implicit GEMM on ``gemm``'s (SIMT) kernel.

``y = act(conv2d(x, w) + bias)`` with x NHWC, w KRSC and y NPQK, all float32, float32
arithmetic (no tf32: that is ``precision="tf32"``, the tensor-core families). The kernel is
``gemm``'s main loop and thread tiles with A gathered from the image in its loads
(``templates/conv/conv2d_simt.cu.j2``), so its space is ``gemm``'s on the implicit GEMM (layout
NT: A's rows are output pixels, the weight's rows hold R*S*C), with each thread's A vectors in
one k column, and split-K only where no bias or activation is fused (the parts are added into a
zeroed y). Its untuned picks are the GEMM cost model's for that GEMM.

>>> from kgen.kernels.conv.problem import conv2d_problem
>>> spec, target = Conv2dSimt(), Target.h200()
>>> p = conv2d_problem(8, 28, 28, 64, 64, 3, 3, padding=1, dtype="float32", family="conv2d_simt")
>>> spec.supports(p, target), spec.default_config(p, target).name.startswith("conv2d_simt_f32_nt_")
(True, True)
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

import numpy as np

from kgen.kernels.conv.family import ConvFamily
from kgen.kernels.conv.problem import EXACT_FLOAT32, alignment, geometry
from kgen.kernels.gemm.dtypes import epilogue_parts
from kgen.kernels.gemm.problem import gemm_problem
from kgen.kernels.gemm.simt import GemmSimt
from kgen.problem import Problem, Target
from kgen.space import Config, Constraint, Space
from kgen.spec import KernelSpec, Launch

_SIMT = GemmSimt()


def _one_column(threads, v) -> bool:
    return threads(v) % (v["BK"] // v["VA"]) == 0


def _gather_fits(registers, rows, v) -> bool:
    """gemm's register estimate with the gather's state of each A row a thread loads (its window
    corner's offset, two words, its row and column) within 255."""
    return registers(v) + 4 * rows(v) <= 255


class Conv2dSimt(ConvFamily, KernelSpec):
    family = EXACT_FLOAT32
    template = "conv/conv2d_simt.cu.j2"
    options = GemmSimt.options
    gemm_family = _SIMT.family

    def supports(self, problem: Problem, target: Target) -> bool:
        return problem["dtype"] == "float32"

    def implicit_gemm(self, problem: Problem) -> Problem:
        """The implicit GEMM as a CUDA-core GEMM problem: layout NT, A's vectors as wide as C
        allows (a vector is channels of one pixel), the weight's as R*S*C allows."""
        g = geometry(problem)
        m, n, k = g.gemm
        return gemm_problem(m, n, k, "float32", "NT", align_a=alignment(g.c, 4), align_b=alignment(k, 4))

    # ---- what the tuner searches ---------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        """``gemm``'s space on the implicit GEMM, each thread's A vectors in one k column, split-K
        only without a fused tail."""
        gemm = _SIMT.space(self.implicit_gemm(problem), target)
        constraints = [*gemm.constraints,
                       Constraint("a thread's A vectors in one k column",
                                  functools.partial(_one_column, gemm.derived["THREADS"]),
                                  ("BM", "BN", "BK", "TM", "TN", "VA")),
                       Constraint("the gather's row state fits the registers",
                                  functools.partial(_gather_fits, gemm.derived["REGS_EST"], gemm.derived["LA"]),
                                  ("BM", "BN", "BK", "TM", "TN", "VA", "VB"))]
        if problem["epilogue"] != "none":
            constraints.append(Constraint("split-K only without a fused bias or activation",
                                          lambda v: v["SK"] == 1, ("SK",)))
        return Space(gemm.params, constraints, gemm.derived, gemm.namer).renamed("gemm_simt_", "conv2d_simt_")

    def _as_conv(self, space, config):
        """A GEMM pick as this space's config; one that splits K where a tail is fused, unsplit."""
        conv = super()._as_conv(space, config)
        if conv is None and config is not None:
            unsplit = dict(config.as_dict(), SK=1)
            conv = space.make(unsplit) if space.is_valid(unsplit) else None
        return conv

    # ---- render and launch ---------------------------------------------------------------------
    def context(self, problem: Problem, config: Config, space: Space) -> dict[str, Any]:
        ctx = _SIMT.context(self.implicit_gemm(problem), config, space)
        ctx.update(geometry(problem).template_values())
        has_bias, activation = epilogue_parts(problem)
        ctx.update(entry=config.name, HAS_BIAS=has_bias, ACTIVATION=activation)
        return ctx

    def launch(self, problem: Problem, config: Config) -> Launch:
        return _SIMT.launch(self.implicit_gemm(problem), config)

    def args(self, problem: Problem, config: Config, ops: Mapping[str, Any]) -> list:
        """The GEMM kernel's arguments: x, w, y, bias (0: none); M, N, K; A's leading dimension
        (unused: A is gathered), the weight's rows, y's rows; alpha 1, beta 0."""
        m, n, k = geometry(problem).gemm
        has_bias, _ = epilogue_parts(problem)
        return [ops["x"], ops["w"], ops["y"], ops["bias"] if has_bias else np.uint64(0),
                np.int32(m), np.int32(n), np.int32(k), np.int64(problem["c"]), np.int64(k), np.int64(n),
                np.float32(1.0), np.float32(0.0)]

    def cleared_outputs(self, problem: Problem, config: Config) -> dict[str, int]:
        """Split-K adds its parts atomically into y: y is zeroed first."""
        return {"y": 4 * geometry(problem).gemm[0] * problem["k"]} if config["SK"] > 1 else {}
