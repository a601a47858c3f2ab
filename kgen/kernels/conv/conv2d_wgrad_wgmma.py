"""A convolution's weight gradient on Hopper: one GEMM on wgmma that reduces over the output
pixels, its image operand gathered by TMA in im2col mode along the reduction (sm_90a).

``dW[K, (r, s, c)] = dy[NPQ, K]^T @ im2col(x)[NPQ, (r, s, c)]``: ``gemm_wgmma``'s kernel at
layout TN (A is dy as it lies, pixels x K; B is gathered: a 64-wide column chunk is 64 channels
of one tap, its k-block 64 output pixels' window corners shifted by the tap, one im2col load,
``templates/conv/conv2d_wgrad_wgmma.cu.j2``), dW written in KRSC order. Nothing is transposed
or copied on the way: the image and the gradient are read where they lie (channels-last). The
reduction is long (N·P·Q) and the output small (K x R·S·C), so split-K is what fills the GPU;
the space and the untuned picks are ``gemm_wgmma``'s on that GEMM (``wgrad_gemm_view``). It
runs 16-bit images whose channels are a multiple of 64 (a chunk at one tap) and whose output
channels give 16-byte rows; the rest take ``kgen.torch.weight_gradient``'s other ways.

>>> spec, target = Conv2dWgradWgmma(), Target.h200()
>>> p = wgrad_problem(32, 56, 56, 64, 64, 3, 3, padding=1)
>>> spec.supports(p, target), wgrad_gemm_view(p)["m"], wgrad_gemm_view(p)["n"], wgrad_gemm_view(p)["k"]
(True, 64, 576, 100352)
>>> spec.default_config(p, target).name.startswith("conv2d_wgrad_wgmma_bf16_tn_")
True
"""

from __future__ import annotations

import functools
import math
from typing import Any, Mapping

import numpy as np

from kgen import tma
from kgen.arrays import device_pointer
from kgen.errors import InputError
from kgen.kernels.conv.family import ConvFamily, random_operand, tap_windows
from kgen.kernels.conv.problem import SIZES, alignment, conv2d_problem, geometry
from kgen.kernels.gemm.dtypes import ITEMSIZE, TC_OUTPUTS
from kgen.kernels.gemm.problem import tc_problem
from kgen.kernels.gemm.tc import as_float64, compare_output, torch_stream_of_cupy, torch_view
from kgen.kernels.gemm.wgmma import GemmWgmma, row_stride, workspace_args, workspace_recipe
from kgen.kernels.gemm.wgmma_geometry import SWIZZLE
from kgen.problem import Problem, Target
from kgen.space import Config, Space
from kgen.spec import KernelSpec, Launch

FAMILY = "conv2d_wgrad_wgmma"
GEMM = "gemm_wgmma"
DTYPES = ("bfloat16", "float16")
CHUNK = 64          # a B column chunk's channels, and a k-block's pixels: one 128-byte swizzled box
_GEMM = GemmWgmma()


def wgrad_problem(n: int, h: int, w: int, c: int, k: int, r: int, s: int, *, stride=1, padding=0, dilation=1,
                  dtype: str = "bfloat16", out_dtype: str | None = None) -> Problem:
    """The weight gradient of ``y = conv2d(x, w)`` (x NHWC, w KRSC, y NPQK) as a problem of
    this family: the convolution's sizes (checked as ``conv2d_problem`` checks them), the
    inputs' dtype and dW's (``out_dtype``: the inputs', or float32)."""
    return conv2d_problem(n, h, w, c, k, r, s, stride=stride, padding=padding, dilation=dilation, dtype=dtype,
                          out_dtype=out_dtype, family=FAMILY)


@functools.lru_cache(maxsize=1024)
def wgrad_gemm_view(problem: Problem) -> Problem:
    """The weight gradient as a ``gemm_wgmma`` problem: M = K (dW's rows), N = R·S·C, k = N·P·Q
    (the output pixels), layout TN (dy stored k x M, the gathered image k x N)."""
    g = geometry(problem)
    p, q = g.output
    size = ITEMSIZE[problem["dtype"]]
    return tc_problem(GEMM, g.k, g.r * g.s * g.c, g.n * p * q, problem["dtype"], "TN", out_dtype=problem["out_dtype"],
                      align_a=alignment(g.k, size), align_b=alignment(g.c, size))


