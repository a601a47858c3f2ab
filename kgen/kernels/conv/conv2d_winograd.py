"""conv2d forward of 3x3 windows at stride 1 in exact float32 by Winograd's F(2x2, 3x3), on the
CUDA cores: 16 multiplications per 2x2 outputs, channel and filter where the implicit GEMM
(``conv2d_simt``) takes 36.

``y = act(conv2d(x, w) + bias)``, x NHWC, w KRSC, y NPQK, float32 in, out and throughout (the
transforms add, subtract and halve; no tf32). One fused kernel
(``templates/conv/conv2d_winograd.cu.j2``) transforms each step's input patches and filters in
shared memory, runs the 16 element-wise products as one GEMM over the channels, and
transforms its sums back into outputs; no workspace. The family takes the exact float32 problems
``conv2d_simt`` takes whose window is 3x3 at stride 1 and dilation 1 (any padding); ``route``
offers both, and a first call's race or a tune's measurements decide.

Space: BM output tiles (2x2 each) by BN output channels a block, BC channels a step; a thread
owns XG of the 16 products and a TM x TN (tile, channel) tile of each, contiguous or (IL) in
chunks of 4 spread across the block (conflict-free vector loads of V and U). Its floor is the GEMM's:
16 x T x K x C multiply-adds (T = N * ceil(P/2) * ceil(Q/2) tiles), 2.25x fewer than the direct
convolution's at even P and Q.

>>> from kgen.kernels.conv.problem import conv2d_problem
>>> spec, target = Conv2dWinograd(), Target.h200()
>>> p = conv2d_problem(8, 28, 28, 64, 64, 3, 3, padding=1, dtype="float32", family="conv2d_winograd")
>>> spec.supports(p, target), spec.default_config(p, target).name
(True, 'conv2d_winograd_m32_n64_c8_x2_t8x8_il')
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from kgen.intmath import pow2_at_least
from kgen.kernels.conv.family import ConvFamily
from kgen.kernels.conv.problem import alignment, geometry
from kgen.kernels.gemm.dtypes import epilogue_parts
from kgen.problem import Problem, Target
from kgen.space import Config, Constraint, Param, Space
from kgen.spec import KernelSpec, Launch

FAMILY = "conv2d_winograd"
MAX_SUMS = 128              # a thread's XG * TM * TN sums (registers; the transforms need ~40 more)
OTHER_REGISTERS = 40        # a thread's registers besides its sums (addresses, a row of V and U, a transform)
REGISTER_FILE = 65536       # 32-bit registers of an SM: one block's threads must fit it
TILE_TABLE_BYTES = 24       # static shared memory a tile: its patch corner and output offsets, corner row, column


def tiles(problem: Problem) -> int:
    """The GEMM's rows: 2x2 output tiles over every image."""
    g = geometry(problem)
    p, q = g.output
    return g.n * -(-p // 2) * -(-q // 2)


def threads(v: Mapping[str, int]) -> int:
    return (16 // v["XG"]) * (v["BM"] // v["TM"]) * (v["BN"] // v["TN"])


def strides(v: Mapping[str, int]) -> dict[str, int]:
    """The shared-memory row strides (floats) of the kernel's buffers: a tile's raw patch (16
    pixels x BC channels, XRS), a channel's raw filter (9 taps x BC, WRS), a row of V (BM
    tiles, BMP) and of U (BN channels, BNP). Each is padded to 16 bytes times an odd number
    (raw rows) or by 8 floats (V, U), so that the transforms' warps (8 consecutive tiles or
    channels by 4 input channels) read and write 32 distinct banks."""
    def odd_quads(floats: int) -> int:
        return floats + (4 if (floats // 4) % 2 == 0 else 0)

    return {"XRS": odd_quads(16 * v["BC"]), "WRS": odd_quads(9 * v["BC"]), "BMP": v["BM"] + 8, "BNP": v["BN"] + 8}


def smem_floats(v: Mapping[str, int]) -> int:
    """The main loop's shared memory (floats): two raw buffers, then V and U."""
    s = strides(v)
    return 2 * (v["BM"] * s["XRS"] + v["BN"] * s["WRS"]) + 16 * v["BC"] * (s["BMP"] + s["BNP"])


def epilogue_width(v: Mapping[str, int]) -> int:
    """Output channels a pass of the epilogue: the widest slab of BN whose 16 sums per
    (tile, channel) fit the main loop's shared memory (0: not even one thread column's)."""
    width = v["BN"]
    while width >= v["TN"]:
        if 16 * v["BM"] * width <= smem_floats(v):
            return width
        width //= 2
    return 0


class Conv2dWinograd(ConvFamily, KernelSpec):
    family = FAMILY
    template = "conv/conv2d_winograd.cu.j2"

    def supports(self, problem: Problem, target: Target) -> bool:
        """Exact float32 (no precision), 3x3 at stride 1, dilation 1, on sm_80 and later (cp.async)."""
        g = geometry(problem)
        return (problem["dtype"] == "float32" and (g.r, g.s, g.sh, g.sw, g.dh, g.dw) == (3, 3, 1, 1, 1, 1)
                and target.cc >= (8, 0))

    # ---- what the tuner searches ---------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        g = geometry(problem)
        rows, cols, chans = tiles(problem), g.k, g.c
        params = [
            Param("BM", (8, 16, 32, 64), default=32),
            Param("BN", (16, 32, 64, 128), default=64),
            Param("BC", (4, 8, 16), default=8),
            Param("XG", (1, 2, 4, 8, 16), default=4),
            Param("TM", (1, 2, 4, 8), default=4),
            Param("TN", (2, 4, 8), default=8),
            Param("IL", (0, 1), default=0),
        ]
        smem_limit = target.smem_per_block_optin
        constraints = [
            Constraint("whole thread rows and columns", lambda v: v["TM"] <= v["BM"] and v["TN"] <= v["BN"],
                       ("BM", "BN", "TM", "TN")),
            Constraint("64 to 512 threads", lambda v: 64 <= threads(v) <= 512, ("BM", "BN", "XG", "TM", "TN")),
            Constraint("a thread's sums fit the registers", lambda v: v["XG"] * v["TM"] * v["TN"] <= MAX_SUMS,
                       ("XG", "TM", "TN")),
            Constraint("a block's threads fit the register file",
                       lambda v: threads(v) * (v["XG"] * v["TM"] * v["TN"] + OTHER_REGISTERS) <= REGISTER_FILE,
                       ("BM", "BN", "XG", "TM", "TN")),
            Constraint("tiles a block within the problem's", lambda v: v["BM"] <= max(8, pow2_at_least(rows)),
                       ("BM",)),
            Constraint("channels a block within K", lambda v: v["BN"] <= max(16, pow2_at_least(cols)), ("BN",)),
            Constraint("channels a step within C", lambda v: v["BC"] <= max(4, pow2_at_least(chans)), ("BC",)),
            Constraint("shared memory fits", lambda v: 4 * smem_floats(v) + TILE_TABLE_BYTES * v["BM"] <= smem_limit,
                       ("BM", "BN", "BC")),
            Constraint("a pass of the epilogue's sums fits", lambda v: epilogue_width(v) > 0,
                       ("BM", "BN", "BC", "TN")),
            Constraint("interleaving needs two chunks of 4 rows or columns a thread",
                       lambda v: not v["IL"] or v["TM"] >= 8 or v["TN"] >= 8, ("TM", "TN", "IL")),
        ]

        def namer(v):
            return f"{FAMILY}_m{v['BM']}_n{v['BN']}_c{v['BC']}_x{v['XG']}_t{v['TM']}x{v['TN']}" + \
                ("_il" if v["IL"] else "")

        derived = {"THREADS": threads, "EW": epilogue_width, "VC": lambda v: min(alignment(chans, 4), v["BC"]),
                   **{name: (lambda v, name=name: strides(v)[name]) for name in ("XRS", "WRS", "BMP", "BNP")}}
        return Space(params, constraints, derived, namer)

    def model_picks(self, problem: Problem, target: Target, count: int) -> list[Config]:
        """A few shapes of block, cut to the problem, each with 8 channels a step, then 4, each
        with interleaved thread tiles (IL) first where they apply: 32
        tiles x 64 channels with 2 of the 16 products and 8 x 8 (tile, channel) a thread (256
        threads, 128 sums: the fastest of those measured on ResNet-50's 14x14 layer, H100), the
        same block with 4 products and 4 x 8 or 8 x 4 a thread, 32 x 32 (128 threads), 16 x 32
        (64), 16 x 16 with 32 sums a thread, 8 x 16 with 8."""
        space = self.space(problem, target)
        shapes = [dict(BM=32, BN=64, XG=2, TM=8, TN=8), dict(BM=32, BN=64, XG=4, TM=4, TN=8),
                  dict(BM=64, BN=32, XG=4, TM=8, TN=4), dict(BM=32, BN=32, XG=4, TM=4, TN=8),
                  dict(BM=16, BN=32, XG=4, TM=4, TN=8), dict(BM=16, BN=16, XG=2, TM=4, TN=4),
                  dict(BM=8, BN=16, XG=1, TM=2, TN=4)]
        picks = [space.make(dict(s, BC=bc, IL=il)) for s in shapes for bc in (8, 4) for il in (1, 0)
                 if space.is_valid(dict(s, BC=bc, IL=il))]
        return (picks or [self.first_valid(space, (), problem)])[:count]

    def default_config(self, problem: Problem, target: Target) -> Config:
        return self.model_picks(problem, target, 1)[0]

    def model_choice(self, problem: Problem, target: Target):
        """No cost model: the untuned call races this family's pick (``route``), a tune measures it."""
        return None

    def model_version(self) -> str | None:
        return None

    # ---- render and launch ---------------------------------------------------------------------
    def context(self, problem: Problem, config: Config, space: Space) -> dict[str, Any]:
        ctx = super().context(problem, config, space)
        has_bias, activation = epilogue_parts(problem)
        ctx.update(geometry(problem).template_values(), HAS_BIAS=has_bias, ACTIVATION=activation)
        return ctx

    def launch(self, problem: Problem, config: Config) -> Launch:
        return Launch((-(-tiles(problem) // config["BM"]), -(-problem["k"] // config["BN"]), 1),
                      (threads(config), 1, 1), 4 * smem_floats(config))

    def args(self, problem: Problem, config: Config, ops: Mapping[str, Any]) -> list:
        """x, w, y and bias (0: none), and the batch (the one size not compiled in)."""
        has_bias, _ = epilogue_parts(problem)
        return [ops["x"], ops["w"], ops["y"], ops["bias"] if has_bias else np.uint64(0), np.int32(problem["n"])]
