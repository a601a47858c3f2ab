"""Depthwise conv2d (groups = channels, one filter a channel): a family of its own, bound by
memory rather than by the tensor cores.

``y = act(depthwise(x, w) + bias)`` with x NHWC, w (C, R, S) (PyTorch's (C, 1, R, S), KRSC of
one input channel a filter), y NPQC; bfloat16, float16 and float32 (float32 exact, on the CUDA
cores), float accumulation. The problem is a conv2d problem of this family with K = C
(``depthwise_problem``). The kernel (``templates/conv/depthwise.cu.j2``) gives each thread VEC
channels of QT consecutive output columns and reuses each loaded input pixel across the taps
that read it; its knobs are the vector width, the columns a thread, the threads across the
channels and the block size. Its floor is the bytes moved (x, w and y once) over the copy rate.

>>> p = depthwise_problem(64, 56, 56, 144, 3, 3, stride=2, padding=1, dtype="bfloat16")
>>> p.key
'conv2d_depthwise|c=144|dh=1|dtype=bfloat16|dw=1|epilogue=none|h=56|k=144|n=64|out_dtype=bfloat16|ph=1|pw=1|r=3|s=3|sh=2|sw=2|w=56'
>>> DepthwiseConv2d().default_config(p, Target.h200()).name
'conv2d_depthwise_bf16_v4_q1_t8_b256'
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from kgen.errors import InputError
from kgen.fields import Field
from kgen.intmath import pow2_at_least
from kgen.kernels.conv.family import FIELDS as CONV_FIELDS
from kgen.kernels.conv.family import cudnn_baseline
from kgen.kernels.conv.problem import DTYPES, conv2d_problem, geometry
from kgen.kernels.gemm.dtypes import ITEMSIZE, epilogue_parts
from kgen.kernels.memory.elements import ELEMENTS, vector_widths
from kgen.kernels.memory.family import element_context
from kgen.problem import Problem, Target
from kgen.space import Config, Constraint, Param, Space
from kgen.spec import Check, KernelSpec, Launch

FAMILY = "conv2d_depthwise"
SMEM_BYTES = 48 * 1024          # the block's weights (float), static shared memory
REGISTER_BUDGET = 160           # a thread's loaded pixels and sums, in 32-bit registers (``registers``): the
                                # compiler keeps about twice as many (every window row's loads in flight; at
                                # 3x3, bf16, 8 channels a thread, 1-8 columns took 60, 79, 115 and 176)
SHORT = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}

# conv2d's fields with one filter a channel (no K) and float32 exact (no precision)
FIELDS = tuple({"c": Field("c", int, "channels (one filter each)"),
                "dtype": Field("dtype", str, "input dtype (float32 exact, on the CUDA cores)", "bfloat16", DTYPES)}
               .get(f.name, f) for f in CONV_FIELDS if f.name not in ("k", "precision"))


def depthwise_problem(n: int, h: int, w: int, c: int, r: int, s: int, *, stride=1, padding=0, dilation=1,
                      dtype: str = "bfloat16", out_dtype: str | None = None, epilogue: str = "none") -> Problem:
    """The depthwise problem of an NHWC image of ``c`` channels and ``c`` R x S filters (checked)."""
    return conv2d_problem(n, h, w, c, c, r, s, stride=stride, padding=padding, dilation=dilation, dtype=dtype,
                          out_dtype=out_dtype, epilogue=epilogue, family=FAMILY)


def span(config: Mapping[str, int], problem: Problem) -> int:
    """Input columns a thread's QT output columns read, per window row."""
    g = geometry(problem)
    return (config["QT"] - 1) * g.sw + (g.s - 1) * g.dw + 1


def registers(config: Mapping[str, int], problem: Problem) -> float:
    """A thread's 32-bit registers for its loaded pixels (SPAN vectors) and its float sums."""
    size = ITEMSIZE[problem["dtype"]]
    return span(config, problem) * config["VEC"] * size / 4 + config["QT"] * config["VEC"]