class Conv2dWgradWgmma(ConvFamily, KernelSpec):
    family = FAMILY
    template = "conv/conv2d_wgrad_wgmma.cu.j2"
    options = GemmWgmma.options
    gemm_family = GEMM
    outputs = ("dw",)
    baseline_name = "cuDNN"
    export_dependencies = ("cupy-cuda13x", "cuda-bindings")     # the maps are encoded at each call

    def compile_arch(self, target: Target) -> str:
        return _GEMM.compile_arch(target)

    def implicit_gemm(self, problem: Problem) -> Problem:
        return wgrad_gemm_view(problem)

    def supports(self, problem: Problem, target: Target) -> bool:
        if tuple(target.cc) != (9, 0) or problem["dtype"] not in DTYPES or problem["epilogue"] != "none":
            return False
        g = geometry(problem)
        return (g.c % CHUNK == 0 and (g.k * ITEMSIZE[problem["dtype"]]) % 16 == 0
                and _GEMM.supports(wgrad_gemm_view(problem), target) and not self.im2col_rejects(problem, 0))

    @staticmethod
    def im2col_rejects(problem: Problem, ptr: int) -> list[str]:
        g = geometry(problem)
        return tma.im2col_rejects(ptr, problem["dtype"], (g.n, g.h, g.w, g.c), (g.r, g.s), (g.sh, g.sw),
                                  (g.ph, g.pw), (g.dh, g.dw), CHUNK, CHUNK, SWIZZLE)

    # ---- the front door: its own problems, no routes ------------------------------------------
    def request(self, target: Target, **values) -> tuple[Any, Problem]:
        if values.pop("precision", None) is not None or values.pop("epilogue", "none") not in (None, "none"):
            raise InputError(f"{FAMILY} takes 16-bit inputs and fuses no epilogue",
                             remedy="leave precision and epilogue out")
        sizes = [values.pop(f) for f in SIZES]
        return self, wgrad_problem(*sizes, **{k: v for k, v in values.items() if v is not None})

    def rivals(self, target: Target, **values) -> list[tuple[Any, Problem]]:
        return []

    # ---- what the tuner searches -------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        return _GEMM.space(wgrad_gemm_view(problem), target).renamed("gemm_wgmma_", FAMILY + "_")

    # ---- render and launch ---------------------------------------------------------------------
    def context(self, problem: Problem, config: Config, space: Space) -> dict[str, Any]:
        ctx = _GEMM.context(wgrad_gemm_view(problem), config, space)
        ctx.update(geometry(problem).template_values())
        ctx["entry"] = config.name
        ctx["ROWS_BY_BAND"] = False     # an output TMA cannot store is written from registers
        return ctx

    def launch(self, problem: Problem, config: Config) -> Launch:
        return _GEMM.launch(wgrad_gemm_view(problem), config)

    def _plans(self, problem: Problem, config: Config):
        """(dy's map: dims, row stride, box; x's im2col map's arguments but the pointer; dW's
        output plan) of a launch."""
        g = geometry(problem)
        view = wgrad_gemm_view(problem)
        dy_map = ((g.k, view["k"]), g.k, (CHUNK, CHUNK))
        im2col = ((g.n, g.h, g.w, g.c), (g.r, g.s), (g.sh, g.sw), (g.ph, g.pw), (g.dh, g.dw), CHUNK, CHUNK)
        return dy_map, im2col, _GEMM.output_plan(view, config)

    def arg_recipe(self, problem: Problem, config: Config) -> list[dict]:
        """``args`` as data (``kgen.export_runtime.replay``): the maps encoded from the call's
        pointers at call time, the rest fixed by the problem."""
        g, dtype = geometry(problem), problem["dtype"]
        view = wgrad_gemm_view(problem)
        m, n, k = view["m"], view["n"], view["k"]
        (dims, ld, box), (nhwc, window, stride, padding, dilation, channels, pixels), output = self._plans(problem, config)

        def fixed(value, kind):
            return {"value": value, "type": kind}

        return [
            {"map": {"array": "dy", "dtype": dtype, "dims": list(dims), "row_stride": ld, "box": list(box),
                     "swizzle": SWIZZLE}},
            {"im2col": {"array": "x", "dtype": dtype, "nhwc": list(nhwc), "window": list(window),
                        "stride": list(stride), "padding": list(padding), "dilation": list(dilation),
                        "channels": channels, "pixels": pixels, "swizzle": SWIZZLE}},
            {"map": {"array": "dw", "dtype": problem["out_dtype"], "dims": list(output[0]),
                     "row_stride": row_stride(output[0], n), "box": list(output[1]), "swizzle": output[2]},
             "optional": True} if output else {"empty_map": True},
            {"pointer": "dy"}, {"pointer": "x"}, fixed(g.k, "int64"), fixed(g.c, "int64"), {"pointer": "dw"},
            fixed(0, "uint64"), fixed(m, "int32"), fixed(n, "int32"), fixed(k, "int32"), fixed(n, "int64"),
            fixed(1.0, "float32"), fixed(0.0, "float32"),
            {"map_flag": 2, "type": "int32"} if output else fixed(0, "int32"), *workspace_recipe(view, config)]

    def args(self, problem: Problem, config: Config, ops: Mapping[str, Any]) -> list:
        """The GEMM kernel's arguments: dy's tiled map as A's, the image's im2col map as B's,
        dW's map (TMA stores), the pointers, M, N, K, ldc, alpha, beta, whether dW is stored by
        TMA, and the split-K workspace."""
        g, dtype = geometry(problem), problem["dtype"]
        view = wgrad_gemm_view(problem)
        m, n, k = view["m"], view["n"], view["k"]
        x, dy, dw = (device_pointer(ops[name], name) for name in ("x", "dy", "dw"))
        (dims, ld, box), im2col, _ = self._plans(problem, config)
        map_dy = tma.encode_tiled(dy, dtype, dims, ld * ITEMSIZE[dtype], box, SWIZZLE)
        map_x = tma.encode_im2col(x, dtype, *im2col, SWIZZLE)
        map_dw, dw_by_tma = _GEMM.output_map(view, config, dw, n)
        return [map_dy, map_x, map_dw, np.uint64(dy), np.uint64(x), np.int64(g.k), np.int64(g.c), np.uint64(dw),
                np.uint64(0), np.int32(m), np.int32(n), np.int32(k), np.int64(n), np.float32(1.0),
                np.float32(0.0), dw_by_tma, *workspace_args(view, config, self.template)()]

    # ---- measurement (GPU) ---------------------------------------------------------------------
    def shapes(self, problem: Problem) -> dict[str, tuple[int, ...]]:
        """Every operand's shape: x NHWC, dy NPQK, dW KRSC."""
        g = geometry(problem)
        p, q = g.output
        return {"x": (g.n, g.h, g.w, g.c), "dy": (g.n, p, q, g.k), "dw": (g.k, g.r, g.s, g.c)}

    def inputs(self, problem: Problem, seed: int) -> dict[str, Any]:
        import cupy

        rng = cupy.random.default_rng(seed)
        shapes, dtype, out = self.shapes(problem), problem["dtype"], problem["out_dtype"]
        dw = cupy.empty(shapes["dw"], dtype=cupy.uint16 if out == "bfloat16" else out)
        dw.fill(0xFFFF if out == "bfloat16" else cupy.nan)        # NaN: what the kernel leaves unwritten shows
        return {"x": random_operand(rng, shapes["x"], dtype), "dy": random_operand(rng, shapes["dy"], dtype), "dw": dw}

    def reference(self, problem: Problem, operands: Mapping[str, Any]) -> dict[str, Any]:
        """dW in float64: for each tap (r, s), dy's pixels transposed times the image's pixels
        under that tap (the padded image's strided window)."""
        import cupy

        dtype, g = problem["dtype"], geometry(problem)
        pixels = as_float64(operands["dy"], dtype).reshape(-1, g.k).T
        dw = cupy.empty((g.k, g.r, g.s, g.c), dtype=cupy.float64)
        for r, s, window in tap_windows(problem, as_float64(operands["x"], dtype)):
            dw[:, r, s, :] = pixels @ window.reshape(-1, g.c)
        return {"dw": dw}

    def tolerance(self, problem: Problem) -> float:
        return _GEMM.tolerance(wgrad_gemm_view(problem))

    def check(self, problem: Problem, arrays: Mapping[str, Any], expected: Mapping[str, Any]):
        return compare_output("dw", as_float64(arrays["dw"], problem["out_dtype"]), expected["dw"],
                              self.tolerance(problem))

    def baseline(self, problem: Problem, operands: Mapping[str, Any]):
        """cuDNN's weight gradient through PyTorch (``torch.nn.grad.conv2d_weight`` on the
        channels-last views, cudnn.benchmark on), on CuPy's current stream; None without PyTorch."""
        try:
            import torch
        except ImportError:
            return None
        g, dtype = geometry(problem), problem["dtype"]
        x = torch_view(operands["x"], dtype).permute(0, 3, 1, 2)
        dy = torch_view(operands["dy"], dtype).permute(0, 3, 1, 2)
        shape = (g.k, g.c, g.r, g.s)
        torch.backends.cudnn.benchmark = True
        stream = torch_stream_of_cupy()
        to_float = problem["out_dtype"] != dtype

        def run():
            with torch.cuda.stream(stream):
                dw = torch.nn.grad.conv2d_weight(x, shape, dy, (g.sh, g.sw), (g.ph, g.pw), (g.dh, g.dw))
                return dw.float() if to_float else dw

        return run

    def flops(self, problem: Problem) -> float:
        view = wgrad_gemm_view(problem)
        return 2.0 * view["m"] * view["n"] * view["k"]

    def bytes(self, problem: Problem) -> float:
        shapes, size = self.shapes(problem), ITEMSIZE[problem["dtype"]]
        out = TC_OUTPUTS[problem["out_dtype"]][1]
        return float(size * (math.prod(shapes["x"]) + math.prod(shapes["dy"])) + out * math.prod(shapes["dw"]))
