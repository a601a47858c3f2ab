"""GEMM on tensor cores with mma.sync, ldmatrix and a cp.async pipeline (sm_80 and later).

float16 / bfloat16 (m16n8k16), float32 as tf32 (m16n8k8) and float64 (m16n8k8, sm_90), every
layout, any size and alignment, with the fused epilogue of ``kgen.kernels.gemm.tc``.

>>> from kgen.problem import Target
>>> spec = GemmMma()
>>> p = spec.problem(4096, 4096, 4096, "bfloat16", "NN")
>>> spec.default_config(p, Target.h200()).name
'gemm_mma_bf16_nn_128x128x32_w64x64_s4_va8_vb8_g8_k1_mb1_lp1'
"""

from __future__ import annotations


from kgen.intmath import pow2_at_least
from kgen.kernels.gemm.dtypes import ITEMSIZE
from kgen.kernels.gemm.mma_geometry import ATOMS, tile_shape
from kgen.kernels.gemm.tc import TensorCoreGemm, type_context
from kgen.problem import Problem, Target
from kgen.space import Config, Constraint, Param, Space
from kgen.spec import Launch


# (BM, BN, WM, WN) of the default config, largest first (``GemmMma.default_config``)
TILE_PREFERENCE = ((128, 128, 64, 64), (128, 64, 64, 32), (128, 64, 32, 32), (64, 64, 32, 32), (32, 64, 16, 32),
                   (16, 64, 16, 16), (64, 16, 16, 16), (16, 16, 16, 16))


