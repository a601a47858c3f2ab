"""conv2d forward on Hopper: an implicit GEMM on wgmma whose A tiles TMA gathers from the image
in im2col mode (sm_90a).

``gemm_wgmma``'s kernel (warp-specialised, persistent, TMA + wgmma, the fused epilogue) with one
change: each k-block of A is one ``cp.async.bulk.tensor ... im2col`` load of BM output pixels'
window corners, shifted by the k-block's filter tap, its BK channels (``templates/conv/
conv2d_wgmma.cu.j2``). So its space is ``gemm_wgmma``'s on the implicit GEMM (layout NT) and
its untuned pick the GEMM cost model's. It runs 16-bit images (and float32 ones as tf32) whose
channels are a multiple of the k-block (64 16-bit or 32 float32 values, 128 bytes) and whose
padding, dilation and stride an im2col tensor map can express (``kgen.tma.im2col_rejects``);
the rest go to ``conv2d`` (mma.sync, any C).

>>> from kgen.kernels.conv.problem import conv2d_problem
>>> spec, target = Conv2dWgmma(), Target.h200()
>>> p = conv2d_problem(32, 56, 56, 64, 64, 3, 3, padding=1, dtype="bfloat16", family="conv2d_wgmma")
>>> spec.supports(p, target), spec.default_config(p, target).name.startswith("conv2d_wgmma_bf16_nt_")
(True, True)
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kgen import tma
from kgen.arrays import device_pointer
from kgen.kernels.conv.family import ConvFamily
from kgen.kernels.conv.problem import gemm_view, geometry
from kgen.kernels.gemm.dtypes import ITEMSIZE, epilogue_parts
from kgen.kernels.gemm.wgmma import GemmWgmma, row_stride, workspace_args, workspace_recipe
from kgen.kernels.gemm.wgmma_geometry import SWIZZLE, block_k
from kgen.problem import Problem, Target
from kgen.space import Config, Space
from kgen.spec import KernelSpec, Launch

FAMILY = "conv2d_wgmma"
GEMM = "gemm_wgmma"
_GEMM = GemmWgmma()


class Conv2dWgmma(ConvFamily, KernelSpec):
    family = FAMILY
    template = "conv/conv2d_wgmma.cu.j2"
    options = GemmWgmma.options
    tf32_rounding = GemmWgmma.tf32_rounding    # wgmma reads float32 tiles as they lie (truncated to tf32)
    gemm_family = GEMM
    export_dependencies = ("cupy-cuda13x", "cuda-bindings")     # the maps are encoded at each call

    def compile_arch(self, target: Target) -> str:
        return _GEMM.compile_arch(target)

    def supports(self, problem: Problem, target: Target) -> bool:
        dtype = problem["dtype"]
        if tuple(target.cc) != (9, 0) or dtype not in ("bfloat16", "float16", "float32"):
            return False
        g, bk = geometry(problem), block_k(dtype)
        return g.c % bk == 0 and not self.im2col_rejects(problem, 0, bk, min(g.gemm[0], 64))

    @staticmethod
    def im2col_rejects(problem: Problem, ptr: int, channels: int, pixels: int) -> list[str]:
        g = geometry(problem)
        return tma.im2col_rejects(ptr, problem["dtype"], (g.n, g.h, g.w, g.c), (g.r, g.s), (g.sh, g.sw),
                                  (g.ph, g.pw), (g.dh, g.dw), channels, pixels, SWIZZLE)

    # ---- what the tuner searches -------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        return _GEMM.space(gemm_view(problem, GEMM), target).renamed("gemm_wgmma_", "conv2d_wgmma_")

    # ---- render and launch ---------------------------------------------------------------------
    def context(self, problem: Problem, config: Config, space: Space) -> dict[str, Any]:
        ctx = _GEMM.context(gemm_view(problem, GEMM), config, space)
        ctx.update(geometry(problem).template_values())
        ctx["entry"] = config.name
        ctx["ROWS_BY_BAND"] = False     # an output TMA cannot store is written from registers
        return ctx

    def launch(self, problem: Problem, config: Config) -> Launch:
        return _GEMM.launch(gemm_view(problem, GEMM), config)

    def arg_recipe(self, problem: Problem, config: Config) -> list[dict]:
        """``args`` as data (``kgen.export_runtime.replay``), which an exported package rebuilds
        at call time: the maps encoded from the call's pointers, the rest fixed by the problem."""
        g, dtype = geometry(problem), problem["dtype"]
        m, n, k = g.gemm
        view = gemm_view(problem, GEMM)
        has_bias, _ = epilogue_parts(problem)
        bk = block_k(dtype)
        output = _GEMM.output_plan(view, config)

        def fixed(value, kind):
            return {"value": value, "type": kind}

        return [
            {"im2col": {"array": "x", "dtype": dtype, "nhwc": [g.n, g.h, g.w, g.c], "window": [g.r, g.s],
                        "stride": [g.sh, g.sw], "padding": [g.ph, g.pw], "dilation": [g.dh, g.dw], "channels": bk,
                        "pixels": min(m, config["BM"]), "swizzle": SWIZZLE}},
            {"map": {"array": "w", "dtype": dtype, "dims": [k, n], "row_stride": k,
                     "box": [bk, config["BN"] // config.get("CLUSTER", 1)], "swizzle": SWIZZLE}},
            {"map": {"array": "y", "dtype": problem["out_dtype"], "dims": list(output[0]),
                     "row_stride": row_stride(output[0], n), "box": list(output[1]), "swizzle": output[2]},
             "optional": True} if output else {"empty_map": True},
            {"pointer": "x"}, {"pointer": "w"}, fixed(g.c, "int64"), fixed(k, "int64"), {"pointer": "y"},
            {"pointer": "bias"} if has_bias else fixed(0, "uint64"), fixed(m, "int32"), fixed(n, "int32"),
            fixed(k, "int32"), fixed(n, "int64"), fixed(1.0, "float32"), fixed(0.0, "float32"),
            {"map_flag": 2, "type": "int32"} if output else fixed(0, "int32"), *workspace_recipe(view, config)]

    def args(self, problem: Problem, config: Config, ops: Mapping[str, Any]) -> list:
        """The GEMM kernel's arguments: the image's im2col map as A's, the weight's tiled map
        (K rows of R*S*C) as B's, y's map (TMA stores), the pointers, M, N, K, ldc, alpha, beta,
        whether y is stored by TMA, and the split-K workspace."""
        g, dtype = geometry(problem), problem["dtype"]
        m, n, k = g.gemm
        view = gemm_view(problem, GEMM)
        x, w, y = (device_pointer(ops[name], name) for name in ("x", "w", "y"))
        has_bias, _ = epilogue_parts(problem)
        bias = device_pointer(ops["bias"], "bias") if has_bias else 0
        bk = block_k(dtype)
        map_x = tma.encode_im2col(x, dtype, (g.n, g.h, g.w, g.c), (g.r, g.s), (g.sh, g.sw), (g.ph, g.pw),
                                  (g.dh, g.dw), bk, min(m, config["BM"]), SWIZZLE)
        map_w = tma.encode_tiled(w, dtype, (k, n), k * ITEMSIZE[dtype], (bk, config["BN"] // config.get("CLUSTER", 1)),
                                 SWIZZLE)
        map_y, y_by_tma = _GEMM.output_map(view, config, y, n)
        return [map_x, map_w, map_y, np.uint64(x), np.uint64(w), np.int64(g.c), np.int64(k), np.uint64(y),
                np.uint64(bias), np.int32(m), np.int32(n), np.int32(k), np.int64(n), np.float32(1.0),
                np.float32(0.0), y_by_tma, *workspace_args(view, config, self.template)()]
