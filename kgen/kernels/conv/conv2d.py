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

import math
from typing import Any, Mapping

import numpy as np

from kgen.errors import InputError
from kgen.fields import Field
from kgen.kernels.conv.problem import (DTYPES, FAMILY, PAIRS, SIZES, check_precision, conv2d_problem, gemm_view,
                                      geometry)
from kgen.kernels.gemm import cost as gemm_cost
from kgen.kernels.gemm.dtypes import EPILOGUES, ITEMSIZE, TC_OUTPUTS, epilogue_parts
from kgen.kernels.gemm.mma import GemmMma
from kgen.kernels.gemm.tc import (as_float64, compare_output, cupy_stream_ptr, to_bf16, to_tf32, tolerance, torch_view,
                                  type_context)
from kgen.problem import Problem, Target
from kgen.space import Config, Constraint, Param, Space
from kgen.spec import Check, KernelSpec, Launch

FIELDS = (
    Field("n", int, "images in the batch"),
    Field("h", int, "image height"),
    Field("w", int, "image width"),
    Field("c", int, "input channels"),
    Field("k", int, "output channels"),
    Field("r", int, "window height", 3),
    Field("s", int, "window width", 3),
    Field("stride", int, "stride (both axes)", 1),
    Field("padding", int, "zero padding (both axes)", 0),
    Field("dilation", int, "dilation (both axes)", 1),
    Field("dtype", str, "input dtype", "bfloat16", DTYPES),
    Field("precision", str, "tf32: float32 on the tensor cores (float32 needs it)", None, ("tf32",)),
    Field("out_dtype", str, "the output's dtype (float32 allowed for half inputs)", None),
    Field("epilogue", str, "fused tail", "none", EPILOGUES),
)

_MMA = GemmMma()
_PLANNED = 1          # conv copies are always planned once (the GEMM's LP=1): the im2col plan is one


