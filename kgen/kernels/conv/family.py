"""What the conv2d families share beside their kernels: the problem fields a user gives
(``kgen tune conv2d --n 32 --h 56 ...``) and the family a request goes to (``route``), the
operands, the float64 reference and its check, cuDNN as the baseline, FLOPs and bytes.

>>> from kgen.problem import Target
>>> from kgen.registry import get_spec
>>> spec, p = get_spec("conv2d").request(Target.h200(), n=32, h=56, w=56, c=64, k=64, r=3, s=3, padding=1)
>>> spec.family, p.family
('conv2d_wgmma', 'conv2d_wgmma')
>>> get_spec("conv2d").request(Target.h200(), n=2, h=56, w=56, c=3, k=64, r=7, s=7, stride=2, padding=3)[0].family
'conv2d'
>>> get_spec("conv2d").request(Target.h200(), n=2, h=56, w=56, c=64, k=64, r=3, s=3, dtype="float32")[0].family
'conv2d_simt'
"""

from __future__ import annotations

import functools

import math
from typing import Any, Mapping

from kgen.errors import InputError
from kgen.fields import Field
from kgen.kernels.conv.problem import DTYPES, EXACT_FLOAT32, SIZES, conv2d_problem, family_for, gemm_view, geometry
from kgen.kernels.gemm.dtypes import DTYPES as GEMM_DTYPES, EPILOGUES, ITEMSIZE, TC_OUTPUTS, epilogue_parts
from kgen.kernels.gemm.tc import (as_float64, compare_output, epilogue_reference, to_bf16, to_tf32, tolerance,
                                  torch_stream_of_cupy, torch_view)
from kgen.problem import Problem, Target
from kgen.spec import Check

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
    Field("precision", str, "tf32: float32 on the tensor cores (else float32 is exact, on the CUDA cores)", None,
          ("tf32",)),
    Field("out_dtype", str, "the output's dtype (float32 allowed for half inputs)", None),
    Field("epilogue", str, "fused tail", "none", EPILOGUES),
)


# the families that run a conv2d request on the tensor cores, most preferred first (``route``)
ROUTES = ("conv2d_wgmma", "conv2d")
# the families that run an exact float32 one: the implicit GEMM, and Winograd where its window allows
EXACT_ROUTES = (EXACT_FLOAT32, "conv2d_winograd")


@functools.lru_cache(maxsize=1024)
def route(target: Target, problem: Problem) -> tuple[tuple[Any, Problem], ...]:
    """(spec, problem) of every family that can run the conv2d ``problem`` on ``target``, most
    preferred first: for a tensor-core problem, wgmma with TMA im2col loads where it applies
    (Hopper, 16-bit, C a multiple of the k-block), mma.sync everywhere; an exact float32 one
    (``family_for``) only on the CUDA cores: the implicit GEMM, and Winograd's F(2x2, 3x3) for
    a 3x3 window at stride 1. Remembered: a call asks for it each time, and the answer depends
    on nothing else."""
    from kgen.registry import get_spec

    found, g = [], geometry(problem)
    for family in (EXACT_ROUTES if problem.family == EXACT_FLOAT32 else ROUTES):
        spec = get_spec(family)
        candidate = conv2d_problem(g.n, g.h, g.w, g.c, g.k, g.r, g.s, stride=(g.sh, g.sw), padding=(g.ph, g.pw),
                                   dilation=(g.dh, g.dw), dtype=problem["dtype"], out_dtype=problem["out_dtype"],
                                   epilogue=problem["epilogue"], family=family)
        if spec.supports(candidate, target):
            found.append((spec, candidate))
    return tuple(found)


def random_operand(rng, shape, dtype: str):
    """A CuPy array of ``shape`` drawn uniformly from [-1, 1) by ``rng`` (bfloat16 as its uint16
    bits): never zero, as the checks of the conv families want their inputs."""
    import cupy

    values = rng.random(shape, dtype=cupy.float32) * 2 - 1
    return to_bf16(values) if dtype == "bfloat16" else values.astype(dtype)


