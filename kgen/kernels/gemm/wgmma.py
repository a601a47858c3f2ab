"""Hopper (sm_90a) tensor-core GEMM: TMA + wgmma, warp-specialised, persistent tiles.

float16 / bfloat16 inputs (MN-major operands use the wgmma transpose bits) and float32 read
as tf32 (wgmma tf32 reads K-major tiles only: an MN-major operand is copied in transposed by
the producer warpgroup with 4-byte cp.async, or, for B with 16-byte rows, staged by TMA into
XS buffers and transposed in shared memory, ``_tXS``; with ``_rs``, an M-major A (TT) is
read into registers as wgmma's first operand, and an NN problem is computed swapped as such a
TT one, C^T = B^T A^T), float32 accumulation, every layout, the fused epilogues of
``gemm_tc``. TMA needs 16-byte row strides, so an operand TMA reads must have
a leading dimension that is a multiple of 16 bytes (``align_a``/``align_b`` of 8 16-bit or
4 32-bit elements); other problems belong to the portable mma.sync family.

Parameters: BM x BN block tile (BK: one 128-byte swizzle span, 64 16-bit or 32 tf32 values),
STAGES (depth of the shared-memory ring), CONSUMERS (1 or 2 consumer warpgroups, each
owning 64 or 128 rows), GM (block rows grouped by the tile scheduler for L2 reuse),
PINGPONG (two consumers take alternate tiles, so one's epilogue overlaps the other's
mainloop; named ``..._pp``), SPLITK (each tile's k-blocks shared by SPLITK work units whose
fp32 partial sums meet in a workspace, for problems whose tiles leave SMs idle; ``_kS``;
where every unit has a block the last part polls for the others' sums, ``split_parts_poll``:
64x4096x4096 0.0151 -> 0.0146 ms, 128x4096x4096 0.0163 -> 0.0158, compare_split_k_polling.jsonl),
TMA_STORE (the output leaves through shared memory and bulk tensor stores, so the consumers
go on while it drains; ``_ts``; it costs 16 KiB of shared memory per consumer warpgroup).
Measured on the H200 (scripts/compare_configs.py, bf16 NN, same tile with and without):
4096x4096x256 0.0411 -> 0.0297 ms, 2048^3 0.0318 -> 0.0297, 4096^3 0.196 -> 0.181, 8192^3
1.452 -> 1.407; 1000^3, 128x4096x4096 and tf32 4096^3 unchanged within 2 %. CLUSTER (2:
blocks of a cluster take two block rows with the same columns and share B, each loading
half of it by TMA multicast; ``_x2``; not where cp.async copies B): 1000^3 in 64x128 tiles
0.0150 -> 0.0132 ms; the large tiles of 2048^3 - 4096^3 1-3 % slower.
A problem of fewer rows than BM reads an A box of only its M rows (K-major A): TMA's zero
fill of the rest cost as much as loading it, 1x8192x8192 in 64x64 tiles 0.0453 -> 0.0372 ms
(docs/evidence/nvidia-h200/compare_a_box.jsonl).
RS (tf32 TT, and NN swapped; ``_rs``; stored from registers, no staging, no clusters): NN
4096^3 in 128x256 tiles 0.345 ms against 0.469 for the best staged B (256x128, XS 2), 8192^3
3.01 against 3.92; TT 4096^3 0.345 against 0.482 with A copied by cp.async
(docs/evidence/nvidia-h200/compare_tf32_rs.jsonl).
Tried and dropped (the code is in the history): stream-K, every block a run of k-blocks across
tile edges (a675f13), 11-38 % slower than the best split-K or whole-tile config on every shape
measured, decode to 4096^3 (compare_stream_k.jsonl); the two split-K parts of a tile meeting
in a cluster's shared memory instead of the workspace (fade00e), within 0-4 % of the workspace
(compare_split_k_cluster.jsonl): the workspace round trip is not what bounds decode; clusters
of two block columns sharing A by multicast, B per block (b50e70f, ``CN``), no faster on any
decode shape, 64x4096x4096 0.0162 ms against 0.0151 (compare_column_pairs.jsonl).

>>> from kgen.problem import Target
>>> spec = GemmWgmma()
>>> p = spec.problem(4096, 4096, 4096, "bfloat16", "NT")
>>> spec.supports(p, Target.h200())
True
>>> spec.default_config(p, Target.h200()).name
'gemm_wgmma_bf16_nt_128x256x64_s4_c2_g8_ts_x2'
>>> spec.launch(p, spec.default_config(p, Target.h200()))
Launch(grid=(132, 1, 1), block=(384, 1, 1), shared_mem=230480)
>>> spec.default_config(spec.problem(4096, 4096, 4096, "float32", "NN"), Target.h200()).name
'gemm_wgmma_tf32_nn_128x256x32_s4_c2_g8_rs'
"""

