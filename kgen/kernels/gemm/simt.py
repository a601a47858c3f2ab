"""GEMM on CUDA cores: C = alpha * op(A) * op(B) + beta * C.

The problem: ``m, n, k``, ``dtype`` (float32, float64, or float16 storage with float32
accumulation), ``layout`` (two letters, A's then B's: N = as is, T = transposed storage;
read from the arrays' strides, never made by a copy), and ``align_a`` / ``align_b``: the
widest vector (in elements) that the pointer and leading dimension of A / B allow.

>>> from kgen.problem import Target
>>> from kgen.kernels.gemm.problem import gemm_problem
>>> spec = GemmSimt()
>>> p = gemm_problem(256, 256, 256, "float32", "NN")
>>> spec.default_config(p, Target.h200()).name
'gemm_simt_f32_nn_128x128x16_t8x8_va4_vb4_db1_u0_g1_sk4_mb1'
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from kgen.intmath import pow2_at_least
from kgen.kernels.gemm import rules
from kgen.kernels.gemm.dtypes import DTYPES
from kgen.kernels.gemm.family import GemmFamily
from kgen.problem import Problem, Target
from kgen.space import Config, Param, Space
from kgen.space_rules import Rules
from kgen.spec import KernelSpec, Launch


def _filling_split(space, values: dict, m: int, n: int, sms: int) -> dict:
    """``values`` with the smallest split-K whose blocks (tiles x SK) fill 90 % of the SMs, as
    far as the space allows: a skinny problem's few tiles would leave most SMs idle. On the
    recorded H200 spaces (tests/data) the SK=1 default ran at 0.31 of the optimum at
    128x4096x4096, where every config within 5 % of it splits K 4 ways, and the best at
    1000^3 split K 2 ways. Measured on the H200 (the default's tile with SK=1, then split):
    128x4096x4096 0.426 -> 0.126 ms, 16x4096x4096 0.308 -> 0.092, 1000^3 0.112 -> 0.070,
    256^3 0.032 -> 0.016; 2048^3 keeps SK=1."""
    tiles = math.ceil(m / values["BM"]) * math.ceil(n / values["BN"])
    chosen = values
    for split in rules.SPLIT_K[1:]:
        if tiles * chosen["SK"] >= 0.9 * sms:
            break
        candidate = dict(values, SK=split)
        if space.is_valid(candidate):
            chosen = candidate
    return chosen


@functools.lru_cache(maxsize=8)
def _params(vecs: tuple[int, ...]) -> tuple[Param, ...]:
    """The space's parameters for these vector widths: the same (immutable) Params for every
    problem, built once (an import builds a space per problem it reads)."""
    return (
            Param("BM", (16, 32, 64, 128, 256)),
            Param("BN", (16, 32, 64, 128, 256)),
            Param("TM", (2, 4, 8, 16)),
            Param("TN", (2, 4, 8, 16)),
            Param("BK", (8, 16, 32)),
            Param("VA", vecs),
            Param("VB", vecs),
            Param("DB", (0, 1)),
            Param("UNROLL", (1, 4, 0)),          # 0: unroll the whole BK loop
            Param("GM", (1, 8)),
            Param("SK", rules.SPLIT_K),
            Param("MINB", (1, 2)),
    )


def transposed_stores(n: int, values: Mapping[str, Any]) -> bool:
    """Whether the kernel for a problem with ``n`` columns gets the epilogue whose lanes exchange
    values so that each store writes consecutive columns (C_TRANSPOSE): where C's rows cannot
    take the thread's FVN-wide vector stores (N no multiple of FVN), without split-K, where a
    row's group of lanes is a multiple of FVN (the exchange's rotation needs it). Its scalar
    stores otherwise write columns FVN apart, a quarter of each 32-byte sector per instruction
    with FVN 4; problems whose N is a multiple of FVN render the kernel as before."""
    lanes = min(32, values["BN"] // values["TN"])        # the lanes of one row's group: whole vectors of them
    return values["FVN"] > 1 and values["SK"] == 1 and n % values["FVN"] != 0 and lanes % values["FVN"] == 0


class GemmSimt(GemmFamily, KernelSpec):
    family = "gemm"
    template = "gemm/simt.cu.j2"
    shape_params = ("m", "n", "k")
    outputs = ("c",)
    options = ("--std=c++17",)
    export_runtime = "gemm_module.py"
    export_replays = False        # its runtime chooses and lays out each launch itself (kgen/kernels/gemm/rules.py)

    def problem_from_operands(self, operands: Mapping[str, Any]) -> tuple[Problem, int]:
        from kgen.kernels.gemm.operands import problem_from_operands

        return problem_from_operands(operands["a"], operands["b"], operands.get("c"))

    # ---- export: the GEMM runtime, its rules, a scalar-load kernel per dtype and layout --------
    def export_files(self) -> dict[str, Path]:
        return {"_rules.py": Path(rules.__file__)}

    def export_extras(self, target: Target, bests, write_kernel) -> dict[str, Any]:
        """Per dtype and layout, a scalar-load kernel that serves operands of any alignment: the
        default config of the largest exported problem of that dtype and layout, with
        alignment 1 (so every vector width is 1)."""
        largest: dict[str, Problem] = {}
        for p in bests:
            key = f"{p['dtype']}|{p['layout']}"
            if key not in largest or p["m"] * p["n"] * p["k"] > largest[key]["m"] * largest[key]["n"] * largest[key]["k"]:
                largest[key] = p
        fallbacks = {}
        for key, p in sorted(largest.items()):
            unaligned = p.replace(align_a=1, align_b=1)
            config = self.default_config(unaligned, target)
            write_kernel(unaligned, config)
            fallbacks[key] = {"config": config.name, "values": config.as_dict()}
        return {"fallbacks": fallbacks}

    # ---- space ------------------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        dtype, layout = problem["dtype"], problem["layout"]
        st, ct, st_size, ct_size, short, _ = DTYPES[dtype]
        widest = 16 // st_size
        vecs = tuple(v for v in (1, 2, 4, 8) if v <= widest)
        m, n, k = problem["m"], problem["n"], problem["k"]
        align_a, align_b = problem["align_a"], problem["align_b"]
        frag = pad = 16 // ct_size
        words, staged_words = ct_size // 4 or 1, max(1, st_size // 4)
        params = _params(vecs)
        # the constraints as expressions (kgen.space_rules): one compiled check of all of them
        # for a config read from a file, and each one for enumeration and its messages
        rules = Rules(
            [p.name for p in params],
            {"widest_m": max(16, pow2_at_least(m)), "widest_n": max(16, pow2_at_least(n)), "m": m, "n": n,
             "k": k, "half_output": dtype == "float16", "align_a": align_a, "align_b": align_b,
             "a_contig_k": layout[0] == "N", "b_contig_k": layout[1] == "T", "pad": pad,
             "ct_size": ct_size, "words": words, "staged_words": staged_words, "accumulator_words": ct_size // 4,
             "max_threads": target.max_threads_per_block, "smem_limit": target.smem_per_block_optin,
             "regs_per_sm": target.regs_per_sm, "smem_per_sm": target.smem_per_sm, "sm_count": target.sm_count,
             "prefix": f"gemm_simt_{short}_{layout.lower()}"},
            {"threads": "(BM // TM) * (BN // TN)",
             "la": "BM * BK // (VA * threads)",                  # A vectors a thread loads per k tile
             "lb": "BN * BK // (VB * threads)",
             "smem": "(2 if DB else 1) * BK * (BM + pad + BN + pad) * ct_size",
             "regs_est": "(TM * TN + TM + TN) * words + (la * VA + lb * VB) * staged_words + 28",
             "blocks": "-(-m // BM) * -(-n // BN)"},
            [("block tile fits the problem", "BM <= widest_m and BN <= widest_n"),
             ("thread tile divides block tile", "BM % TM == 0 and BN % TN == 0"),
             ("64 <= threads per block <= 512", "64 <= threads <= 512 and threads <= max_threads"),
             ("accumulators fit in registers", "TM * TN * accumulator_words <= 128"),
             ("A vector fits alignment and tile", "VA <= align_a and (BK if a_contig_k else BM) % VA == 0"),
             # every thread loads whole vectors of the tile, at least one
             ("every thread loads whole A vectors", "la >= 1 and BM * BK % (VA * threads) == 0"),
             ("B vector fits alignment and tile", "VB <= align_b and (BK if b_contig_k else BN) % VB == 0"),
             ("every thread loads whole B vectors", "lb >= 1 and BN * BK % (VB * threads) == 0"),
             ("shared memory fits the device", "smem <= smem_limit"),
             ("unroll within BK", "UNROLL < BK"),
             ("grouping only with several block rows", "GM == 1 or GM < -(-m // BM)"),
             ("split-K needs fp32/fp64 output, >= 4 k-tiles per split, and too few blocks",
              "SK == 1 or (not half_output and k >= 4 * SK * BK and blocks * SK <= 4 * sm_count)"),
             ("register estimate fits MINB blocks",
              "regs_est <= 255 and regs_est * threads * MINB <= regs_per_sm and smem * MINB <= smem_per_sm")],
            "{prefix}_{BM}x{BN}x{BK}_t{TM}x{TN}_va{VA}_vb{VB}_db{DB}_u{UNROLL}_g{GM}_sk{SK}_mb{MINB}")
        derived = {
            "THREADS": rules.let("threads"),
            "LA": rules.let("la"),
            "LB": rules.let("lb"),
            "FVM": lambda v: min(v["TM"], frag),
            "FVN": lambda v: min(v["TN"], frag),
            "CM": lambda v: v["TM"] // min(v["TM"], frag),
            "CN": lambda v: v["TN"] // min(v["TN"], frag),
            "SA": lambda v: v["BM"] + pad,
            "SB": lambda v: v["BN"] + pad,
            "SVA": lambda v: min(v["VA"], frag),
            "SVB": lambda v: min(v["VB"], frag),
            "SMEM": rules.let("smem"),
            "REGS_EST": rules.let("regs_est"),
        }

        return Space(params, rules.constraints(), derived, rules.namer, rules.check)

    def context(self, problem: Problem, config: Config, space: Space) -> dict[str, Any]:
        # Only what changes the binary: the shapes are run-time arguments.
        st, ct, st_size, ct_size, _, _ = DTYPES[problem["dtype"]]
        ctx = space.full_values(config.as_dict())
        ctx.update(entry=config.name, dtype=problem["dtype"], layout=problem["layout"],
                   st_t=st, ct_t=ct, out_t=st, st_size=st_size, ct_size=ct_size, out_size=st_size)
        if transposed_stores(problem["n"], ctx):
            ctx["C_TRANSPOSE"] = 1
        return ctx

    def default_config(self, problem: Problem, target: Target) -> Config:
        """A well-rounded tile for the problem's size, split along K until the blocks fill the
        SMs (``_filling_split``); else the first valid config. float32 takes k tiles of 16
        where they fit: on every recorded H200 problem where both were measured (tests/data,
        1000^3 to 8192^3, 128x4096x4096, 3000x5000x700) the same config with BK=16 ran faster
        than with 8, at 0.92-1.0 of the optimum against 0.86-0.97. A problem with 90 % of a
        wave of 128x256 tiles or more takes them first, with 16x8 thread tiles: 0.998-1.0 of the
        optimum at 2048^3 and 3000x5000x700 (the SIMT space recording, extended around it) and
        0.995-0.996 at 4096^3, 4096x4096x256 and 3000x5000x700 in the older recording, where
        128x128 tiles of 8x8 threads ran at 0.86-0.92."""
        space = self.space(problem, target)
        widest = 16 // DTYPES[problem["dtype"]][2]
        m, n = problem["m"], problem["n"]
        big = min(128, max(16, pow2_at_least(m))), min(128, max(16, pow2_at_least(n)))
        depths = (16, 8) if problem["dtype"] == "float32" else (8,)
        tiles = ((big[0], big[1], 8, 8), (big[0], big[1], 4, 4), (64, 64, 4, 4),
                 (32, 64, 2, 4), (16, 64, 2, 2), (64, 16, 2, 2), (16, 16, 2, 2))
        if math.ceil(m / 128) * math.ceil(n / 256) >= 0.9 * target.sm_count:
            tiles = ((128, 256, 16, 8),) + tiles
        candidates = (dict(BM=bm, BN=bn, TM=tm, TN=tn, BK=bk, VA=va, VB=vb, DB=1, UNROLL=0, GM=gm, SK=1, MINB=1)
                      for bm, bn, tm, tn in tiles
                      for va in (min(widest, problem["align_a"], 4), 1)
                      for vb in (min(widest, problem["align_b"], 4), 1)
                      for bk in depths for gm in (8, 1))
        chosen = next((v for v in candidates if space.is_valid(v)), None)
        if chosen is None:
            return self.first_valid(space, (), problem)
        return space.make(_filling_split(space, chosen, m, n, target.sm_count))

    # ---- launch -----------------------------------------------------------------------
    def launch(self, problem: Problem, config: Config) -> Launch:
        return Launch(*rules.launch_geometry(problem["m"], problem["n"], problem["dtype"], config.as_dict()))

    def args(self, problem: Problem, config: Config, operands: Mapping[str, Any]) -> list:
        from kgen.arrays import describe

        a, b, c = (describe(operands[x]) for x in ("a", "b", "c"))
        ct = scalar_type(problem)
        return [np.uint64(a.ptr), np.uint64(b.ptr), np.uint64(c.ptr), *argument_dims(problem, a, b, c.strides[0]),
                ct(operands.get("alpha", 1.0)), ct(operands.get("beta", 0.0))]

    def run(self, kernel, problem: Problem, config: Config, operands: Mapping[str, Any]) -> None:
        if config["SK"] > 1:  # partial sums are added atomically into beta * C
            kernel.scale(operands["c"], operands.get("beta", 0.0))
        super().run(kernel, problem, config, operands)

    # ---- measurement (GPU) --------------------------------------------------------------
    def inputs(self, problem: Problem, seed: int) -> dict[str, Any]:
        import cupy

        rng = cupy.random.default_rng(seed)
        m, n, k, dtype, layout = (problem[x] for x in ("m", "n", "k", "dtype", "layout"))

        def operand(rows, cols, transposed):
            shape = (cols, rows) if transposed else (rows, cols)
            x = (rng.random(shape, dtype=cupy.float64) * 2 - 1).astype(dtype)
            return x.T if transposed else x

        a = operand(m, k, layout[0] == "T")
        b = operand(k, n, layout[1] == "T")
        c = cupy.full((m, n), cupy.nan, dtype=dtype)
        return {"a": a, "b": b, "c": c, "alpha": 1.0, "beta": 0.0}

    def reference(self, problem: Problem, operands: Mapping[str, Any]) -> dict[str, Any]:
        import cupy

        a = operands["a"].astype(cupy.float64)
        b = operands["b"].astype(cupy.float64)
        ref = operands.get("alpha", 1.0) * (a @ b)
        beta = operands.get("beta", 0.0)
        if beta:
            ref += beta * operands["c"].astype(cupy.float64)
        return {"c": ref}

    def baseline(self, problem: Problem, operands: Mapping[str, Any]):
        import cupy

        a, b, c = operands["a"], operands["b"], operands["c"]
        return lambda: cupy.matmul(a, b, out=c)

    def tolerance(self, problem: Problem) -> float:
        return DTYPES[problem["dtype"]][5]

    def flops(self, problem: Problem) -> float:
        return 2.0 * problem["m"] * problem["n"] * problem["k"]

    def bytes(self, problem: Problem) -> float:
        size = DTYPES[problem["dtype"]][2]
        m, n, k = problem["m"], problem["n"], problem["k"]
        return float(size * (m * k + k * n + m * n))


def scalar_type(problem: Problem) -> type:
    """NumPy type of alpha and beta: the kernel's compute type."""
    return np.float64 if problem["dtype"] == "float64" else np.float32


def argument_dims(problem: Problem, a, b, ldc: int) -> tuple:
    """m, n, k, lda, ldb, ldc as the kernel's argument types; lda/ldb follow the layout."""
    lda = a.strides[0] if problem["layout"][0] == "N" else a.strides[1]
    ldb = b.strides[0] if problem["layout"][1] == "N" else b.strides[1]
    return (np.int32(problem["m"]), np.int32(problem["n"]), np.int32(problem["k"]),
            np.int64(lda), np.int64(ldb), np.int64(max(ldc, 1)))