def tap_windows(problem: Problem, x):
    """(r, s, window) for each filter tap: the pixels of the float64 NHWC image ``x``, zero-padded,
    that tap reads for every output pixel, an (N, P, Q, C) strided view."""
    import cupy

    g = geometry(problem)
    p, q = g.output
    padded = cupy.zeros((g.n, g.h + 2 * g.ph, g.w + 2 * g.pw, g.c), dtype=cupy.float64)
    padded[:, g.ph:g.ph + g.h, g.pw:g.pw + g.w, :] = x
    for r in range(g.r):
        for s in range(g.s):
            yield r, s, padded[:, r * g.dh: r * g.dh + (p - 1) * g.sh + 1: g.sh,
                               s * g.dw: s * g.dw + (q - 1) * g.sw + 1: g.sw, :]


class ConvFamily:
    """A mixin of the conv2d specs (listed before their kernel base). A spec names the GEMM family
    whose kernel it extends (``gemm_family``) and the values its configs fix (``fixed``); the
    untuned picks are that GEMM family's on the implicit GEMM (``problem.gemm_view``)."""

    shape_params = SIZES          # sizes (>= 1); stride, padding and dilation are the problem's other fields
    outputs = ("y",)
    problem_fields = FIELDS
    baseline_name = "cuDNN"
    gemm_family = ""
    fixed: dict[str, Any] = {}
    tf32_rounding: str | None = None    # how a float32 problem's operands reach the tensor cores (None: exact)

    # ---- untuned picks: the GEMM's on the implicit GEMM -----------------------------------------
    def gemm_spec(self):
        from kgen.registry import get_spec

        return get_spec(self.gemm_family)

    def implicit_gemm(self, problem: Problem) -> Problem:
        """The implicit GEMM as a problem of ``gemm_family`` (``problem.gemm_view``)."""
        return gemm_view(problem, self.gemm_family)

    def _as_conv(self, space, config):
        """A config of the implicit GEMM's family as this space's (``fixed`` values set), if valid."""
        if config is None:
            return None
        values = dict(config.as_dict(), **self.fixed)
        return space.make(values) if space.is_valid(values) else None

    def model_choice(self, problem: Problem, target: Target):
        """The GEMM cost model's pick for the implicit GEMM (its prediction knows no gather)."""
        from kgen.kernels.gemm import cost as gemm_cost

        picked = gemm_cost.pick(self.gemm_spec(), self.implicit_gemm(problem), target)
        conv = self._as_conv(self.space(problem, target), picked[0]) if picked is not None else None
        return (conv, picked[1]) if conv is not None else None

    def model_version(self) -> str | None:
        from kgen.kernels.gemm import cost as gemm_cost

        return gemm_cost.model_version() if gemm_cost.has_model(self.gemm_family) else None

    def model_picks(self, problem: Problem, target: Target, count: int) -> list:
        """The cost model's pick, then the GEMM family's own picks, as this family's configs."""
        space, picks = self.space(problem, target), []
        chosen = self.model_choice(problem, target)
        gemm = self.gemm_spec().model_picks(self.implicit_gemm(problem), target, count)
        for config in ([chosen[0]] if chosen else []) + gemm:
            conv = self._as_conv(space, config)
            if conv is not None and conv not in picks:
                picks.append(conv)
        return (picks or [self.first_valid(space, (), problem)])[:count]

    def default_config(self, problem: Problem, target: Target):
        return self.model_picks(problem, target, 1)[0]

    # ---- the front door ----------------------------------------------------------------------
    def _routes(self, target: Target, values: dict) -> tuple[tuple[Any, Problem], ...]:
        """``route`` of the problem a user's field values make (its family from dtype and precision)."""
        family = family_for(values.get("dtype", "bfloat16"), values.pop("precision", None))
        sizes = [values.pop(f) for f in SIZES]
        return route(target, conv2d_problem(*sizes, **values, family=family))

    def request(self, target: Target, **values) -> tuple[Any, Problem]:
        return self._routes(target, values)[0]

    def rivals(self, target: Target, **values) -> list[tuple[Any, Problem]]:
        """The request's other families (``route`` after its first): a tune of the request
        measures their first configs too, so that dispatch compares measured times."""
        return list(self._routes(target, values)[1:])

    def vendor_supported(self, problem: Problem) -> bool:
        """No vendor candidate yet: cuDNN is the baseline a tune reports, not a config it stores."""
        return False

    def problem_from_operands(self, operands: Mapping[str, Any]) -> tuple[Problem, int]:
        raise InputError("a conv2d problem has a stride, padding and dilation, which the arrays do not give",
                         remedy="call kgen.conv2d(x, w, stride=..., padding=...)")

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
        y = cupy.empty(shapes["y"], dtype=cupy.uint16 if out == "bfloat16" else out)
        y.fill(0xFFFF if out == "bfloat16" else cupy.nan)
        has_bias, _ = epilogue_parts(problem)
        return {"x": random_operand(rng, shapes["x"], dtype), "w": random_operand(rng, shapes["w"], dtype), "y": y,
                "bias": random_operand(rng, shapes["bias"], out) if has_bias else None}

    def reference(self, problem: Problem, operands: Mapping[str, Any]) -> dict[str, Any]:
        """The convolution in float64: for each (r, s), the strided window of the padded image
        times that tap's weights."""
        import cupy

        dtype = problem["dtype"]
        x, w = operands["x"], operands["w"]
        if dtype == "float32" and self.tf32_rounding is not None:
            x, w = to_tf32(x, self.tf32_rounding), to_tf32(w, self.tf32_rounding)
        w = as_float64(w, dtype)
        g = geometry(problem)
        p, q = g.output
        y = cupy.zeros((g.n, p, q, g.k), dtype=cupy.float64)
        for r, s, window in tap_windows(problem, as_float64(x, dtype)):
            y += window @ w[:, r, s, :].T
        return {"y": epilogue_reference(problem, y, operands.get("bias"))}

    def tolerance(self, problem: Problem) -> float:
        if problem["dtype"] == "float32" and self.tf32_rounding is None:
            return GEMM_DTYPES["float32"][5]           # exact float32, as the CUDA-core GEMM's
        return tolerance(problem)

    def check(self, problem: Problem, arrays: Mapping[str, Any], expected: Mapping[str, Any]) -> Check:
        return compare_output("y", as_float64(arrays["y"], problem["out_dtype"]), expected["y"],
                              self.tolerance(problem))

    def baseline(self, problem: Problem, operands: Mapping[str, Any]):
        """cuDNN through PyTorch (``cudnn_baseline``; float32 as tf32 where kgen reads it so)."""
        return cudnn_baseline(problem, operands, lambda w: w.permute(0, 3, 1, 2),
                              tf32=problem["dtype"] == "float32" and self.tf32_rounding is not None)

    def flops(self, problem: Problem) -> float:
        m, n, k = geometry(problem).gemm
        return 2.0 * m * n * k

    def bytes(self, problem: Problem) -> float:
        shapes, size = self.shapes(problem), ITEMSIZE[problem["dtype"]]
        out = TC_OUTPUTS[problem["out_dtype"]][1]
        return float(size * (math.prod(shapes["x"]) + math.prod(shapes["w"])) + out * math.prod(shapes["y"]))


def cudnn_baseline(problem: Problem, operands: Mapping[str, Any], weight, groups: int = 1, tf32: bool = False):
    """A function running a conv2d ``problem`` with cuDNN through PyTorch on ``operands``'
    memory (x channels-last, ``weight(w)`` PyTorch's view of w, ``groups``; cudnn.benchmark on,
    TF32 as ``tf32`` says), the bias in the call and the activation after it, on CuPy's current
    stream; None without PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    dtype, out = problem["dtype"], problem["out_dtype"]
    g = geometry(problem)
    x = torch_view(operands["x"], dtype).permute(0, 3, 1, 2)
    w = weight(torch_view(operands["w"], dtype))
    bias = torch_view(operands["bias"], out) if operands.get("bias") is not None else None
    _, act = epilogue_parts(problem)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = tf32
    stream = torch_stream_of_cupy()
    conv = torch.nn.functional.conv2d

    def run():
        with torch.cuda.stream(stream):
            y = conv(x, w, bias, (g.sh, g.sw), (g.ph, g.pw), (g.dh, g.dw), groups)
            if out != dtype:
                y = y.float()
            if act == "relu":
                torch.relu_(y)
            elif act == "gelu":
                y = torch.nn.functional.gelu(y)
            return y

    return run
