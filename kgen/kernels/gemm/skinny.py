"""GEMM with one small side (min(M, N) <= 16): the big operand streamed from memory on CUDA cores.

A problem such as 8 x 7968 x 2480 or 13128 x 16 x 1253 is bound by reading its big operand once
(79 MB and 42 MB: 19 and 10 us at the H200's 4.25 TB/s), not by arithmetic. The tile families
waste most of each tile on it (wgmma's narrowest tile is 64 wide) and leave SMs idle; this
family streams the big operand in 16-byte vectors straight into registers, several loads in
flight per thread, splits K over blocks until every SM has work, and does the few FMAs a byte
needs on the CUDA cores with float32 accumulation (so a float32 problem asked for as tf32 is
computed exactly). The small side is the kernel's rows: with N the smaller, it computes
C^T = B^T A^T (``SWAP``). float16, bfloat16 and float32 inputs, any layout and alignment, the
fused epilogue of ``kgen.kernels.gemm.tc``. Template: ``templates/gemm/skinny.cu.j2``.

Its untuned choice comes from ``predict_seconds``, an analytical model of its own (the big
operand's bytes over the bandwidth the loads in flight sustain, instruction issue, launch and
split-K costs), ranked against the tile families' cost-model picks like theirs are.

>>> from kgen.problem import Target
>>> spec = GemmSkinny()
>>> p = spec.problem(8, 7968, 2480, "bfloat16", "TN")
>>> spec.supports(p, Target.h200()), spec.supports(spec.problem(64, 64, 64, "bfloat16", "NN"), Target.h200())
(True, False)
>>> spec.model_choice(p, Target.h200())[0].name.startswith("gemm_skinny_bf16_tn_s8_")
True
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, Mapping

import numpy as np

from kgen.intmath import pow2_at_least
from kgen.kernels.gemm.dtypes import ITEMSIZE, TC_INPUTS, TC_OUTPUTS
from kgen.kernels.gemm.tc import TensorCoreGemm
from kgen.kernels.gemm.workspace import split_k_workspace
from kgen.problem import Problem, Target
from kgen.space import Config, Constraint, Param, Space
from kgen.spec import Launch

SMALL_MAX = 16              # the largest small side the family runs
MODEL_VERSION = "skinny-analytic-2"
# The analytical model's constants (H200 / H100 SXM): DRAM rate (the measured copy rate), the
# memory latency the loads in flight cover, L2 rate for the split-K workspace, the fixed cost
# of a launch as CUDA events see it (the tile families' fitted launch_us are 4.6-8 us), an SM's
# issue rate (thread instructions per clock) and clock, and the most of the DRAM rate one SM
# draws (sm_share times its fair share: a few SMs cannot saturate the memory).
HW = {"dram_bw": 4.25e12, "latency_s": 0.9e-6, "l2_bw": 9e12, "launch_s": 4.5e-6, "issue_clk": 128.0,
      "clock_hz": 1.755e9, "split_s": 1.5e-6, "max_threads_sm": 2048, "sm_share": 2.5, "stage_round": 0.5}


def _cdiv(a, b):
    return -(-a // b)


def roles(problem: Problem) -> dict[str, Any]:
    """How the kernel sees ``problem``: which side is small (SWAP: N), the small and big sizes,
    whether X and Y have their unit stride along k, and their alignments (elements)."""
    m, n, layout = problem["m"], problem["n"], problem["layout"]
    swap = n < m
    if swap:       # X = B^T (B N: unit stride along i), Y = A^T (A N: unit stride along k)
        return dict(swap=1, small=n, big=m, x_kcontig=int(layout[1] == "T"), y_kcontig=int(layout[0] == "N"),
                    align_x=problem["align_b"], align_y=problem["align_a"])
    return dict(swap=0, small=m, big=n, x_kcontig=int(layout[0] == "N"), y_kcontig=int(layout[1] == "T"),
                align_x=problem["align_a"], align_y=problem["align_b"])


class GemmSkinny(TensorCoreGemm):
    family = "gemm_skinny"
    template = "gemm/skinny.cu.j2"
    tf32_rounding = None          # float32 is computed in float32, exactly

    def supports(self, problem: Problem, target: Target) -> bool:
        """Half and float32 inputs with a side of at most SMALL_MAX, and some k to stream (K = 0,
        C = beta * C, is left to the families that scale C without reading A or B)."""
        return (problem["dtype"] in ("float16", "bfloat16", "float32") and min(problem["m"], problem["n"]) <= SMALL_MAX
                and problem["k"] >= 1)

    # ---- space ------------------------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        dtype, layout, k = problem["dtype"], problem["layout"], problem["k"]
        r = roles(problem)
        elt = ITEMSIZE[dtype]
        y_k = r["y_kcontig"]
        pad = row_pad(r)
        vecs = vector_choices(elt, y_k, r["align_y"])
        small_cap, big_cap, k_cap = pow2_at_least(r["small"]), pow2_at_least(r["big"]), pow2_at_least(k)

        def bj(v):
            return block_columns(y_k, v)

        def kc(v):
            return chunk(y_k, v)

        def smem(v):
            return shared_bytes(v["S"], kc(v) + halo(y_k, r["align_y"], v) + pad, bj(v))

        def threads(v):
            return 32 * v["WJ"] * v["WK"]

        def live_regs(v):
            return live_registers(y_k, elt, v)

        params = [
            Param("S", (1, 2, 4, 8, 16)),
            Param("V", vecs),
            Param("U", (1, 2, 4, 8)),
            Param("CJ", (1, 2, 4, 8) if y_k else (1,)),
            Param("WJ", (1, 2, 4, 8, 16)),
            Param("WK", (1, 2, 4, 8)),
            Param("KJ", (0,) if y_k else (32, 64, 128, 256)),
            Param("R", (1, 2, 4, 8) if y_k else (1,)),
            Param("SPLITK", (1, 2, 4, 8, 16, 32, 64)),
        ]
        constraints = [
            Constraint("small tile fits the small side", lambda v: v["S"] <= small_cap, ("S",)),
            Constraint("64 to 256 threads", lambda v: 64 <= threads(v) <= 256, ("WJ", "WK")),
            Constraint("block columns fit the big side", lambda v: bj(v) <= max(32, big_cap),
                       ("WJ", "CJ", "V")),
            Constraint("accumulators and loads in flight fit in registers", lambda v: live_regs(v) <= 96
                       and v["S"] * (v["CJ"] if y_k else v["V"]) <= 64, ("S", "V", "U", "CJ")),
            Constraint("each warp's k rows are whole unrolled groups",
                       lambda v: y_k or v["KJ"] % (v["U"] * v["WK"]) == 0, ("U", "WK", "KJ")),
            Constraint("chunk of k fits the problem", lambda v: kc(v) <= max(k_cap, 32 * v["V"] if y_k else 32),
                       ("WK", "U", "V", "KJ", "R")),
            Constraint("every split has a chunk of k", lambda v: _cdiv(k, kc(v)) >= v["SPLITK"],
                       ("WK", "U", "V", "KJ", "R", "SPLITK")),
            Constraint("split only while blocks are few",
                       lambda v: v["SPLITK"] == 1 or _cdiv(r["big"], bj(v)) * _cdiv(r["small"], v["S"]) * v["SPLITK"]
                       <= 16 * target.sm_count, ("S", "WJ", "CJ", "V", "SPLITK")),
            Constraint("shared memory fits", lambda v: smem(v) <= min(96 * 1024, target.smem_per_block_optin),
                       ("S", "V", "U", "WK", "KJ", "R", "WJ", "CJ")),
        ]
        derived = {
            "BJ": bj, "KC": kc, "XV": lambda v: x_vector(problem, v), "SMEM": smem, "THREADS": threads,
            "PEEL": lambda v: int(halo(y_k, r["align_y"], v) > 0), "HALO": lambda v: halo(y_k, r["align_y"], v),
            "SWAP": lambda v: r["swap"], "X_KCONTIG": lambda v: r["x_kcontig"], "Y_KCONTIG": lambda v: y_k,
        }
        short = "f32" if dtype == "float32" else TC_INPUTS[dtype][3]

        def namer(v):
            return (f"gemm_skinny_{short}_{layout.lower()}_s{v['S']}_v{v['V']}_u{v['U']}_c{v['CJ']}"
                    f"_w{v['WJ']}x{v['WK']}_kc{v['KJ']}_r{v['R']}_k{v['SPLITK']}")

        return Space(params, constraints, derived, namer)

    def default_config(self, problem: Problem, target: Target) -> Config:
        picked = self.model_choice(problem, target)
        if picked is not None:
            return picked[0]
        return self.first_valid(self.space(problem, target), (), problem)

    # ---- the untuned choice: an analytical model ---------------------------------------
    def model_choice(self, problem: Problem, target: Target) -> tuple[Config, float] | None:
        ranked = self._ranked(problem, target, 1)
        return ranked[0] if ranked else None

    def model_picks(self, problem: Problem, target: Target, count: int) -> list[Config]:
        """The ``count`` configs a tune measures first: the model's best, the last of them
        replaced by its pick spread over the SMs where the first runs on few (``spread_choice``)."""
        picks = [config for config, _ in self._ranked(problem, target, count)]
        spread = self.spread_choice(problem, target, picks[0]) if count >= 2 and picks else None
        if spread is not None and spread[0] not in picks:
            picks = picks[:count - 1] + [spread[0]]
        return picks

    def _ranked(self, problem: Problem, target: Target, count: int) -> list[tuple[Config, float]]:
        """Up to ``count`` (config, predicted ms), fastest first, each confirmed valid in the space."""
        if not self.supports(problem, target):
            return []
        cols = candidates(problem, target)
        if not len(cols["S"]):
            return []
        times = predict_seconds(problem, target, cols)
        return self._valid_in_order(problem, target, cols, times, np.argsort(times, kind="stable"), count)

    def _valid_in_order(self, problem: Problem, target: Target, cols, times, order, count: int):
        """Up to ``count`` (config, predicted ms) of the candidate columns ``cols`` taken in
        ``order``, each confirmed valid in the space; a time of inf ends the list."""
        space = self.space(problem, target)
        found = []
        for i in order:
            if not np.isfinite(times[i]):
                break
            values = {name: int(cols[name][i]) for name in PARAMS}
            if space.is_valid(values):
                found.append((space.make(values), float(times[i]) * 1e3))
                if len(found) == count:
                    break
        return found

    def spread_choice(self, problem: Problem, target: Target, first: Config) -> tuple[Config, float] | None:
        """(config, predicted ms) of the model's best config that runs at least
        ``SPREAD_SMS`` of the SMs' worth of blocks (or as many as any config does), where its
        pick ``first`` runs fewer: what a first-call race times beside that pick. On problems
        with a few outputs and a long K the model prefers one or a few unsplit blocks, and such
        picks ran 2-3x slower than splits over many blocks (``spread_blocks``); None where the
        pick already spreads or no other config does."""
        if not self.supports(problem, target):
            return None
        cols = candidates(problem, target)
        if not len(cols["S"]):
            return None
        blocks = spread_blocks(problem, cols)
        wanted = min(SPREAD_SMS * target.sm_count, blocks.max())
        if spread_blocks(problem, {key: np.array([first[key]]) for key in PARAMS})[0] >= wanted:
            return None
        times = np.where(blocks >= wanted, predict_seconds(problem, target, cols), np.inf)
        # predictions within 0.1 us are ties (the launch and split terms dominate them): the
        # config with more bytes in flight per lane first
        inflight = cols["U"] * cols["V"] * (cols["CJ"] if roles(problem)["y_kcontig"] else 1)
        found = self._valid_in_order(problem, target, cols, times, np.lexsort((-inflight, np.round(times * 1e7))), 1)
        return found[0] if found else None

    def model_version(self) -> str | None:
        return MODEL_VERSION

    # ---- launch -----------------------------------------------------------------------
    def launch(self, problem: Problem, config: Config) -> Launch:
        r = roles(problem)
        v = _values(problem, config)
        return Launch((column_tiles(r["y_kcontig"], r["align_y"], v, r["big"]), v["SPLITK"], _cdiv(r["small"], v["S"])),
                      (v["THREADS"], 1, 1), v["SMEM"])

    def arg_builder(self, problem: Problem, config: Config, lds: tuple):
        """(a, b, c, bias pointers, alpha, beta, stream, device) -> arguments: X and Y are A and B,
        or B and A with SWAP; the split-K workspace is one per device and stream."""
        r = roles(problem)
        swap = r["swap"]
        lda, ldb, ldc = (np.int64(max(ld, 1)) for ld in lds)
        dims = (np.int32(r["small"]), np.int32(r["big"]), np.int32(problem["k"]))
        x_ld, y_ld = (ldb, lda) if swap else (lda, ldb)
        scratch = split_k_workspace(workspace_sizes(problem, config), self.template, fill=0)
        u64, f32 = np.uint64, np.float32

        def build(pa, pb, pc, pbias, alpha, beta, stream=None, device=None):
            x, y = (pb, pa) if swap else (pa, pb)
            return (u64(x), u64(y), u64(pc), u64(pbias), *dims, x_ld, y_ld, ldc, f32(alpha), f32(beta),
                    *scratch(stream, device))

        return build

    def arg_recipe(self, problem: Problem, config: Config) -> list[dict]:
        r = roles(problem)
        x, y = ("b", "a") if r["swap"] else ("a", "b")
        partial_bytes, counter_bytes = workspace_sizes(problem, config)
        workspace = ([{"workspace": "partials", "bytes": partial_bytes, "fill": 0},
                      {"workspace": "counters", "bytes": counter_bytes, "fill": 0}] if partial_bytes else
                     [{"value": 0, "type": "uint64"}, {"value": 0, "type": "uint64"}])
        return [{"pointer": x}, {"pointer": y}, {"pointer": "c"}, {"pointer": "bias", "optional": True},
                {"value": r["small"], "type": "int32"}, {"value": r["big"], "type": "int32"},
                {"value": problem["k"], "type": "int32"}, {"ld": x, "type": "int64"}, {"ld": y, "type": "int64"},
                {"ld": "c", "type": "int64"},
                {"scalar": "alpha", "type": "float32", "default": 1.0},
                {"scalar": "beta", "type": "float32", "default": 0.0}, *workspace]


def live_registers(y_kcontig: int, elt: int, v):
    """Accumulators, loads in flight and (Y k-contiguous) a k's X values: 32-bit registers of one
    thread, for one config's values or numpy columns of many."""
    cols = v["CJ"] if y_kcontig else v["V"]
    loads = v["U"] * (v["CJ"] if y_kcontig else 1) * np.maximum(1, v["V"] * elt // 4)
    return v["S"] * cols + loads + (v["S"] if y_kcontig else 0)


def block_columns(y_kcontig: int, v) -> int:
    """BJ: the big side's columns of one block."""
    return v["WJ"] * v["CJ"] if y_kcontig else v["WJ"] * 32 * v["V"]


def column_tiles(y_kcontig: int, align_y: int, v, big):
    """Blocks along the big side: cdiv(big, BJ); where Y's rows are peeled, each warp's CJ columns
    lie V apart (so they share one alignment offset), sets of them WJ to a block:
    cdiv(cdiv(big, V CJ) V, WJ). Numbers or numpy columns."""
    peeled = _cdiv(_cdiv(big, v["V"] * v["CJ"]) * v["V"], v["WJ"])
    whole = _cdiv(big, block_columns(y_kcontig, v))
    return np.where(halo(y_kcontig, align_y, v) > 0, peeled, whole) if isinstance(v["V"], np.ndarray) else (
        peeled if halo(y_kcontig, align_y, v) else whole)


def chunk(y_kcontig: int, v) -> int:
    """KC: the values of k one staging of X covers."""
    return v["R"] * v["WK"] * v["U"] * 32 * v["V"] if y_kcontig else v["KJ"]


def vector_choices(elt: int, y_kcontig: int, align_y: int) -> tuple[int, ...]:
    """V: Y's vector widths (elements, up to 16 bytes). Along k, any: rows that are not V-aligned
    are peeled (``halo``); along the big side, what Y's alignment allows."""
    widest = 16 // elt if y_kcontig else min(16 // elt, align_y)
    return tuple(v for v in (1, 2, 4, 8) if v <= widest)


def halo(y_kcontig: int, align_y: int, v):
    """HALO: X values staged before each chunk where Y's rows are peeled (V wider than their
    alignment): 8, a whole vector of every XV; else 0. Numbers or numpy columns."""
    if isinstance(v["V"], np.ndarray):
        return np.where((y_kcontig == 1) & (v["V"] > align_y), 8, 0)
    return 8 if y_kcontig and v["V"] > align_y else 0


def shared_bytes(rows, pitch, bj):
    """Dynamic shared memory of a block: X's staged chunk (``rows`` rows ``pitch`` floats apart)
    and the block's sums, as float."""
    return 4 * rows * (pitch + bj)


def row_pad(r: Mapping[str, Any]) -> int:
    """Floats between X's staged rows past their values of k (``roles``' Y k-contiguous and X
    i-contiguous: 1, so that the staging's store of one k to every row meets no bank conflict;
    else 0)."""
    return int(r["y_kcontig"] and not r["x_kcontig"])


def x_vector(problem: Problem, v) -> int:
    """XV: the widest vector X's staging reads along X's unit stride."""
    r = roles(problem)
    along = chunk(r["y_kcontig"], v) + halo(r["y_kcontig"], r["align_y"], v) if r["x_kcontig"] else v["S"]
    widest = min(16 // ITEMSIZE[problem["dtype"]], r["align_x"], along)
    return max(x for x in (1, 2, 4, 8) if x <= widest and along % x == 0)


def _values(problem: Problem, config: Config) -> dict:
    """The config's parameters and the derived values launches need (BJ, KC, THREADS, SMEM)."""
    v = config.as_dict()
    r = roles(problem)
    bj, kc = block_columns(r["y_kcontig"], v), chunk(r["y_kcontig"], v)
    return {**v, "BJ": bj, "KC": kc, "THREADS": 32 * v["WJ"] * v["WK"],
            "SMEM": shared_bytes(v["S"], kc + halo(r["y_kcontig"], r["align_y"], v) + row_pad(r), bj)}


def workspace_sizes(problem: Problem, config: Config) -> tuple[int, int]:
    """(partial sums, counters) bytes of a split-K config: each split's float sums of the padded
    small side by the big side, a counter per tile; (0, 0) without split-K."""
    split = config["SPLITK"]
    if split == 1:
        return 0, 0
    r = roles(problem)
    v = _values(problem, config)
    rows = _cdiv(r["small"], v["S"])
    return split * rows * v["S"] * r["big"] * 4, rows * column_tiles(r["y_kcontig"], r["align_y"], v, r["big"]) * 4


PARAMS = ("S", "V", "U", "CJ", "WJ", "WK", "KJ", "R", "SPLITK")
SPLITS = (1, 2, 4, 8, 16, 32, 64)
# ``spread_choice``: the fraction of the SMs a race's second skinny candidate fills with blocks.
# H100 (docs/evidence/nvidia-h100-80gb-hbm3/gemv_route_*_ca354f7.json): 24 x 1 x 1240, 180 x 1 x
# 2184 and 184 x 1 x 8552 ran the model's unsplit picks of 1-6 blocks in 18.7-25.8 us, where
# 1 x 22 x 1824 and 1 x 56 x 1927 ran picks split 16 ways in 7.9-8.7 us (cuBLAS 6.6-9.1).
SPREAD_SMS = 0.5


@functools.lru_cache(maxsize=64)
def _cores(dtype: str, y_k: int, align_y: int, pad: int, smem_limit: int) -> dict[str, np.ndarray]:
    """Every combination of the parameters but SPLITK that no problem size rules out, as columns
    (a numpy mirror of the space's size-independent constraints)."""
    elt = ITEMSIZE[dtype]
    vecs = vector_choices(elt, y_k, align_y)
    grid = np.array(list(itertools.product((1, 2, 4, 8, 16), vecs, (1, 2, 4, 8), (1, 2, 4, 8) if y_k else (1,),
                                           (1, 2, 4, 8, 16), (1, 2, 4, 8), (0,) if y_k else (32, 64, 128, 256),
                                           (1, 2, 4, 8) if y_k else (1,))),
                    dtype=np.int64)
    c = dict(zip(PARAMS[:-1], grid.T))
    threads = 32 * c["WJ"] * c["WK"]
    cols = np.where(y_k, c["CJ"], c["V"])
    live = live_registers(y_k, elt, c)
    bj, kc = block_columns(y_k, c), chunk(y_k, c)
    c["HALO"] = halo(y_k, align_y, c)
    keep = ((threads >= 64) & (threads <= 256) & (live <= 96) & (c["S"] * cols <= 64)
            & ((y_k == 1) | (c["KJ"] % np.maximum(c["U"] * c["WK"], 1) == 0))
            & (shared_bytes(c["S"], kc + c["HALO"] + pad, bj) <= smem_limit))
    return {name: col[keep] for name, col in c.items()}


def candidates(problem: Problem, target: Target, all_rows: bool = False) -> dict[str, np.ndarray]:
    """The valid configs of ``problem`` the model ranks, as columns (parameters, BJ, KC, THREADS,
    SMEM, HALO): the space's constraints mirrored in numpy, each core crossed with every split. Only
    S of the small side's power of two and half of it, unless ``all_rows``: fewer rows a block
    means more passes over the big operand, which the model never prefers by more."""
    r = roles(problem)
    y_k, k = r["y_kcontig"], max(1, problem["k"])
    cores = _cores(problem["dtype"], y_k, r["align_y"], row_pad(r), min(96 * 1024, target.smem_per_block_optin))
    if not all_rows:
        rows = min(SMALL_MAX, pow2_at_least(r["small"]))
        keep = (cores["S"] == rows) | (cores["S"] * 2 == rows)
        cores = {name: col[keep] for name, col in cores.items()}
    size = len(cores["S"])
    c = {name: np.repeat(col, len(SPLITS)) for name, col in cores.items()}
    c["SPLITK"] = np.tile(np.array(SPLITS, dtype=np.int64), size)
    bj, kc = block_columns(y_k, c), chunk(y_k, c)
    small_cap, big_cap, k_cap = pow2_at_least(r["small"]), pow2_at_least(r["big"]), pow2_at_least(k)
    blocks = _cdiv(r["big"], bj) * _cdiv(r["small"], c["S"])
    keep = ((c["S"] <= small_cap) & (bj <= max(32, big_cap))
            & (kc <= np.maximum(k_cap, 32 * c["V"] if y_k else 32)) & (_cdiv(k, kc) >= c["SPLITK"])
            & ((c["SPLITK"] == 1) | (blocks * c["SPLITK"] <= 16 * target.sm_count)))
    out = {name: col[keep] for name, col in c.items()}
    out.update(BJ=bj[keep], KC=kc[keep], THREADS=32 * out["WJ"] * out["WK"],
               SMEM=shared_bytes(out["S"], kc[keep] + out["HALO"] + row_pad(r), bj[keep]))
    return out


def spread_blocks(problem: Problem, col: Mapping[str, np.ndarray]) -> np.ndarray:
    """Blocks each config launches (numpy columns of the parameters): rows x column tiles x splits."""
    r = roles(problem)
    v = {key: np.asarray(col[key], dtype=np.int64) for key in ("S", "V", "CJ", "WJ", "SPLITK")}
    tiles = column_tiles(r["y_kcontig"], r["align_y"], v, r["big"])
    return _cdiv(r["small"], v["S"]) * tiles * v["SPLITK"]


def staging_rounds(problem: Problem, col: Mapping[str, np.ndarray]) -> np.ndarray:
    """Rounds of loads one staging of X's chunk takes (the template's stage_x: each thread's
    BATCH vectors of XV in flight, then stored), per config (numpy columns)."""
    r = roles(problem)
    elt = ITEMSIZE[problem["dtype"]]
    s, xrow = col["S"], col["KC"] + col["HALO"]
    along = xrow if r["x_kcontig"] else s
    widest = np.minimum(np.minimum(16 // elt, r["align_x"]), along)
    xv = np.ones_like(s)
    for width in (2, 4, 8):
        xv = np.where((width <= widest) & (along % width == 0), width, xv)
    words = np.ceil(xv * elt / 4)
    batch = np.where(words >= 4, 2, np.floor(8 / words))
    return np.ceil(s * xrow / xv / (col["THREADS"] * batch))


def predict_seconds(problem: Problem, target: Target, col: Mapping[str, np.ndarray]) -> np.ndarray:
    """Predicted seconds of each config (columns: parameters and BJ, KC, THREADS, SMEM, HALO) on
    ``problem``.

    The big operand's bytes go at the rate the loads in flight sustain (Little's law: resident
    warps x bytes a warp has in flight / latency, at most the DRAM rate), over the waves the
    blocks run in; instruction issue (FMAs, conversions, shared reads) bounds it from the other
    side; then the launch, each block's X staging through L2 and split-K's workspace round trip.
    """
    m, n, k = problem["m"], problem["n"], max(1, problem["k"])
    r = roles(problem)
    elt, out = ITEMSIZE[problem["dtype"]], TC_OUTPUTS[problem["out_dtype"]][1]
    col = {key: np.asarray(col[key], dtype=np.float64) for key in ("S", "V", "U", "CJ", "WJ", "KC", "SPLITK",
                                                                      "THREADS", "SMEM", "HALO")}
    s, vw, u, cj = col["S"], col["V"], col["U"], col["CJ"]
    kc, split, threads, smem = col["KC"], col["SPLITK"], col["THREADS"], col["SMEM"]
    y_k = r["y_kcontig"]
    sms = target.sm_count
    small, big = r["small"], r["big"]
    rows = np.ceil(small / s)
    tiles_j = column_tiles(y_k, r["align_y"], {key: col[key].astype(np.int64) for key in ("V", "CJ", "WJ")},
                           big).astype(np.float64)
    blocks = rows * tiles_j * split
    # residency: threads, shared memory, and registers: accumulators, loads in flight, a k's X
    # values and ~60 more (addresses, indices, conversions: 152-191 registers in the cubins of
    # three picks of 104-146 estimated so)
    regs = np.minimum(255, live_registers(y_k, elt, col) + (0 if y_k else s) + 60)
    by_regs = np.floor(target.regs_per_sm / (np.ceil(regs / 8) * 8 * threads))
    by_smem = np.floor(target.smem_per_sm / (smem + 1024))
    bps = np.maximum(1, np.minimum.reduce([np.floor(HW["max_threads_sm"] / threads), by_smem, by_regs,
                                           np.full_like(s, 32)]))
    slots = sms * bps
    resident = np.minimum(blocks, slots)
    waves = np.ceil(blocks / slots)
    # bytes one warp has in flight: U vector loads per lane (and per column with Y k-contiguous)
    inflight = 32 * u * vw * elt * np.where(y_k, cj, 1)
    warps = threads / 32
    # the k each split really covers (chunks, whole), and the columns each block really reads
    k_split = np.minimum(k, np.ceil(np.ceil(k / kc) / split) * kc)
    bytes_y = k * big * elt * rows
    active_sms = np.minimum(blocks, sms)
    rate = np.minimum(np.minimum(HW["dram_bw"], resident * warps * inflight / HW["latency_s"]),
                      active_sms * HW["sm_share"] * HW["dram_bw"] / sms)
    # a last partial wave streams at its own (lower) rate: count waves whole
    t_stream = bytes_y / rate * np.where(blocks > slots, waves * slots / blocks, 1.0)
    # issue: per k and output column, S FMAs + a conversion (half inputs) + shared reads of X
    cvt = 0.0 if problem["dtype"] == "float32" else 1.0
    # (Y k-contiguous: a scalar read of X per k and row serves the warp's CJ columns)
    lds = np.where(y_k, s / cj, np.ceil(s / 4) / vw)
    per = s + cvt + lds + np.where(y_k, 1.0 / cj, 1.0) / np.maximum(vw, 1)
    instructions = per * k * big * rows
    t_issue = instructions / (np.minimum(blocks, slots) / np.maximum(bps, 1) * HW["issue_clk"] * HW["clock_hz"]
                              ) * np.where(blocks > slots, waves * slots / blocks, 1.0)
    # a block's chunks run one after another, each staging X (its rounds of loads one after
    # another, every round a round trip, mostly to L2) before reading Y (a round trip)
    t_chain = np.ceil(k_split / kc) * waves * HW["latency_s"] * (1 + HW["stage_round"] * staging_rounds(problem, col))
    x_bytes = tiles_j * rows * s * k * elt
    t_x = x_bytes / HW["l2_bw"]
    ws_bytes = np.where(split > 1, 2 * split * rows * s * big * 4, 0.0)
    t_split = np.where(split > 1, HW["split_s"] + ws_bytes / HW["l2_bw"], 0.0)
    t_out = (m * n * out) / HW["dram_bw"]
    return HW["launch_s"] + np.maximum(np.maximum(t_stream, t_issue), t_chain) + t_x + t_split + t_out