from __future__ import annotations


import numpy as np

from kgen import tma
from kgen.intmath import pow2_at_least
from kgen.kernels.gemm.dtypes import ITEMSIZE, allowed_outputs
from kgen.kernels.gemm.tc import TensorCoreGemm, modelled_time
from kgen.kernels.gemm.workspace import split_k_workspace
from kgen.kernels.gemm.wgmma_geometry import (BK, DEFAULT_SM_COUNT, DTYPES, MAX_ACC_FLOATS,
                                              RS_FRAGMENT_REGS, SPLITS, STAGE_CHOICES, STORE_ROWS, SWIZZLE,
                                              block_k, copied_transposed, register_choices, smem_bytes,
                                              staging_choices)
from kgen.problem import Problem, Target
from kgen.space import Config, Constraint, Param, Space
from kgen.spec import Launch


def swapped(problem: Problem, values) -> bool:
    """Whether the kernel computes C^T = B^T A^T: a tf32 NN problem with RS."""
    return bool(values.get("RS", 0)) and problem["layout"] == "NN"


def kernel_dims(problem: Problem, values) -> tuple[int, int]:
    """(rows, columns) of the problem the kernel computes: (M, N), or (N, M) swapped."""
    m, n = problem["m"], problem["n"]
    return (n, m) if swapped(problem, values) else (m, n)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class GemmWgmma(TensorCoreGemm):
    family = "gemm_wgmma"
    template = "gemm/wgmma.cu.j2"
    options = ("--std=c++17",)
    sm_count = DEFAULT_SM_COUNT
    tf32_rounding = "truncate"   # wgmma reads float32 tiles from shared memory as they are
    stores_rows_by_band = True   # an unaligned C through the store buffers (``rows_by_band``)
    export_dependencies = ("cupy-cuda13x", "cuda-bindings")     # its TMA maps are encoded at each call

    def compile_arch(self, target: Target) -> str:
        """wgmma and setmaxnreg exist only in the arch-specific sm_90a target."""
        if tuple(target.cc) == (9, 0):
            return "sm_90a"
        return target.arch

    def supports(self, problem: Problem, target: Target) -> bool:
        """Hopper, 16-bit or tf32 inputs, and operands TMA can describe (16-byte row strides;
        an operand copied by cp.async needs only its natural alignment)."""
        dtype = problem["dtype"]
        if tuple(target.cc) != (9, 0) or dtype not in DTYPES:
            return False
        tma_align = 16 // ITEMSIZE[dtype]
        cp_a, cp_b = copied_transposed(dtype, problem["layout"])
        return (problem["out_dtype"] in allowed_outputs(dtype)
                and (cp_a or problem["align_a"] >= tma_align) and (cp_b or problem["align_b"] >= tma_align)
                and min(problem["m"], problem["n"], problem["k"]) >= 1)

    def staging_needed(self, problem: Problem) -> tuple[bool, bool]:
        """Which operands (A, B) TMA must read but cannot (a row stride or start not a
        multiple of 16 bytes); a copy into padded rows (``kgen.kernels.gemm.staging``) makes
        the problem one this family runs."""
        dtype = problem["dtype"]
        if dtype not in DTYPES:
            return False, False
        tma_align = 16 // ITEMSIZE[dtype]
        cp_a, cp_b = copied_transposed(dtype, problem["layout"])
        return (not cp_a and problem["align_a"] < tma_align), (not cp_b and problem["align_b"] < tma_align)

    # ---- space ------------------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        self.sm_count = target.sm_count
        dtype, layout = problem["dtype"], problem["layout"]
        short = {"bfloat16": "bf16", "float16": "f16", "float32": "tf32"}[dtype]
        k = problem["k"]
        bk = block_k(dtype)
        cp_b = copied_transposed(dtype, layout)[1]

        def rpc(v):   # rows of the tile one consumer warpgroup owns
            return v["BM"] if v["PINGPONG"] else v["BM"] // v["CONSUMERS"]

        params = [
            Param("BM", (64, 128, 256)),
            Param("BN", (64, 128, 192, 256)),
            Param("BK", (bk,)),
            Param("STAGES", STAGE_CHOICES),
            Param("CONSUMERS", (1, 2)),
            Param("GM", (1, 8)),
            Param("PINGPONG", (0, 1)),
            Param("SPLITK", SPLITS, default=1),
            Param("TMA_STORE", (0, 1), default=0),
            Param("CLUSTER", (1, 2), default=1),
            Param("XS", staging_choices(problem), default=0),
            Param("RS", register_choices(problem), default=0),
        ]

        def rows(v):      # the kernel's M and N (swapped for NN with RS)
            return kernel_dims(problem, v)

        constraints = [
            Constraint("block tile fits the problem",
                       lambda v: v["BM"] <= max(64, pow2_at_least(rows(v)[0]))
                       and v["BN"] <= max(64, 64 * _ceil_div(rows(v)[1], 64)),
                       ("BM", "BN", "RS")),
            Constraint("shared memory fits the device",
                       lambda v: smem_bytes(v["BM"], v["BN"], v["STAGES"], v["CONSUMERS"], v["TMA_STORE"], v["XS"])
                       <= target.smem_per_block_optin,
                       ("BM", "BN", "STAGES", "CONSUMERS", "TMA_STORE", "XS")),
            Constraint("ping-pong needs two consumers", lambda v: not v["PINGPONG"] or v["CONSUMERS"] == 2,
                       ("CONSUMERS", "PINGPONG")),
            Constraint("a consumer warpgroup owns 64 or 128 rows", lambda v: rpc(v) in (64, 128),
                       ("BM", "CONSUMERS", "PINGPONG")),
            Constraint("accumulators (and an RS tile's fragments) fit in registers",
                       lambda v: (v["BN"] // 2 + RS_FRAGMENT_REGS * v["RS"]) * (rpc(v) // 64)
                       <= MAX_ACC_FLOATS + RS_FRAGMENT_REGS * v["RS"],
                       ("BM", "BN", "CONSUMERS", "PINGPONG", "RS")),
            Constraint("grouping only with several block rows (of pairs, in clusters)",
                       lambda v: v["GM"] == 1 or v["GM"] < _ceil_div(rows(v)[0], v["BM"] * v["CLUSTER"]),
                       ("BM", "GM", "CLUSTER", "RS")),
            Constraint("a cluster pairs two block rows and multicasts B, which TMA must load",
                       lambda v: v["CLUSTER"] == 1
                       or (_ceil_div(rows(v)[0], v["BM"]) >= 2 and not cp_b and not v["RS"]),
                       ("BM", "CLUSTER", "RS")),
            Constraint("split-K only while the tiles leave SMs idle, two k-blocks a part at least",
                       lambda v: v["SPLITK"] == 1 or splitk_useful(*rows(v), k, v["BM"], v["BN"], v["SPLITK"],
                                                                    target.sm_count, bk),
                       ("BM", "BN", "SPLITK", "RS")),
            Constraint("B staged in XS buffers: not with 256 x 64 tiles (8 bytes spill with any epilogue)",
                       lambda v: not v["XS"] or v["BM"] < 256 or v["BN"] > 64, ("BM", "BN", "XS")),
            Constraint("RS: stored from registers (a warp's rows are no 16-row band), B not staged",
                       lambda v: not v["RS"] or (v["TMA_STORE"] == 0 and v["XS"] == 0), ("RS", "TMA_STORE", "XS")),
        ]
        derived = {
            "RPC": rpc,
            "SLABS": lambda v: rpc(v) // 64,
            "THREADS": lambda v: 128 * (v["CONSUMERS"] + 1),
            "SMEM": lambda v: smem_bytes(v["BM"], v["BN"], v["STAGES"], v["CONSUMERS"], v["TMA_STORE"], v["XS"]),
        }

        def namer(v):
            return (f"gemm_wgmma_{short}_{layout.lower()}_{v['BM']}x{v['BN']}x{v['BK']}"
                    f"_s{v['STAGES']}_c{v['CONSUMERS']}_g{v['GM']}" + ("_pp" if v["PINGPONG"] else "")
                    + (f"_k{v['SPLITK']}" if v["SPLITK"] > 1 else "") + ("_ts" if v["TMA_STORE"] else "")
                    + (f"_x{v['CLUSTER']}" if v["CLUSTER"] > 1 else "") + (f"_t{v['XS']}" if v["XS"] else "")
                    + ("_rs" if v["RS"] else ""))

        return Space(params, constraints, derived, namer)

    def default_config(self, problem: Problem, target: Target) -> Config:
        """The tile a wave model predicts fastest (see ``modelled_time``), the deepest pipeline
        that fits (bytes in flight are what a skinny problem needs), two consumers, grouped
        rasterisation when there are many tiles, split-K to fill the SMs (``default_splitk``)."""
        picks = self.model_picks(problem, target, 1)
        return picks[0] if picks else self.first_valid(self.space(problem, target), (), problem)

    def model_picks(self, problem: Problem, target: Target, count: int) -> list[Config]:
        """One config per tile, for the ``count`` tiles the wave model ranks first (of two it
        ranks alike, the wider first): each the first valid of clusters of two / none, two / one
        consumers, TMA stores / register stores, the deepest ring, grouped / plain
        rasterisation, with the default split. TMA stores come before ring depth: they
        gained 3-28 % where they cost a stage (``TMA_STORE`` above), a stage past 4 little.
        The model's error is of the order of the gaps between its top tiles, so a search
        tries several. On the H200's whole recorded space of the template (tests/data, five
        problems, 687-1336 configs each), clusters and the wider tile first took the picks'
        best from 0.89 to 0.96 of the optimum at 1000^3 and from 0.84 to 0.97 at
        3000x5000x720; a tile's transpose, no longer skipped, is the optimum at 128x4096x4096
        (128x64, after 64x128). kgen's trials to 95 % went from 18.5 to 1 (1000^3) and from 16
        to 3 (3000x5000x720), the rest 1-2 as before (scripts/bench_search.py, 20 seeds). Of
        the live tunes' bests (scripts/results/nvidia-h200/bench_gemm.json), 17 of the 20
        with a tile wider or taller are wider; 4 of all 27 are clustered (a first pick's
        cluster cost 2 % at 2048^3 and 6 % at 128x4096x4096 in the recording; the config
        without it is one move away for the walk)."""
        space = self.space(problem, target)
        choices = {p.name: p.choices for p in space.params}
        # an M-major tf32 A from registers where it can be (tf32 NN computed swapped: its tiles
        # lie over (N, M)), and a wide tile first, whose consumers each take one m64 slab across
        # 256 columns (tf32 NN 4096^3: 128x256 in 0.345 ms, 256x128 in 0.404;
        # docs/evidence/nvidia-h200/compare_tf32_rs.jsonl)
        registers = 1 in choices["RS"]
        rows, cols = kernel_dims(problem, {"RS": int(registers)})
        tiles = sorted({(bm, bn) for bm in choices["BM"] for bn in choices["BN"]},
                       key=lambda t: (self.tile_time(problem, rows, cols, t, target.sm_count), -t[1], t))
        bk = block_k(problem["dtype"])
        # a staged B first where it can be, two buffers before three (tf32 NN, 256x128 tiles:
        # 4096^3 0.480 ms against 0.511, docs/evidence/nvidia-h200/compare_tf32_staged.jsonl;
        # the 8192^3 tune's best took two)
        staging = sorted(staging_choices(problem), key=lambda xs: (xs == 0, xs))
        picks = []
        for bm, bn in tiles:
            if len(picks) >= count:
                break
            rs_choices = (1, 0) if registers else (0,)
            splits = {rs: self.default_split(problem, *kernel_dims(problem, {"RS": rs}), bm, bn, target.sm_count)
                      for rs in rs_choices}
            for values in (dict(BM=bm, BN=bn, BK=bk, STAGES=stages, CONSUMERS=consumers, GM=gm, PINGPONG=0,
                                SPLITK=splits[rs], TMA_STORE=store, XS=xs, RS=rs, CLUSTER=cluster)
                           for rs in rs_choices for cluster in (2, 1)
                           for consumers in (2, 1) for xs in staging for store in (1, 0)
                           for stages in STAGE_CHOICES[::-1] for gm in (8, 1)):
                if space.is_valid(values):
                    picks.append(space.make(values))
                    break
        return picks

    def tile_time(self, problem: Problem, rows: int, cols: int, tile: tuple[int, int], sms: int) -> float:
        """The wave model's relative time of the kernel's rows x cols output in ``tile``s."""
        return modelled_time(rows, cols, tile[0], tile[1], sms)

    def default_split(self, problem: Problem, rows: int, cols: int, bm: int, bn: int, sms: int) -> int:
        """The split-K of the model's picks (``default_splitk``)."""
        return default_splitk(rows, cols, problem["k"], bm, bn, sms, block_k(problem["dtype"]))

    def context(self, problem: Problem, config, space) -> dict:
        return {**super().context(problem, config, space), "ROWS_BY_BAND": self.rows_by_band(problem, config)}

    def rows_by_band(self, problem: Problem, config) -> bool:
        """Whether the kernel writes a C whose rows TMA cannot store (not 16-byte multiples: N odd
        in half precision, say) through its store buffers, a row at a time by lanes at consecutive
        columns, rather than from registers (8 bytes of a row a store instruction: 0.35-0.5 TB/s
        on an H100). A config storing by TMA, on a plain GEMM whose C rows are such; its source
        differs from the aligned problems' only there (their binaries are as before).

        >>> spec = GemmWgmma()
        >>> config = {"TMA_STORE": 1}
        >>> [spec.rows_by_band(spec.problem(64, n, 64, "bfloat16", "NN"), config) for n in (1001, 1000)]
        [True, False]
        """
        return (self.stores_rows_by_band and bool(config.get("TMA_STORE", 0)) and problem["m"] > 1
                and problem["n"] * ITEMSIZE[problem["out_dtype"]] % 16 != 0)

    # ---- launch -----------------------------------------------------------------------
    def launch(self, problem: Problem, config: Config) -> Launch:
        bm, bn, cluster = config["BM"], config["BN"], config.get("CLUSTER", 1)
        grid = cluster * max(1, min(work_units(problem, config), self.sm_count // cluster))   # whole clusters
        return Launch((grid, 1, 1), (128 * (config["CONSUMERS"] + 1), 1, 1),
                      smem_bytes(bm, bn, config["STAGES"], config["CONSUMERS"], config.get("TMA_STORE", 0),
                                 config.get("XS", 0)))

    def map_plans(self, problem: Problem, config: Config) -> tuple:
        """The TMA map each of the kernel's two operand arguments needs: None where the kernel
        copies that operand with cp.async, else (operand "a" or "b", dims (inner, outer), box,
        swizzle); the map's row stride is the operand's leading dimension (``row_stride``)."""
        dtype, layout = problem["dtype"], problem["layout"]
        m, n, k = problem["m"], problem["n"], max(1, problem["k"])
        bk = block_k(dtype)
        if swapped(problem, config):
            # the kernel's first operand is B as it lies (row-major K x N: boxes of 32 n x BK k),
            # its second A (row-major M x K: one box of BK k x BN rows, the kernel's columns)
            return ("b", (n, k), (32, bk), SWIZZLE), ("a", (k, m), (bk, config["BN"]), SWIZZLE)
        registers = config.get("RS", 0)
        if layout[0] == "N":      # row-major M x K: K contiguous, one box of BK k x BM rows (M rows
            # where M is fewer, as the kernel expects: rows past M would be zero-filled for nothing)
            a_map = ((k, m), (bk, min(m, config["BM"])))
        else:                     # stored K x M: M contiguous, boxes of 64 m x 64 k (RS: 32 m x 32 k)
            a_map = ((m, k), (32 if registers else 64, bk))
        staged = config.get("XS", 0) > 0
        if layout[1] == "N":      # row-major K x N: N contiguous, boxes of 64 n x 64 k (staged: one
            # box of BN n x BK k rows, unswizzled, which the producers transpose)
            b_map = ((n, k), (config["BN"], bk) if staged else (64, bk))
        else:                     # stored N x K: K contiguous, one box of BK k x BN rows (each block
            # of a cluster loads BN / CLUSTER of them and multicasts them)
            b_map = ((k, n), (bk, config["BN"] // config.get("CLUSTER", 1)))
        copied = copied_transposed(dtype, layout)
        copied = (copied[0] and not registers, copied[1] and not staged)
        swizzle = (SWIZZLE, 0 if staged else SWIZZLE)
        return tuple(None if cp else (name, dims, box, sw)
                     for cp, name, (dims, box), sw in zip(copied, "ab", (a_map, b_map), swizzle))

    def tensor_maps(self, problem: Problem, config: Config, a, b) -> tuple:
        """The two TmaDesc records for the kernel's operand arguments (``a`` / ``b``: the problem's
        A and B, each a pointer and a leading dimension, ``_pointer_view``); an operand the
        kernel copies with cp.async gets an empty record."""
        size = ITEMSIZE[problem["dtype"]]
        arrays = {"a": a, "b": b}
        return tuple(_EMPTY_MAP if plan is None else
                     tma.encode_tiled(arrays[plan[0]].ptr, problem["dtype"], plan[1],
                                      row_stride(plan[1], arrays[plan[0]].ld) * size, plan[2], plan[3])
                     for plan in self.map_plans(problem, config))

    def output_plan(self, problem: Problem, config: Config):
        """(dims, box, swizzle) of C's map where the config stores by TMA, else None."""
        if not config.get("TMA_STORE", 0):
            return None
        return (problem["n"], problem["m"]), (SWIZZLE // ITEMSIZE[problem["out_dtype"]], STORE_ROWS), SWIZZLE

    def output_map(self, problem: Problem, config: Config, c_ptr: int, ldc: int) -> tuple:
        """(TmaDesc, c_by_tma) for C: a map of 16-row boxes of 128 bytes of columns when the
        config stores by TMA and C allows it (16-byte aligned pointer and row stride), else an
        empty record and 0, and the kernel writes C from registers."""
        plan = self.output_plan(problem, config)
        if plan is None:
            return _EMPTY_MAP, np.int32(0)
        out = problem["out_dtype"]
        dims, box, swizzle = plan
        try:      # encode_tiled looks in its cache first, and checks TMA's rules on a miss
            return tma.encode_tiled(c_ptr, out, dims, row_stride(dims, ldc) * ITEMSIZE[out], box, swizzle), np.int32(1)
        except tma.TmaError:
            return _EMPTY_MAP, np.int32(0)

    def arg_recipe(self, problem: Problem, config: Config) -> list[dict]:
        """The kernel's arguments as data (``kgen.export_runtime.replay``), which an exported
        package rebuilds at call time: the arguments ``arg_builder`` makes."""
        dtype, out = problem["dtype"], problem["out_dtype"]

        def tensor_map(plan, array, element):
            if plan is None:
                return {"empty_map": True}
            dims, box, swizzle = plan[-3:]
            return {"map": {"array": array, "dtype": element, "dims": list(dims), "box": list(box), "swizzle": swizzle,
                            "row_stride": "ld" if dims[1] > 1 else row_stride(dims, 0)}}

        output = self.output_plan(problem, config)
        first, second = ("b", "a") if swapped(problem, config) else ("a", "b")
        rows, cols = kernel_dims(problem, config)
        return [*(tensor_map(plan, plan[0] if plan else None, dtype) for plan in self.map_plans(problem, config)),
                {**tensor_map(output, "c", out), "optional": True} if output else {"empty_map": True},
                {"pointer": first}, {"pointer": second}, {"ld": first, "type": "int64"},
                {"ld": second, "type": "int64"}, {"pointer": "c"}, {"pointer": "bias", "optional": True},
                {"value": rows, "type": "int32"}, {"value": cols, "type": "int32"},
                {"value": problem["k"], "type": "int32"},
                {"ld": "c", "type": "int64"} if problem["m"] > 1 else {"value": max(problem["n"], 1), "type": "int64"},
                {"scalar": "alpha", "type": "float32", "default": 1.0},
                {"scalar": "beta", "type": "float32", "default": 0.0},
                {"map_flag": 2, "type": "int32"} if output else {"value": 0, "type": "int32"},
                *workspace_recipe(problem, config)]

    def arg_builder(self, problem: Problem, config: Config, lds: tuple):
        """(a, b, c, bias pointers, alpha, beta) -> arguments; tensor maps come from kgen.tma's
        cache. ``TensorCoreGemm.args`` builds through it too."""
        lda, ldb = (np.int64(max(ld, 1)) for ld in lds[:2])
        transposed = swapped(problem, config)     # the kernel computes C^T = B^T A^T
        rows, cols = kernel_dims(problem, config)
        dims = (np.int32(rows), np.int32(cols), np.int32(problem["k"]),
                np.int64(lds[2] if problem["m"] > 1 else max(problem["n"], 1)))

        # the last operands' maps and the last C's, each entry replaced whole (thread-safe)
        last = [((None, None), None), (None, None)]
        scratch = workspace_args(problem, config, self.template)

        def build(pa, pb, pc, pbias, alpha, beta, stream=None, device=None):
            inputs, output = last
            if inputs[0] != (pa, pb):      # new operands: encode (or look up) their maps
                inputs = last[0] = ((pa, pb), self.tensor_maps(problem, config, _pointer_view(pa, lds[0]),
                                                               _pointer_view(pb, lds[1])))
            if output[0] != pc:
                output = last[1] = (pc, self.output_map(problem, config, pc, lds[2]))
            (map_a, map_b), (map_c, c_by_tma) = inputs[1], output[1]
            first, second, ld_first, ld_second = (pb, pa, ldb, lda) if transposed else (pa, pb, lda, ldb)
            return (map_a, map_b, map_c, np.uint64(first), np.uint64(second), ld_first, ld_second, np.uint64(pc),
                    np.uint64(pbias), *dims, np.float32(alpha), np.float32(beta), c_by_tma, *scratch(stream, device))

        return build


def work_units(problem: Problem, config) -> int:
    """The kernel's work units: (tile of a cluster, split-K part) pairs."""
    m, n = kernel_dims(problem, config)
    cluster = config.get("CLUSTER", 1)
    return _ceil_div(_ceil_div(m, config["BM"]), cluster) * _ceil_div(n, config["BN"]) * config.get("SPLITK", 1)


def split_parts_poll(problem: Problem, config, sms: int) -> bool:
    """Whether a split-K config's parts meet by polling (every unit a block or cluster of its
    own, as the kernel decides at launch) rather than by the workspace counters."""
    return config.get("SPLITK", 1) > 1 and work_units(problem, config) <= sms // config.get("CLUSTER", 1)


def splitk_useful(m: int, n: int, k: int, bm: int, bn: int, split: int, sms: int, bk: int = BK) -> bool:
    """Split-K pays while the tiles alone leave SMs idle: fewer tiles than SMs, at most four
    units per SM, and two k-blocks (of ``bk``) or more in every part."""
    tiles = _ceil_div(m, bm) * _ceil_div(n, bn)
    return tiles < sms and tiles * split <= 4 * sms and _ceil_div(k, bk) >= 2 * split


def default_splitk(m: int, n: int, k: int, bm: int, bn: int, sms: int, bk: int = BK) -> int:
    """The largest split that keeps every SM's share within one unit of the others."""
    best = 1
    for split in SPLITS:
        if splitk_useful(m, n, k, bm, bn, split, sms, bk) and _ceil_div(m, bm) * _ceil_div(n, bn) * split <= sms:
            best = split
    return best


def workspace_bytes(problem: Problem, config: Config) -> tuple[int, int]:
    """(partial sums, flags) bytes a split-K config needs, (0, 0) without split-K: a slot of
    fp32 sums and an int flag per (tile, rows of a consumer, warp, part)."""
    split = config.get("SPLITK", 1)
    if split == 1:
        return 0, 0
    bm, bn = config["BM"], config["BN"]
    m, n = kernel_dims(problem, config)
    tiles = _ceil_div(m, bm) * _ceil_div(n, bn)
    groups = 1 if config["PINGPONG"] else config["CONSUMERS"]
    return tiles * split * bm * bn * 4, tiles * groups * 4 * split * 4


def workspace_args(problem: Problem, config: Config, template: str = GemmWgmma.template):
    """The split-K workspace pointers of a launch of ``config`` (``kgen.kernels.gemm.workspace``):
    null without split-K; else partials and zeroed flags, of ``workspace_bytes``."""
    return split_k_workspace(workspace_bytes(problem, config), template, 0)


def workspace_recipe(problem: Problem, config: Config) -> list[dict]:
    """``workspace_args`` as the two last items of an export recipe (``kgen.export_runtime.replay``):
    the workspaces the exported runtime makes, or two null pointers without split-K."""
    partial_bytes, flag_bytes = workspace_bytes(problem, config)
    if not partial_bytes:
        return [{"value": 0, "type": "uint64"}, {"value": 0, "type": "uint64"}]
    return [{"workspace": "partials", "bytes": partial_bytes, "fill": 0},
            {"workspace": "flags", "bytes": flag_bytes, "fill": 0}]


_EMPTY_MAP = np.zeros((), tma.TMA_DESC_DTYPE)[()]   # the map argument (numpy.void) of an operand cp.async copies


def _pointer_view(ptr: int, ld: int):
    """What ``tensor_maps`` reads of an operand: its pointer and leading dimension."""
    from types import SimpleNamespace

    return SimpleNamespace(ptr=ptr, ld=ld)


def row_stride(dims: tuple[int, ...], ld: int) -> int:
    """Row stride (elements) of a map over (inner, outer[, batch]) ``dims`` of an operand whose
    leading dimension is ``ld``: a single row has no stride of its own (TMA still wants one)."""
    inner, outer = dims[:2]
    if outer <= 1:
        return 8 * _ceil_div(max(inner, 1), 8)
    return ld