class Conv2d(KernelSpec):
    family = FAMILY
    template = "conv/conv2d_mma.cu.j2"
    shape_params = SIZES + PAIRS
    outputs = ("y",)
    options = ("--std=c++17",)
    problem_fields = FIELDS
    baseline_name = "cuDNN"
    tf32_rounding = "nearest"        # as the GEMM's tf32 operands (cvt.rna.tf32.f32)

    # ---- the front door ----------------------------------------------------------------------
    def request(self, target: Target, **values) -> tuple["Conv2d", Problem]:
        check_precision(values.get("dtype", "bfloat16"), values.pop("precision", None))
        sizes = [values.pop(f) for f in SIZES]
        return self, conv2d_problem(*sizes, **values)

    def problem_from_operands(self, operands: Mapping[str, Any]) -> tuple[Problem, int]:
        raise InputError("a conv2d problem has a stride, padding and dilation, which the arrays do not give",
                         remedy="call kgen.conv2d(x, w, stride=..., padding=...)")

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
        prefix = len("gemm_mma_")

        def namer(v) -> str:
            return "conv2d_" + gemm.namer(v)[prefix:]

        return Space(params, constraints, gemm.derived, namer)

    def _as_conv(self, space: Space, config: Config | None) -> Config | None:
        """A gemm_mma config of the implicit GEMM as this space's (copies planned), if valid."""
        if config is None:
            return None
        values = dict(config.as_dict(), LP=_PLANNED)
        return space.make(values) if space.is_valid(values) else None

    def default_config(self, problem: Problem, target: Target) -> Config:
        space = self.space(problem, target)
        return self._as_conv(space, _MMA.default_config(gemm_view(problem), target)) \
            or self.first_valid(space, (), problem)

    def model_picks(self, problem: Problem, target: Target, count: int) -> list[Config]:
        space, picks = self.space(problem, target), []
        chosen = self.model_choice(problem, target)
        for config in ([chosen[0]] if chosen else []) + _MMA.model_picks(gemm_view(problem), target, count):
            conv = self._as_conv(space, config)
            if conv is not None and conv not in picks:
                picks.append(conv)
        return (picks or [self.first_valid(space, (), problem)])[:count]

    def model_choice(self, problem: Problem, target: Target) -> tuple[Config, float] | None:
        """The GEMM cost model's pick for the implicit GEMM (its prediction ignores the gather)."""
        picked = gemm_cost.pick(_MMA, gemm_view(problem), target)
        if picked is None:
            return None
        conv = self._as_conv(self.space(problem, target), picked[0])
        return (conv, picked[1]) if conv is not None else None

    def model_version(self) -> str | None:
        return gemm_cost.model_version() if gemm_cost.has_model(_MMA.family) else None

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

    # ---- measurement (GPU) ---------------------------------------------------------------------
    def shapes(self, problem: Problem) -> dict[str, tuple[int, ...]]:
        """Every operand's shape: x NHWC, w KRSC, y NPQK, bias K."""
        g = geometry(problem)
        p, q = g.output
        return {"x": (g.n, g.h, g.w, g.c), "w": (g.k, g.r, g.s, g.c), "y": (g.n, p, q, g.k), "bias": (g.k,)}

    def inputs(self, problem: Problem, seed: int) -> dict[str, Any]:
        import cupy

        rng = cupy.random.default_rng(seed)
        shapes, dtype, out = self.shapes(problem), problem["dtype"], problem["out_dtype"]

        def values(shape, dt):
            x = rng.random(shape, dtype=cupy.float32) * 2 - 1
            return to_bf16(x) if dt == "bfloat16" else x.astype(dt)

        y = cupy.empty(shapes["y"], dtype=cupy.uint16 if out == "bfloat16" else out)
        y.fill(0xFFFF if out == "bfloat16" else cupy.nan)
        has_bias, _ = epilogue_parts(problem)
        return {"x": values(shapes["x"], dtype), "w": values(shapes["w"], dtype), "y": y,
                "bias": values(shapes["bias"], out) if has_bias else None}

    def reference(self, problem: Problem, operands: Mapping[str, Any]) -> dict[str, Any]:
        """The convolution in float64: for each (r, s), the strided window of the padded image
        times that tap's weights."""
        import cupy

        dtype = problem["dtype"]
        x, w = operands["x"], operands["w"]
        if dtype == "float32":
            x, w = to_tf32(x, self.tf32_rounding), to_tf32(w, self.tf32_rounding)
        x, w = as_float64(x, dtype), as_float64(w, dtype)
        g = geometry(problem)
        p, q = g.output
        padded = cupy.zeros((g.n, g.h + 2 * g.ph, g.w + 2 * g.pw, g.c), dtype=cupy.float64)
        padded[:, g.ph:g.ph + g.h, g.pw:g.pw + g.w, :] = x
        y = cupy.zeros((g.n, p, q, g.k), dtype=cupy.float64)
        for r in range(g.r):
            for s in range(g.s):
                window = padded[:, r * g.dh: r * g.dh + (p - 1) * g.sh + 1: g.sh,
                                s * g.dw: s * g.dw + (q - 1) * g.sw + 1: g.sw, :]
                y += window @ w[:, r, s, :].T
        has_bias, act = epilogue_parts(problem)
        if has_bias:
            y += as_float64(operands["bias"], problem["out_dtype"])
        if act == "relu":
            y = y.clip(0.0, None)
        elif act == "gelu":
            from cupyx.scipy.special import erf

            y = 0.5 * y * (1.0 + erf(y / math.sqrt(2.0)))
        return {"y": y}

    def tolerance(self, problem: Problem) -> float:
        return tolerance(problem)

    def check(self, problem: Problem, arrays: Mapping[str, Any], expected: Mapping[str, Any]) -> Check:
        return compare_output("y", as_float64(arrays["y"], problem["out_dtype"]), expected["y"],
                              self.tolerance(problem))

    def baseline(self, problem: Problem, operands: Mapping[str, Any]):
        """cuDNN through PyTorch (channels-last tensors over the same memory, cudnn.benchmark on),
        bias in the call and the activation after it; None without PyTorch."""
        try:
            import torch
        except ImportError:
            return None
        dtype, out = problem["dtype"], problem["out_dtype"]
        g = geometry(problem)
        x = torch_view(operands["x"], dtype).permute(0, 3, 1, 2)
        w = torch_view(operands["w"], dtype).permute(0, 3, 1, 2)
        bias = torch_view(operands["bias"], out) if operands.get("bias") is not None else None
        _, act = epilogue_parts(problem)
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = dtype == "float32"
        stream = torch.cuda.ExternalStream(cupy_stream_ptr())
        conv = torch.nn.functional.conv2d

        def run():
            with torch.cuda.stream(stream):
                y = conv(x, w, bias, (g.sh, g.sw), (g.ph, g.pw), (g.dh, g.dw))
                if out != dtype:
                    y = y.float()
                if act == "relu":
                    torch.relu_(y)
                elif act == "gelu":
                    y = torch.nn.functional.gelu(y)
                return y

        return run

    def flops(self, problem: Problem) -> float:
        m, n, k = geometry(problem).gemm
        return 2.0 * m * n * k

    def bytes(self, problem: Problem) -> float:
        shapes, size = self.shapes(problem), ITEMSIZE[problem["dtype"]]
        out = TC_OUTPUTS[problem["out_dtype"]][1]
        return float(size * (math.prod(shapes["x"]) + math.prod(shapes["w"])) + out * math.prod(shapes["y"]))