class GemmMma(TensorCoreGemm):
    family = "gemm_mma"
    template = "gemm/mma.cu.j2"

    def supports(self, problem: Problem, target: Target) -> bool:
        if problem["dtype"] == "float64":
            return target.cc >= (9, 0)
        return problem["dtype"] in ATOMS and target.cc >= (8, 0)

    def space(self, problem: Problem, target: Target) -> Space:
        dtype, layout = problem["dtype"], problem["layout"]
        size = ITEMSIZE[dtype]
        mma_m, mma_k, acc_per, bks = ATOMS[dtype]
        acc_words = acc_per * (2 if dtype == "float64" else 1)
        vecs = tuple(v for v in (1, 2, 4, 8) if v * size <= 16)
        m, n, k = problem["m"], problem["n"], problem["k"]
        align_a, align_b = problem["align_a"], problem["align_b"]
        a_kmajor, b_kmajor = layout[0] == "N", layout[1] == "T"

        def warps(v):
            return (v["BM"] // v["WM"]) * (v["BN"] // v["WN"]) * v["WK"]

        def accumulators(v):
            return (v["WM"] // mma_m) * (v["WN"] // 8) * acc_words

        def copies(v, rows, vec):   # copies per thread per stage of one operand
            return -(-rows * v["BK"] // (vec * 32 * max(1, warps(v))))

        def chunks(v):
            return copies(v, v["BM"], v["VA"]) + copies(v, v["BN"], v["VB"])

        # registers: accumulators, fragments (twice where double-buffered), ~4 per unrolled async
        # copy (8 per plain 2-byte load), the rest
        def regs(v):
            frags = ((v["WM"] // mma_m) * 4 + (v["WN"] // 8) * 2) * (2 if dtype == "float64" else 1) * v["FB"]
            per_copy = [8 if vec * size < 4 else 4 for vec in (v["VA"], v["VB"])]
            return (accumulators(v) + frags + per_copy[0] * copies(v, v["BM"], v["VA"])
                    + per_copy[1] * copies(v, v["BN"], v["VB"]) + 48)

        def smem(v):
            return tile_shape(dtype, layout, v)["SMEM"]

        params = [
            Param("BM", (16, 32, 64, 128, 256)),
            Param("BN", (16, 32, 64, 128, 256)),
            Param("BK", bks),
            Param("WM", (16, 32, 64)),
            Param("WN", (16, 32, 64)),
            Param("STAGES", (2, 3, 4, 5, 6)),
            Param("VA", vecs),
            Param("VB", vecs),
            Param("GM", (1, 8)),
            Param("WK", (1, 2, 4)),
            Param("MINB", (1, 2)),
            # Copies planned once (LP=1, every precision); fp64 only for now: unmasked copies of
            # whole tiles (UC), fragments double-buffered (FB), and with FB whole tiles copied with
            # no bounds among the mma (LP=2: 4096^3 2.41 ms against 2.60,
            # compare_f64_planned_copies.jsonl). Tried and dropped for fp64: the stages tracked by
            # mbarriers instead of a block barrier (143d9ac; 2.67-3.06 ms against 2.61-2.70,
            # compare_f64_mbar_lp.jsonl), 16-byte fragment reads, by a k order of pairs (66 more IMAD, likely
            # moves into the DMMA's register order: 4096^3 2.80 ms against 2.59), by tiles stored
            # in fragment order (62b334a; its 8-byte copies: 3.63 ms) or by swapped operands,
            # C^T = B^T A^T (aadd3c5; 2.67 ms: 9 fewer instructions a loop, of 230, most of them
            # address and bounds arithmetic), compare_f64_fragment_pairs.jsonl; and fp64's m16n8k16
            # shape (e478dce: slower on all 12 tiles tried, 4096^3 best 2.90 ms against 2.59,
            # compare_f64_m16n8k16.jsonl)
            Param("UC", (0, 1) if dtype == "float64" else (0,), default=0),
            Param("FB", (1, 2) if dtype == "float64" else (1,), default=1),
            Param("LP", (0, 1, 2) if dtype == "float64" else (0, 1), default=0),
        ]
        constraints = [
            Constraint("block tile fits the problem", lambda v: v["BM"] <= max(16, pow2_at_least(m))
                       and v["BN"] <= max(16, pow2_at_least(n)), ("BM", "BN")),
            Constraint("warp tile divides block tile", lambda v: v["BM"] % v["WM"] == 0
                       and v["BN"] % v["WN"] == 0, ("BM", "BN", "WM", "WN")),
            Constraint("1 to 16 warps", lambda v: 1 <= warps(v) <= 16, ("BM", "BN", "WM", "WN", "WK")),
            Constraint("k slices of whole mma steps", lambda v: v["BK"] % (v["WK"] * mma_k) == 0, ("BK", "WK")),
            Constraint("double-buffered fragments with one k slice", lambda v: v["FB"] == 1 or v["WK"] == 1,
                       ("FB", "WK")),
            Constraint("planned copies without UC; whole tiles among the mma with FB",
                       lambda v: v["LP"] == 0 or (v["UC"] == 0 and (v["LP"] == 1 or v["FB"] == 2)), ("LP", "UC", "FB")),
            Constraint("accumulators fit in registers", lambda v: accumulators(v) <= 128, ("WM", "WN")),
            Constraint("A vector fits alignment and tile", lambda v: v["VA"] <= align_a and
                       (v["BK"] if a_kmajor else v["BM"]) % v["VA"] == 0, ("BM", "BK", "VA")),
            Constraint("B vector fits alignment and tile", lambda v: v["VB"] <= align_b and
                       (v["BK"] if b_kmajor else v["BN"]) % v["VB"] == 0, ("BN", "BK", "VB")),
            Constraint("pipeline no deeper than the k loop", lambda v: v["STAGES"] - 1 <= max(1, -(-k // v["BK"])),
                       ("BK", "STAGES")),
            Constraint("shared memory fits the device", lambda v: smem(v) <= target.smem_per_block_optin,
                       ("BM", "BN", "BK", "STAGES", "WK")),
            Constraint("grouping only with several block rows",
                       lambda v: v["GM"] == 1 or v["GM"] < -(-m // v["BM"]), ("BM", "GM")),
            Constraint("at most 16 copies per thread per stage", lambda v: chunks(v) <= 16,
                       ("BM", "BN", "BK", "WM", "WN", "VA", "VB", "WK")),
            Constraint("registers and shared memory fit MINB blocks", lambda v: regs(v) <= 255 and
                       regs(v) * 32 * warps(v) * v["MINB"] <= target.regs_per_sm and
                       smem(v) * v["MINB"] <= target.smem_per_sm,
                       ("BM", "BN", "BK", "WM", "WN", "STAGES", "VA", "VB", "WK", "MINB", "FB")),
        ]
        derived = {"THREADS": lambda v: 32 * warps(v), "MMA_M": lambda v: mma_m, "MMA_K": lambda v: mma_k,
                   "ACC_PER_MMA": lambda v: acc_per, "REGS_EST": regs}
        for key in ("SA_ROW", "SB_ROW", "SA_TILE", "SB_TILE", "SMEM"):
            derived[key] = (lambda name: lambda v: tile_shape(dtype, layout, v)[name])(key)
        short = type_context(problem)["short"]

        def namer(v):
            return (f"gemm_mma_{short}_{layout.lower()}_{v['BM']}x{v['BN']}x{v['BK']}_w{v['WM']}x{v['WN']}"
                    f"_s{v['STAGES']}_va{v['VA']}_vb{v['VB']}_g{v['GM']}_k{v['WK']}_mb{v['MINB']}"
                    + ("_uc" if v["UC"] else "") + ("_fb2" if v["FB"] == 2 else "")
                    + (f"_lp{v['LP']}" if v["LP"] else ""))

        return Space(params, constraints, derived, namer)

    def default_config(self, problem: Problem, target: Target) -> Config:
        """A large tile for large problems, smaller ones as the problem shrinks: the largest
        tile of which there are at least as many as SMs (else the one of most tiles), so that
        no SM idles for want of a tile. On the recorded H200 mma spaces (tests/data) this took
        the default from 0.63 to 0.88 of the optimum at 1000^3 and from 0.41 to 0.68 at
        128x4096x4096, where the largest tile that fitted had left half the SMs or more
        without one; 2048^3 and 3000x5000x700 kept theirs."""
        return self.model_picks(problem, target, 1)[0]

    def model_picks(self, problem: Problem, target: Target, count: int) -> list[Config]:
        """The default, then the config of the next larger tile, the one the default's rule
        passed over (at most ``count``). The rule of at least as many tiles as SMs is a step,
        and a tile just short of it can be the better: at 128x4096x4096, 128 tiles of 64x64 on
        132 SMs ran at 0.91 of the optimum (0.96 with 6 stages) where the default's 256 tiles
        of 32x64 ran at 0.77 (the recorded H200 mma space, tests/data). Smaller tiles than the
        default's are left to the walk: as third picks they took kgen at 3000x5000x700 from 7
        trials to 95 % to 10 (scripts/bench_search.py, 20 seeds). A tile is tried only as far
        as it is needed (the default stands in the untuned dispatch path)."""
        space = self.space(problem, target)
        ranked = sorted(range(len(TILE_PREFERENCE)), key=lambda j: self._tile_rank(problem, target, TILE_PREFERENCE[j]))
        for i in ranked:
            default = self._tile_config(space, problem, TILE_PREFERENCE[i])
            if default is not None:
                break
        else:
            return [self.first_valid(space, (), problem)][:count]
        if count < 2:
            return [default][:count]
        larger = next((c for j in range(i - 1, -1, -1)
                       if (c := self._tile_config(space, problem, TILE_PREFERENCE[j])) is not None), None)
        return [default] + ([larger] if larger is not None else [])

    @staticmethod
    def _tile_rank(problem: Problem, target: Target, tile: tuple) -> tuple:
        tiles = -(-problem["m"] // tile[0]) * -(-problem["n"] // tile[1])
        return (tiles < target.sm_count, -tile[0] * tile[1] if tiles >= target.sm_count else -tiles)

    @staticmethod
    def _tile_config(space: Space, problem: Problem, tile: tuple) -> Config | None:
        """The first valid config of one tile of TILE_PREFERENCE (BM, BN, WM, WN), or None."""
        dtype = problem["dtype"]
        bm, bn, wm, wn = tile
        widest = 16 // ITEMSIZE[dtype]
        # 16-bit tiles of 64x64 or less take k tiles of 64 first: on the recorded H200 mma
        # spaces 64x64 ran at 0.98 of the optimum with them at 1000^3 against 0.88 with 32,
        # and 32x64 at 0.77 against 0.68 at 128x4096x4096
        choices = ATOMS[dtype][3]
        k_tiles = (choices[2], choices[1]) if ITEMSIZE[dtype] == 2 and bm * bn <= 64 * 64 else (choices[1],)
        # fp64 double-buffers its fragments where it can: 64x64x16 tiles of 32x32 warp tiles at
        # 4096^3 ran 2.73 ms against 3.08 without (docs/evidence/nvidia-h200/compare_f64_uc_fb.jsonl)
        # Every precision plans its copies (LP=1; fp64 LP=2 with FB): at fp64 4096^3 128x64x16
        # tiles of 32x32 warp tiles so ran 2.41 ms where the tuned 64x128x16 without planned
        # copies ran 2.60 (compare_f64_planned_copies.jsonl); bf16 3000x5000x700's tuned tile
        # 0.1018 ms against 0.1134, fp16's 0.1042 against 0.1103 (compare_16bit_planned_copies.jsonl)
        buffers = (2, 1) if dtype == "float64" else (1,)
        candidates = (dict(BM=bm, BN=bn, BK=bk, WM=wm, WN=wn, STAGES=stages, VA=va, VB=vb, GM=gm, WK=1,
                           MINB=1, FB=fb, LP=(fb if dtype == "float64" else 1))
                      for va in (min(widest, problem["align_a"]), 1)
                      for vb in (min(widest, problem["align_b"]), 1)
                      for fb in buffers for stages in (4, 3, 2) for bk in k_tiles for gm in (8, 1))
        return next((space.make(v) for v in candidates if space.is_valid(v)), None)

    # ---- launch -----------------------------------------------------------------------
    def launch(self, problem: Problem, config: Config) -> Launch:
        v = config.as_dict()
        tiles = -(-problem["m"] // v["BM"]) * -(-problem["n"] // v["BN"])
        warps = (v["BM"] // v["WM"]) * (v["BN"] // v["WN"]) * v["WK"]
        return Launch((max(tiles, 1), 1, 1), (32 * warps, 1, 1),
                      tile_shape(problem["dtype"], problem["layout"], v)["SMEM"])