class DepthwiseConv2d(KernelSpec):
    family = FAMILY
    template = "conv/depthwise.cu.j2"
    shape_params = ("n", "h", "w", "c", "r", "s")
    outputs = ("y",)
    problem_fields = FIELDS
    baseline_name = "cuDNN"

    def problem(self, n: int, h: int, w: int, c: int, r: int = 3, s: int = 3, **kw) -> Problem:
        return depthwise_problem(n, h, w, c, r, s, **kw)

    def request(self, target: Target, **values) -> tuple[Any, Problem]:
        sizes = [values.pop(f) for f in ("n", "h", "w", "c", "r", "s")]
        return self, depthwise_problem(*sizes, **{k: v for k, v in values.items() if v is not None})

    def supports(self, problem: Problem, target: Target) -> bool:
        return problem["k"] == problem["c"] and target.cc >= (7, 0)

    def problem_from_operands(self, operands: Mapping[str, Any]) -> tuple[Problem, int]:
        raise InputError("a depthwise problem has a stride, padding and dilation, which the arrays do not give",
                         remedy="call kgen.conv2d(x, w, groups=C, stride=..., padding=...)")

    # ---- what the tuner searches ---------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        g = geometry(problem)
        p, q = g.output
        dtype = problem["dtype"]
        widths = tuple(v for v in vector_widths(dtype, problem["out_dtype"]) if g.c % v == 0)
        params = [
            Param("VEC", widths),
            Param("QT", (1, 2, 4, 8)),
            Param("TC", (1, 2, 4, 8, 16, 32)),
            Param("THREADS", (64, 128, 256, 512), default=256),
        ]
        constraints = [
            Constraint("a thread's columns fit the output row", lambda v: v["QT"] <= pow2_at_least(q), ("QT",)),
            Constraint("the block's channels fit the image's", lambda v: v["TC"] * v["VEC"] <= max(
                v["VEC"], pow2_at_least(g.c)), ("TC", "VEC")),
            Constraint("whole rows of threads across the channels", lambda v: v["THREADS"] % v["TC"] == 0,
                       ("TC", "THREADS")),
            Constraint("the block's weights fit shared memory",
                       lambda v: g.r * g.s * v["TC"] * v["VEC"] * 4 <= SMEM_BYTES, ("TC", "VEC")),
            Constraint("loaded pixels and sums fit the registers",
                       lambda v: registers(v, problem) <= REGISTER_BUDGET, ("VEC", "QT")),
        ]
        short = SHORT[dtype]

        def namer(v):
            return f"{FAMILY}_{short}_v{v['VEC']}_q{v['QT']}_t{v['TC']}_b{v['THREADS']}"

        return Space(params, constraints, {"TP": lambda v: v["THREADS"] // v["TC"]}, namer)

    def default_config(self, problem: Problem, target: Target) -> Config:
        """At stride 1, the widest vector and 8 columns a thread (4 for windows wider than 5);
        at larger strides, vectors of at most 4 elements and one column a thread; the channels
        across the most threads (of 16, 8, 4, 2, 1, 32) whose channel slices leave at most an
        eighth of their lanes past C (else the fewest); blocks of 256. The tune of bench_conv's
        16 depthwise layers on an H100 (10 trials each) took 8 columns a thread on 6 of the 8
        bf16 layers of stride 1 (1.25-2.3x faster than the first default's 1 or 2 columns; 2
        and 4 on the other two) and 1 column with 4-element vectors on 3 of the 5 of stride 2
        (8 columns there keep up to 255 registers and spill at 3x3); its 144-channel layer,
        whose slices of 128 or 256 channels leave 44 % of the lanes idle, ran at 0.85 TB/s
        against 1.3-2.2 elsewhere."""
        space = self.space(problem, target)
        g = geometry(problem)
        widths = space.params[0].choices
        vec, columns = (max(widths), 8 if g.s <= 5 else 4) if g.sw == 1 else (max(v for v in widths if v <= 4), 1)

        def waste(tc: int) -> float:
            lanes = tc * vec
            return (-(-g.c // lanes) * lanes - g.c) / g.c

        across = (16, 8, 4, 2, 1, 32)
        good = [tc for tc in across if waste(tc) <= 1 / 8] or sorted(across, key=waste)
        candidates = [dict(VEC=vec, QT=qt, TC=tc, THREADS=256) for qt in (columns, 4, 2, 1) if qt <= columns
                      for tc in good]
        return self.first_valid(space, candidates, problem)

    def model_picks(self, problem: Problem, target: Target, count: int) -> list[Config]:
        """The default, then its neighbours: two or eight columns a thread, blocks of 128 or 512."""
        space, first = self.space(problem, target), self.default_config(problem, target)
        picks = [first]
        for change in ({"QT": 2}, {"QT": 8}, {"THREADS": 128}, {"THREADS": 512}, {"TC": first["TC"] * 2}):
            values = dict(first.as_dict(), **change)
            if space.is_valid(values) and space.make(values) not in picks:
                picks.append(space.make(values))
        return picks[:count]

    # ---- render and launch ---------------------------------------------------------------------
    def context(self, problem: Problem, config: Config, space: Space) -> dict[str, Any]:
        ctx = super().context(problem, config, space)
        has_bias, act = epilogue_parts(problem)
        ctx.update(geometry(problem).template_values(), has_bias=has_bias, activation=act,
                   **element_context("in", problem["dtype"]), **element_context("out", problem["out_dtype"]))
        return ctx

    def launch(self, problem: Problem, config: Config) -> Launch:
        g = geometry(problem)
        p, q = g.output
        positions = g.n * p * -(-q // config["QT"])
        tp = config["THREADS"] // config["TC"]
        return Launch((-(-positions // tp), -(-g.c // (config["TC"] * config["VEC"])), 1), (config["THREADS"], 1, 1))

    def args(self, problem: Problem, config: Config, ops: Mapping[str, Any]) -> list:
        """x, w, y and bias (0: none), and the batch (the one size not compiled in)."""
        has_bias, _ = epilogue_parts(problem)
        return [ops["x"], ops["w"], ops["y"], ops["bias"] if has_bias else np.uint64(0), np.int32(problem["n"])]

    # ---- measurement (GPU) ---------------------------------------------------------------------
    def shapes(self, problem: Problem) -> dict[str, tuple[int, ...]]:
        """Every operand's shape: x NHWC, w (C, R, S), y NPQC, bias C."""
        g = geometry(problem)
        p, q = g.output
        return {"x": (g.n, g.h, g.w, g.c), "w": (g.c, g.r, g.s), "y": (g.n, p, q, g.c), "bias": (g.c,)}

    def inputs(self, problem: Problem, seed: int) -> dict[str, Any]:
        from kgen.kernels.memory.family import poisoned, random_array

        shapes, dtype, out = self.shapes(problem), problem["dtype"], problem["out_dtype"]
        has_bias, _ = epilogue_parts(problem)
        return {"x": random_array(shapes["x"], dtype, seed), "w": random_array(shapes["w"], dtype, seed + 1),
                "y": poisoned(shapes["y"], out),
                "bias": random_array(shapes["bias"], out, seed + 2) if has_bias else None}

    def reference(self, problem: Problem, operands: Mapping[str, Any]) -> dict[str, Any]:
        """The depthwise convolution in float64: each tap's strided window times its weights."""
        import cupy

        from kgen.kernels.gemm.tc import as_float64, epilogue_reference

        g = geometry(problem)
        p, q = g.output
        x, w = as_float64(operands["x"], problem["dtype"]), as_float64(operands["w"], problem["dtype"])
        padded = cupy.zeros((g.n, g.h + 2 * g.ph, g.w + 2 * g.pw, g.c), dtype=cupy.float64)
        padded[:, g.ph:g.ph + g.h, g.pw:g.pw + g.w, :] = x
        y = cupy.zeros((g.n, p, q, g.c), dtype=cupy.float64)
        for r in range(g.r):
            for s in range(g.s):
                y += padded[:, r * g.dh: r * g.dh + (p - 1) * g.sh + 1: g.sh,
                            s * g.dw: s * g.dw + (q - 1) * g.sw + 1: g.sw, :] * w[:, r, s]
        return {"y": epilogue_reference(problem, y, operands.get("bias"))}

    def tolerance(self, problem: Problem) -> float:
        """The output dtype's rounding, plus float sums over the window (R * S terms)."""
        g = geometry(problem)
        return ELEMENTS[problem["out_dtype"]].tolerance + 4 * g.r * g.s * 2.0 ** -24

    def check(self, problem: Problem, arrays: Mapping[str, Any], expected: Mapping[str, Any]) -> Check:
        from kgen.kernels.gemm.tc import as_float64, compare_output

        return compare_output("y", as_float64(arrays["y"], problem["out_dtype"]), expected["y"],
                              self.tolerance(problem))

    def baseline(self, problem: Problem, operands: Mapping[str, Any]):
        """cuDNN through PyTorch (``conv2d`` with groups = C, the weight viewed as (C, 1, R, S),
        TF32 off: kgen's float32 is exact)."""
        return cudnn_baseline(problem, operands, lambda w: w.unsqueeze(1), groups=problem["c"])

    def flops(self, problem: Problem) -> float:
        g = geometry(problem)
        p, q = g.output
        return 2.0 * g.n * p * q * g.c * g.r * g.s

    def bytes(self, problem: Problem) -> float:
        """x, w and y once each (the floor: a window's rows are read again from the caches)."""
        shapes = self.shapes(problem)
        size, out = ITEMSIZE[problem["dtype"]], ITEMSIZE[problem["out_dtype"]]
        return float(size * (math.prod(shapes["x"]) + math.prod(shapes["w"])) + out * math.prod(shapes["y"]))
