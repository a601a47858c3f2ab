"""A cost model of the GEMM families: it picks a config for a problem nobody tuned.

For a (family spec, Problem, Target) it ranks candidate configs by a predicted time and
returns the best valid one. The prediction is an analytical estimate of the kernel's time on
the device (waves of tiles over the SMs; each tile's k-blocks bounded by tensor / FMA
throughput, shared-memory reads, the L2 feed of each SM and load latency over the pipeline
depth; a fixed launch and prologue cost, each tile's fixed cost, the epilogue, split-K's
reduction; floors of the L2 and DRAM traffic: A read once per block column, B once per block
row); all of it but the launch (``launch_us``, measured on problems of almost no work) times a
learned correction exp(w . features) fitted by ``scripts/train_gemm_cost.py`` on recorded
measurements. Every constant, the analytical ones included, lives in ``cost_model.json`` next
to this file, whose ``version`` names them.

Candidates: per family a catalogue of config *cores* (the parameters that do not follow
from the problem: tiles, warp or thread tiles, pipeline depth, consumers ...; from the
shipped tuning records, the recorded spaces' fastest configs and the family defaults of the
recorded problems), each crossed with the knobs a problem decides (split-K, clusters,
grouping, TMA stores, tf32 operand handling, vector widths clipped to the problem's
alignment). A numpy mirror of each family's constraints keeps the valid ones, all at once;
the best predicted is confirmed with ``space.is_valid`` (a mirror that drifted from the space
costs time, never a wrong config). A problem none of them fits gets ``spec.default_config``.

>>> from kgen.problem import Target
>>> from kgen.registry import get_spec
>>> from kgen.kernels.gemm.problem import tc_problem
>>> spec, target = get_spec("gemm_wgmma"), Target.h200()
>>> config = choose(spec, tc_problem("gemm_wgmma", 4096, 4096, 4096, "bfloat16", "NN"), target)
>>> config.name.startswith("gemm_wgmma_bf16_nn_")
True
>>> model_version().startswith("gemm-cost-1+")
True
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from kgen.kernels.gemm.dtypes import DTYPES
from kgen.kernels.gemm.rules import SPLIT_K
from kgen.kernels.gemm.mma_geometry import ATOMS
from kgen.kernels.gemm.wgmma_geometry import (BK, MAX_ACC_FLOATS, RS_FRAGMENT_REGS, SPLITS, STAGE_CHOICES, block_k,
                                              copied_transposed, register_choices, smem_bytes, staging_choices)
from kgen.problem import Problem, Target
from kgen.space import Config, Space

MODEL_PATH = Path(__file__).with_name("cost_model.json")
FAMILIES = ("gemm_wgmma", "gemm_mma", "gemm")

# the parameters of each family, in a fixed column order (all take integer values)
PARAMS = {
    "gemm_wgmma": ("BM", "BN", "BK", "STAGES", "CONSUMERS", "GM", "PINGPONG", "SPLITK", "TMA_STORE", "CLUSTER",
                   "XS", "RS"),
    "gemm_mma": ("BM", "BN", "BK", "WM", "WN", "STAGES", "VA", "VB", "GM", "WK", "MINB", "UC", "FB", "LP"),
    "gemm": ("BM", "BN", "TM", "TN", "BK", "VA", "VB", "DB", "UNROLL", "GM", "SK", "MINB"),
}
# the parameters a catalogue core keeps (mma: BK, VA, VB in bytes); the rest follow the problem
CORE = {
    "gemm_wgmma": ("BM", "BN", "STAGES", "CONSUMERS", "PINGPONG"),
    "gemm_mma": ("BM", "BN", "BK", "WM", "WN", "STAGES", "VA", "VB", "GM", "WK", "MINB", "UC", "FB", "LP"),
    "gemm": ("BM", "BN", "TM", "TN", "BK", "VA", "VB", "DB", "UNROLL", "MINB"),
}
# what a parameter a config predates stands for
_DEFAULTS = {"UC": 0, "FB": 1, "LP": 0, "XS": 0, "RS": 0, "SPLITK": 1, "TMA_STORE": 0, "CLUSTER": 1}
_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


# ---- the model file ------------------------------------------------------------------------

@functools.lru_cache(maxsize=4)
def _load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def _model() -> dict:
    return _load(str(MODEL_PATH))


def model_version() -> str:
    """The version of the fitted parameters, e.g. ``gemm-cost-1+1a2b3c4d``.

    >>> model_version() == json.loads(MODEL_PATH.read_text())["version"]
    True
    """
    return _model()["version"]


def parameters_digest(families: Mapping[str, Any]) -> str:
    """sha256 (first 8 hex) of the fitted parameters, as the model file stores them."""
    return hashlib.sha256(json.dumps(families, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:8]


def has_model(family: str) -> bool:
    try:
        return family in _model()["families"]
    except FileNotFoundError:
        return False


# ---- the analytical estimate ------------------------------------------------------------------

def _cdiv(a, b):
    return -(-a // b)


def _shape(problem: Problem) -> tuple[int, int, int]:
    return int(problem["m"]), int(problem["n"]), max(1, int(problem["k"]))


def _pnorm(parts: Sequence, p: float):
    """A smooth maximum of bounds that overlap imperfectly (their p-norm)."""
    total = 0.0
    for x in parts:
        total = total + x ** p
    return total ** (1.0 / p)


def _out_bytes(problem: Problem) -> int:
    return _BYTES[problem.get("out_dtype", problem["dtype"])]


def _wgmma(problem: Problem, target: Target, c: Mapping[str, np.ndarray], hw: Mapping[str, float]):
    """(analytical seconds, the quantities features read) of wgmma configs ``c`` on ``problem``:
    persistent blocks, one (cluster) unit of work at a time on each SM."""
    m, n, k = _shape(problem)
    dtype, layout = problem["dtype"], problem["layout"]
    elt, out = _BYTES[dtype], _out_bytes(problem)
    tf32 = dtype == "float32"
    sms = target.sm_count
    bm, bn, stages, cons, pp = c["BM"], c["BN"], c["STAGES"], c["CONSUMERS"], c["PINGPONG"]
    split, cl, ts, xs, rs, gm = c["SPLITK"], c["CLUSTER"], c["TMA_STORE"], c["XS"], c["RS"], c["GM"]
    swap = rs * int(layout == "NN")                     # tf32 NN with RS computes C^T = B^T A^T
    rows, cols = np.where(swap > 0, n, m), np.where(swap > 0, m, n)
    bk = 128 // elt
    kb = _cdiv(k, bk)
    tm, tn = _cdiv(rows, bm), _cdiv(cols, bn)
    kb_unit = _cdiv(kb, split)
    units = _cdiv(tm, cl) * tn * split
    slots = sms // cl
    waves = _cdiv(units, slots)
    active = np.minimum(units, slots) * cl
    clock = hw["clock_ghz"] * 1e9
    peak_sm = hw["tf32_flops_clk" if tf32 else "tc16_flops_clk"] * clock
    a_rows = np.minimum(bm, rows)                      # a short A box holds M rows only
    # one warpgroup issuing at a time (one consumer, or ping-pong's alternating mainloops) cannot
    # hide a gap after each m64nNk wgmma, which lasts N/2 clocks: 1 + gap / (N/2)
    single = (cons == 1) | (pp > 0)
    t_tc = 2.0 * bm * bn * bk / peak_sm * (1.0 + single * hw["wgmma_gap_clk"] / (bn / 2.0))
    # shared memory each k-block: every m64 slab's wgmma reads its A rows (RS: registers) and B
    t_smem = (bm / 64.0) * (64.0 * (1 - rs) + bn) * bk * elt / (hw["smem_bytes_clk"] * clock)
    # each SM's share of the L2 bandwidth (a cluster multicasts B: each block loads half)
    bw_sm = np.minimum(hw["sm_l2_bytes_clk"] * clock, hw["l2_bw"] / active)
    t_feed = (a_rows + bn / cl) * bk * elt / bw_sm
    t_lat = hw["load_latency_us"] * 1e-6 / np.maximum(stages - 1, 1)
    # tf32 MN-major operands: transposed by the producer (cp.async of 4 bytes, or staged by TMA)
    cp_a = int(tf32 and layout[0] == "T") * (1 - rs)
    cp_b = int(tf32 and layout[1] == "N") * (1 - swap)
    staged = cp_b * (xs > 0)
    copied = cp_a + cp_b * (xs == 0)
    slow = hw["tf32_copy"] ** copied * hw["tf32_staged"] ** staged
    t_kb = _pnorm((t_tc, t_smem, t_feed, t_lat), hw["p_kb"]) * slow
    # a unit's epilogue (hidden in part by TMA stores, by ping-pong) and fixed cost
    t_epi = bm * bn * out / (hw["sm_store_bytes_clk"] * clock) + hw["epilogue_us"] * 1e-6
    hide = (1 - hw["ts_hide"] * ts) * (1 - hw["pp_hide"] * pp)
    t_unit = (hw["tile_us"] + hw["cluster_us"] * (cl == 2)) * 1e-6
    # split-K: the parts meet in a workspace of fp32 partial sums
    t_split = np.where(split > 1, (split - 1) * bm * bn * 4.0 / bw_sm + hw["split_sync_us"] * 1e-6, 0.0)
    t_sm = waves * (kb_unit * t_kb + t_epi * hide + t_unit) + t_split + hw["fill_us"] * 1e-6
    a_bytes, b_bytes = rows * k * elt, cols * k * elt
    t_l2 = (a_bytes * tn + b_bytes * _cdiv(tm, cl)) / hw["l2_bw"]
    t_dram = (a_bytes + b_bytes + m * n * out) / hw["dram_bw"]
    t = hw["launch_us"] * 1e-6 + _pnorm((t_sm, t_l2, t_dram), hw["p_total"])
    l2_over = max(1.0, (m * k + n * k) * elt / target.l2_bytes)
    return t, locals()


def _occupancy(threads, regs, smem, minb, target: Target):
    """Resident blocks per SM: threads, registers (as the launch bounds cap them), shared memory."""
    cap = np.minimum(255, target.regs_per_sm // np.maximum(minb * threads, 1))
    regs = (np.minimum(regs, cap) + 7) // 8 * 8
    by_regs = target.regs_per_sm // np.maximum(regs * threads, 1)
    by_threads = 2048 // np.maximum(threads, 1)
    by_smem = target.smem_per_sm // np.maximum(smem + 1024, 1)
    return np.maximum(1, np.minimum(np.minimum(by_regs, by_threads), np.minimum(by_smem, 32)))


def _blocks_time(blocks, bps, warps, t_block, sms: int, sat_warps: float):
    """Time of ``blocks`` blocks of ``t_block`` seconds of one SM's throughput each, ``bps`` at
    a time on each SM, an SM at full throughput from ``sat_warps`` resident warps on."""
    per_sm = np.minimum(bps, _cdiv(blocks, sms))
    waves = _cdiv(blocks, sms * bps)
    util = np.minimum(1.0, per_sm * warps / sat_warps)
    return waves * per_sm * t_block / util, waves, per_sm


def _width_cost(vec, elt, hw):
    """Issue cost of copying with vectors of ``vec`` elements, per byte, against 16 bytes."""
    b = vec * elt
    return np.where(b >= 16, 1.0, np.where(b >= 8, hw["copy8"], np.where(b >= 4, hw["copy4"], hw["copy2"])))


def mma_shape(dtype: str, layout: str, c: Mapping[str, np.ndarray]) -> dict:
    """Warps, shared memory, accumulators, copies and the register estimate of mma.sync configs,
    as the family's space computes them (kgen.kernels.gemm.mma)."""
    elt = _BYTES[dtype]
    f64 = dtype == "float64"
    mma_k = 16 if elt == 2 else 8
    bm, bn, bk, wm, wn, wk = c["BM"], c["BN"], c["BK"], c["WM"], c["WN"], c["WK"]
    va, vb, fb = c["VA"], c["VB"], c["FB"]
    kmaj_a, kmaj_b = layout[0] == "N", layout[1] == "T"

    def pad(kmajor):
        return 8 if elt == 2 else ((4 if kmajor else 8) if dtype == "float32" else 4)

    sa_tile = (bm if kmaj_a else bk) * ((bk if kmaj_a else bm) + pad(kmaj_a))
    sb_tile = (bn if kmaj_b else bk) * ((bk if kmaj_b else bn) + pad(kmaj_b))
    smem = np.maximum(c["STAGES"] * (sa_tile + sb_tile) * elt, (wk - 1) * bm * bn * (8 if f64 else 4))
    warps = (bm // np.maximum(wm, 1)) * (bn // np.maximum(wn, 1)) * wk
    acc = (wm // 16) * (wn // 8) * 4 * (2 if f64 else 1)
    ca = _cdiv(bm * bk, va * 32 * np.maximum(1, warps))
    cb = _cdiv(bn * bk, vb * 32 * np.maximum(1, warps))
    frags = ((wm // 16) * 4 + (wn // 8) * 2) * (2 if f64 else 1) * fb
    regs = acc + frags + np.where(va * elt < 4, 8, 4) * ca + np.where(vb * elt < 4, 8, 4) * cb + 48
    return dict(smem=smem, warps=warps, acc=acc, copies_a=ca, copies_b=cb, regs=regs, mma_k=mma_k,
                kmaj_a=kmaj_a, kmaj_b=kmaj_b)


def _mma(problem: Problem, target: Target, c: Mapping[str, np.ndarray], hw: Mapping[str, float]):
    """(analytical seconds, quantities) of mma.sync configs: one block per tile, ``bps`` resident."""
    m, n, k = _shape(problem)
    dtype, layout = problem["dtype"], problem["layout"]
    elt, out = _BYTES[dtype], _out_bytes(problem)
    sms = target.sm_count
    bm, bn, bk, wm, wn = c["BM"], c["BN"], c["BK"], c["WM"], c["WN"]
    stages, va, vb, gm, wk, minb = c["STAGES"], c["VA"], c["VB"], c["GM"], c["WK"], c["MINB"]
    uc, fb, lp = c["UC"], c["FB"], c["LP"]
    sh = mma_shape(dtype, layout, c)
    warps = sh["warps"]
    bps = _occupancy(32 * warps, sh["regs"], sh["smem"], minb, target)
    tm, tn = _cdiv(m, bm), _cdiv(n, bn)
    tiles = tm * tn
    kb = _cdiv(k, bk)
    clock = hw["clock_ghz"] * 1e9
    rate = {"float64": "f64_flops_clk", "float32": "tf32_flops_clk"}.get(dtype, "tc16_flops_clk")
    t_tc = 2.0 * bm * bn * bk / (hw[rate] * clock)
    # shared memory: the tiles written once, each warp reads its A rows and B columns
    t_smem = (((bn // wn) * bm + (bm // wm) * bn) * wk + bm + bn) * bk * elt / (hw["smem_bytes_clk"] * clock)
    feed = bm * bk * elt * _width_cost(va, elt, hw) + bn * bk * elt * _width_cost(vb, elt, hw)
    t_feed = feed / (hw["sm_l2_bytes_clk"] * clock)
    t_kb = _pnorm((t_tc, t_smem, t_feed), hw["p_kb"]) * np.where(lp > 0, hw["lp_gain"], 1.0)
    t_total, waves, per_sm = _blocks_time(tiles, bps, warps, kb * t_kb, sms, hw["mma_sat_warps"])
    # a block alone cannot beat its loads' latency over its pipeline depth
    t_lat = hw["load_latency_us"] * 1e-6 / np.maximum(stages - 1, 1)
    t_chain = waves * kb * t_lat
    # a 16-bit output leaves in 4-byte stores a thread (half a sector a quad): its own rate
    store = hw.get("store16_bytes_clk", hw["sm_store_bytes_clk"]) if out == 2 else hw["sm_store_bytes_clk"]
    t_epi = waves * (per_sm * bm * bn * out / (store * clock) + hw["epilogue_us"] * 1e-6)
    t_sm = np.maximum(t_total, t_chain) + t_epi + hw["fill_us"] * 1e-6
    a_bytes, b_bytes = m * k * elt, n * k * elt
    t_l2 = (a_bytes * tn + b_bytes * tm) / hw["l2_bw"]
    t_dram = (a_bytes + b_bytes + m * n * out) / hw["dram_bw"]
    t = hw["launch_us"] * 1e-6 + _pnorm((t_sm, t_l2, t_dram), hw["p_total"])
    slots = sms * bps
    l2_over = max(1.0, (m * k + n * k) * elt / target.l2_bytes)
    return t, locals()


def simt_shape(dtype: str, c: Mapping[str, np.ndarray]) -> dict:
    """Threads, loads, shared memory and the register estimate of CUDA-core configs, as the
    family's space computes them (kgen.kernels.gemm)."""
    st = {"float32": 4, "float64": 8, "float16": 2}[dtype]
    ct = 8 if dtype == "float64" else 4
    bm, bn, tm, tn, bk, va, vb = c["BM"], c["BN"], c["TM"], c["TN"], c["BK"], c["VA"], c["VB"]
    threads = (bm // tm) * (bn // tn)
    pad = 16 // ct
    smem = np.where(c["DB"] > 0, 2, 1) * bk * (bm + pad + bn + pad) * ct
    words = max(ct // 4, 1)
    la = bm * bk // np.maximum(va * threads, 1)
    lb = bn * bk // np.maximum(vb * threads, 1)
    regs = tm * tn * words + (tm + tn) * words + (la * va + lb * vb) * max(1, st // 4) + 28
    return dict(threads=threads, smem=smem, la=la, lb=lb, regs=regs, st=st, ct=ct)


def _simt(problem: Problem, target: Target, c: Mapping[str, np.ndarray], hw: Mapping[str, float]):
    """(analytical seconds, quantities) of CUDA-core configs: a block per tile and split-K part."""
    m, n, k = _shape(problem)
    dtype, layout = problem["dtype"], problem["layout"]
    sms = target.sm_count
    bm, bn, tmt, tnt, bk = c["BM"], c["BN"], c["TM"], c["TN"], c["BK"]
    va, vb, db, unroll, gm, sk, minb = c["VA"], c["VB"], c["DB"], c["UNROLL"], c["GM"], c["SK"], c["MINB"]
    sh = simt_shape(dtype, c)
    st, ct, threads = sh["st"], sh["ct"], sh["threads"]
    warps = np.maximum(threads // 32, 1)
    bps = _occupancy(threads, sh["regs"], sh["smem"], minb, target)
    tm, tn = _cdiv(m, bm), _cdiv(n, bn)
    blocks = tm * tn * sk
    kt = _cdiv(_cdiv(k, sk), bk)
    clock = hw["clock_ghz"] * 1e9
    peak_sm = hw["f64_fma_flops_clk" if dtype == "float64" else "fma_flops_clk"] * clock
    # each k step a thread does TM x TN FMAs and reads TM + TN values from shared memory
    inner = tmt * tnt / (tmt * tnt + hw["lds_cost"] * (tmt + tnt) * ct / 16.0)
    t_math = 2.0 * bm * bn * kt * bk / (peak_sm * inner)
    feed = bm * bk * st * _width_cost(va, st, hw) + bn * bk * st * _width_cost(vb, st, hw)
    t_feed = kt * feed / (hw["sm_l2_bytes_clk"] * clock)
    t_block = _pnorm((t_math, t_feed), hw["p_kb"])
    t_total, waves, per_sm = _blocks_time(blocks, bps, warps, t_block, sms, hw["simt_sat_warps"])
    t_chain = waves * kt * hw["load_latency_us"] * 1e-6 * np.where(db > 0, 0.5, 1.0)
    t_epi = waves * hw["epilogue_us"] * 1e-6
    c_bytes = m * n * st
    # split-K: partial sums added atomically into C, after a kernel scaling C by beta
    t_split = np.where(sk > 1, hw["split_sync_us"] * 1e-6 + sk * c_bytes / hw["atomic_bw"], 0.0)
    t_sm = np.maximum(t_total, t_chain) + t_epi + hw["fill_us"] * 1e-6
    a_bytes, b_bytes = m * k * st, n * k * st
    t_l2 = (a_bytes * tn + b_bytes * tm) / hw["l2_bw"]
    t_dram = (a_bytes + b_bytes + 2 * c_bytes) / hw["dram_bw"]
    t = hw["launch_us"] * 1e-6 + _pnorm((t_sm, t_l2, t_dram), hw["p_total"]) + t_split
    slots = sms * bps
    return t, locals()


ANALYTIC: dict[str, Callable] = {"gemm_wgmma": _wgmma, "gemm_mma": _mma, "gemm": _simt}


# ---- features of the learned correction (functions of the analytical quantities) --------------

def _log2(x):
    return np.log2(np.maximum(x, 1e-30))


_SHARED = {
    "area": lambda e: _log2(e["bm"] * e["bn"] / 16384.0),
    "aspect": lambda e: _log2(e["bm"] / e["bn"]),
    "share_l2": lambda e: np.log(np.maximum(e["t_l2"] / e["t"], 1e-12)),
    "share_dram": lambda e: np.log(np.maximum(e["t_dram"] / e["t"], 1e-12)),
    "share_launch": lambda e: e["hw"]["launch_us"] * 1e-6 / e["t"],
    "pad": lambda e: _log2(e["m"] * e["n"] / (e["tm"] * e["bm"] * e["tn"] * e["bn"])),
    "group": lambda e: (e["gm"] == 8) * 1.0,
    "group_l2": lambda e: (e["gm"] == 8) * _log2(e["l2_over"]),
    "epilogue": lambda e: float(e["problem"].get("epilogue", "none") != "none") + 0.0 * e["t"],
}
# the CUDA-core and mma.sync families: blocks resident per SM, and the dependent-latency chain
_RESIDENT = {
    "minb2": lambda e: (e["minb"] == 2) * 1.0,
    "bps": lambda e: _log2(e["bps"]),
    "resident_warps": lambda e: _log2(e["per_sm"] * e["warps"]),
    "chain": lambda e: np.log(np.maximum(e["t_chain"], 1e-12) / np.maximum(e["t_total"], 1e-12)),
}
FEATURES: dict[str, dict[str, Callable]] = {
    "gemm_wgmma": {
        **_SHARED,
        "bm64": lambda e: (e["bm"] == 64) * 1.0,
        "bm256": lambda e: (e["bm"] == 256) * 1.0,
        "bn64": lambda e: (e["bn"] == 64) * 1.0,
        "bn192": lambda e: (e["bn"] == 192) * 1.0,
        "stages": lambda e: _log2(e["stages"]),
        "shallow": lambda e: np.maximum(0.0, _log2(4.0 / e["stages"])),
        "cons2": lambda e: (e["cons"] == 2) * 1.0,
        "pingpong": lambda e: e["pp"] * 1.0,
        "rpc128": lambda e: (np.where(e["pp"] > 0, e["bm"], e["bm"] // e["cons"]) == 128) * 1.0,
        "tma_store": lambda e: e["ts"] * 1.0,
        "cluster": lambda e: (e["cl"] == 2) * 1.0,
        "split": lambda e: _log2(e["split"]),
        "quant": lambda e: _log2(e["units"] / (e["waves"] * e["slots"])),
        "inv_kb": lambda e: 1.0 / e["kb_unit"],
        "ts_inv_kb": lambda e: e["ts"] / e["kb_unit"],
        "pp_inv_kb": lambda e: e["pp"] / e["kb_unit"],
        "kb_lt_stages": lambda e: (e["kb_unit"] < e["stages"]) * 1.0,
        "cluster_rows": lambda e: (e["cl"] == 2) * _log2(np.maximum(e["tm"], 1)),
        "rs": lambda e: e["rs"] * 1.0,
        "staged": lambda e: e["staged"] * 1.0,
        "copied": lambda e: e["copied"] * 1.0,
    },
    "gemm_mma": {
        **_SHARED,
        **_RESIDENT,
        "warp_area": lambda e: _log2(e["wm"] * e["wn"] / 1024.0),
        "warp_aspect": lambda e: _log2(e["wm"] / e["wn"]),
        "warps": lambda e: _log2(e["warps"]),
        "bk_bytes": lambda e: _log2(e["bk"] * e["elt"] / 64.0),
        "stages": lambda e: _log2(e["stages"]),
        "shallow": lambda e: np.maximum(0.0, _log2(3.0 / e["stages"])),
        "va_narrow": lambda e: _log2(16.0 / (e["va"] * e["elt"])),
        "vb_narrow": lambda e: _log2(16.0 / (e["vb"] * e["elt"])),
        "va_plain": lambda e: (e["va"] * e["elt"] < 4) * 1.0,
        "vb_plain": lambda e: (e["vb"] * e["elt"] < 4) * 1.0,
        "plain": lambda e: ((e["va"] * e["elt"] < 4) | (e["vb"] * e["elt"] < 4)) * 1.0,
        "wk": lambda e: _log2(e["wk"]),
        "quant": lambda e: _log2(e["tiles"] / (_cdiv(e["tiles"], e["slots"]) * e["slots"])),
        "inv_kb": lambda e: 1.0 / e["kb"],
        "lp": lambda e: (e["lp"] > 0) * 1.0,
        "fb2": lambda e: (e["fb"] == 2) * 1.0,
        "uc": lambda e: e["uc"] * 1.0,
    },
    "gemm": {
        **_SHARED,
        **_RESIDENT,
        "thread_area": lambda e: _log2(e["tmt"] * e["tnt"] / 64.0),
        "thread_aspect": lambda e: _log2(e["tmt"] / e["tnt"]),
        "threads": lambda e: _log2(e["threads"] / 256.0),
        "bk": lambda e: _log2(e["bk"] / 16.0),
        "va_narrow": lambda e: _log2(4.0 / np.minimum(e["va"], 4)),
        "vb_narrow": lambda e: _log2(4.0 / np.minimum(e["vb"], 4)),
        "va_t": lambda e: _log2(4.0 / np.minimum(e["va"], 4)) * float(e["layout"][0] == "T"),
        "vb_t": lambda e: _log2(4.0 / np.minimum(e["vb"], 4)) * float(e["layout"][1] == "T"),
        "db": lambda e: e["db"] * 1.0,
        "unroll_full": lambda e: (e["unroll"] == 0) * 1.0,
        "unroll1": lambda e: (e["unroll"] == 1) * 1.0,
        "split": lambda e: _log2(e["sk"]),
        "quant": lambda e: _log2(e["blocks"] / (_cdiv(e["blocks"], e["slots"]) * e["slots"])),
        "inv_kt": lambda e: 1.0 / e["kt"],
        "big_thread": lambda e: (e["tmt"] * e["tnt"] >= 128) * 1.0,
    },
}


def columns(family: str, values: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Config values (complete dicts) as int64 columns, one per parameter of the family."""
    names = PARAMS[family]
    arr = np.array([[int(v[p]) for p in names] for v in values], dtype=np.int64).reshape(len(values), len(names))
    return {p: arr[:, i] for i, p in enumerate(names)}


def terms(family: str, problem: Problem, target: Target, cols: Mapping[str, np.ndarray],
          hw: Mapping[str, float], features: Sequence[str] = ()) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(analytical ms, the named feature columns) of the configs ``cols`` on ``problem``."""
    count = len(next(iter(cols.values())))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        t, env = ANALYTIC[family](problem, target, cols, hw)
        defs = FEATURES[family]
        feats = {name: np.broadcast_to(np.asarray(defs[name](env), dtype=float), (count,)) for name in features}
    ms = np.broadcast_to(np.asarray(t, dtype=float) * 1e3, (count,))
    return ms, feats


def predict_columns(family: str, problem: Problem, target: Target, cols: Mapping[str, np.ndarray],
                    fitted: Mapping[str, Any] | None = None) -> np.ndarray:
    """Predicted ms of every config in ``cols``: the launch (``launch_us``, measured on problems
    of no work) plus the analytical time's rest x exp(learned correction)."""
    fitted = fitted if fitted is not None else _model()["families"][family]
    levels = fitted.get("levels", {})
    ms, feats = terms(family, problem, target, cols, fitted["hw"],
                      [*fitted["features"], *(n for n in levels if n not in fitted["features"])])
    corr = float(fitted.get("bias", 0.0))
    for name, mean, scale, w in zip(fitted["features"], fitted["mean"], fitted["scale"], fitted["weights"]):
        corr = corr + w * (feats[name] - mean) / scale
    for name, shift in levels.items():        # a kind of config's level against the others' (all problems)
        corr = corr + shift * feats[name]
    limit = fitted.get("clip", 3.0)
    # the correction scales the work; a launch that does no work takes launch_us whatever the config
    launch = fitted["hw"]["launch_us"] * 1e-3
    out = launch + np.maximum(ms - launch, 0.0) * np.exp(np.clip(corr, -limit, limit))
    return np.where(np.isfinite(out), out, np.inf)


# ---- the constraints, mirrored in numpy --------------------------------------------------------

def _pow2_at_least(x):
    return np.left_shift(1, np.ceil(np.log2(np.maximum(x, 1))).astype(np.int64))


def valid_mask(family: str, problem: Problem, target: Target, c: Mapping[str, np.ndarray],
               part: str = "all") -> np.ndarray:
    """Which configs ``c`` the family's space accepts for ``problem``, all at once: a mirror of
    its constraints (``part``: "class" those that read no shape, "shape" the rest, or "all").
    ``choose`` confirms its pick with the space itself; tests/test_gemm_cost.py checks the two
    agree."""
    count = len(next(iter(c.values())))
    ok = np.ones(count, dtype=bool)
    m, n, k = _shape(problem)
    dtype, layout = problem["dtype"], problem["layout"]
    cls, shp = part in ("all", "class"), part in ("all", "shape")
    if family == "gemm_wgmma":
        bk = block_k(dtype) if dtype in ("float16", "bfloat16", "float32") else BK
        bm, bn, st, cons, pp = c["BM"], c["BN"], c["STAGES"], c["CONSUMERS"], c["PINGPONG"]
        split, cl, ts, xs, rs, gm = c["SPLITK"], c["CLUSTER"], c["TMA_STORE"], c["XS"], c["RS"], c["GM"]
        if cls:
            rpc = np.where(pp > 0, bm, bm // np.maximum(cons, 1))
            ok &= np.isin(bm, (64, 128, 256)) & np.isin(bn, (64, 128, 192, 256)) & (c["BK"] == bk)
            ok &= np.isin(st, STAGE_CHOICES) & np.isin(cons, (1, 2)) & np.isin(gm, (1, 8)) & np.isin(pp, (0, 1))
            ok &= np.isin(split, SPLITS) & np.isin(ts, (0, 1)) & np.isin(cl, (1, 2))
            ok &= np.isin(xs, staging_choices(problem)) & np.isin(rs, register_choices(problem))
            ok &= smem_bytes(bm, bn, st, cons, ts, xs) <= target.smem_per_block_optin
            ok &= (pp == 0) | (cons == 2)
            ok &= np.isin(rpc, (64, 128))
            ok &= (bn // 2 + RS_FRAGMENT_REGS * rs) * (rpc // 64) <= MAX_ACC_FLOATS + RS_FRAGMENT_REGS * rs
            ok &= (rs == 0) | ((ts == 0) & (xs == 0))
            ok &= (xs == 0) | (bm < 256) | (bn > 64)
            ok &= (cl == 1) | ((not copied_transposed(dtype, layout)[1]) & (rs == 0))
        if shp:
            swap = rs * int(layout == "NN")
            rows, cols_ = np.where(swap > 0, n, m), np.where(swap > 0, m, n)
            tm = _cdiv(rows, bm)
            ok &= (bm <= np.maximum(64, _pow2_at_least(rows))) & (bn <= np.maximum(64, 64 * _cdiv(cols_, 64)))
            ok &= (gm == 1) | (gm < _cdiv(rows, bm * cl))
            ok &= (cl == 1) | (tm >= 2)
            tiles = tm * _cdiv(cols_, bn)
            ok &= (split == 1) | ((tiles < target.sm_count) & (tiles * split <= 4 * target.sm_count)
                                  & (_cdiv(k, bk) >= 2 * split))
        return ok
    if family == "gemm_mma":
        if dtype not in ATOMS:
            return ~ok
        mma_m, mma_k, _, bks = ATOMS[dtype]
        elt = _BYTES[dtype]
        f64 = dtype == "float64"
        bm, bn, bk, wm, wn, wk = c["BM"], c["BN"], c["BK"], c["WM"], c["WN"], c["WK"]
        va, vb, gm, minb, uc, fb, lp = c["VA"], c["VB"], c["GM"], c["MINB"], c["UC"], c["FB"], c["LP"]
        if cls:
            sh = mma_shape(dtype, layout, c)
            vecs = tuple(v for v in (1, 2, 4, 8) if v * elt <= 16)
            ok &= np.isin(bm, (16, 32, 64, 128, 256)) & np.isin(bn, (16, 32, 64, 128, 256)) & np.isin(bk, bks)
            ok &= np.isin(wm, (16, 32, 64)) & np.isin(wn, (16, 32, 64)) & np.isin(c["STAGES"], (2, 3, 4, 5, 6))
            ok &= np.isin(va, vecs) & np.isin(vb, vecs) & np.isin(gm, (1, 8)) & np.isin(wk, (1, 2, 4))
            ok &= np.isin(minb, (1, 2)) & np.isin(uc, (0, 1) if f64 else (0,)) & np.isin(fb, (1, 2) if f64 else (1,))
            ok &= np.isin(lp, (0, 1, 2) if f64 else (0, 1))
            ok &= (bm % wm == 0) & (bn % wn == 0)
            ok &= (sh["warps"] >= 1) & (sh["warps"] <= 16)
            ok &= bk % (wk * mma_k) == 0
            ok &= (fb == 1) | (wk == 1)
            ok &= (lp == 0) | ((uc == 0) & ((lp == 1) | (fb == 2)))
            ok &= sh["acc"] <= 128
            ok &= (va <= problem["align_a"]) & (np.where(sh["kmaj_a"], bk, bm) % va == 0)
            ok &= (vb <= problem["align_b"]) & (np.where(sh["kmaj_b"], bk, bn) % vb == 0)
            ok &= sh["smem"] <= target.smem_per_block_optin
            ok &= sh["copies_a"] + sh["copies_b"] <= 16
            ok &= (sh["regs"] <= 255) & (sh["regs"] * 32 * sh["warps"] * minb <= target.regs_per_sm)
            ok &= sh["smem"] * minb <= target.smem_per_sm
        if shp:
            ok &= (bm <= max(16, 1 << max(0, math.ceil(math.log2(m))))) & \
                (bn <= max(16, 1 << max(0, math.ceil(math.log2(n)))))
            ok &= c["STAGES"] - 1 <= np.maximum(1, _cdiv(k, bk))
            ok &= (gm == 1) | (gm < _cdiv(m, bm))
        return ok
    # the CUDA-core family
    if dtype not in DTYPES:
        return ~ok
    bm, bn, tm, tn, bk, va, vb = c["BM"], c["BN"], c["TM"], c["TN"], c["BK"], c["VA"], c["VB"]
    db, unroll, gm, sk, minb = c["DB"], c["UNROLL"], c["GM"], c["SK"], c["MINB"]
    sh = simt_shape(dtype, c)
    threads = sh["threads"]
    if cls:
        widest = 16 // sh["st"]
        vecs = tuple(v for v in (1, 2, 4, 8) if v <= widest)
        ok &= np.isin(bm, (16, 32, 64, 128, 256)) & np.isin(bn, (16, 32, 64, 128, 256))
        ok &= np.isin(tm, (2, 4, 8, 16)) & np.isin(tn, (2, 4, 8, 16)) & np.isin(bk, (8, 16, 32))
        ok &= np.isin(va, vecs) & np.isin(vb, vecs) & np.isin(db, (0, 1)) & np.isin(unroll, (1, 4, 0))
        ok &= np.isin(gm, (1, 8)) & np.isin(sk, SPLIT_K) & np.isin(minb, (1, 2))
        ok &= (bm % tm == 0) & (bn % tn == 0)
        ok &= (threads >= 64) & (threads <= 512) & (threads <= target.max_threads_per_block)
        ok &= tm * tn * (sh["ct"] // 4) <= 128
        a_k, b_k = layout[0] == "N", layout[1] == "T"
        ok &= (va <= problem["align_a"]) & (np.where(a_k, bk, bm) % va == 0)
        ok &= (sh["la"] >= 1) & ((bm * bk) % np.maximum(va * threads, 1) == 0)
        ok &= (vb <= problem["align_b"]) & (np.where(b_k, bk, bn) % vb == 0)
        ok &= (sh["lb"] >= 1) & ((bn * bk) % np.maximum(vb * threads, 1) == 0)
        ok &= sh["smem"] <= target.smem_per_block_optin
        ok &= unroll < bk
        ok &= (sh["regs"] <= 255) & (sh["regs"] * threads * minb <= target.regs_per_sm)
        ok &= sh["smem"] * minb <= target.smem_per_sm
        ok &= (sk == 1) | (dtype != "float16")
    if shp:
        ok &= (bm <= max(16, 1 << max(0, math.ceil(math.log2(m))))) & \
            (bn <= max(16, 1 << max(0, math.ceil(math.log2(n)))))
        ok &= (gm == 1) | (gm < _cdiv(m, bm))
        blocks = _cdiv(m, bm) * _cdiv(n, bn)
        ok &= (sk == 1) | ((k >= 4 * sk * bk) & (blocks * sk <= 4 * target.sm_count))
    return ok


# ---- candidates ---------------------------------------------------------------------------------

def core_of(family: str, values: Mapping[str, Any], dtype: str) -> tuple[int, ...]:
    """The catalogue core (CORE order) of a config's values; mma keeps its k tile and vector
    widths in bytes, so that a core carries over to other dtypes."""
    v = {**_DEFAULTS, **values}
    if family == "gemm_mma":
        elt = _BYTES[dtype]
        v["BK"], v["VA"], v["VB"] = v["BK"] * elt, v["VA"] * elt, v["VB"] * elt
    return tuple(int(v[p]) for p in CORE[family])


def _pow2_floor(x: int) -> int:
    return 1 << (max(1, int(x)).bit_length() - 1)


def expand(family: str, problem: Problem, cores: np.ndarray) -> np.ndarray:
    """Candidate rows (PARAMS order) for the problem's class (dtype, layout, alignment): each
    core crossed with the knobs the problem decides, deduplicated."""
    names = PARAMS[family]
    dtype = problem["dtype"]
    elt = _BYTES.get(dtype, 4)
    rows = []
    if family == "gemm_wgmma":
        if dtype not in ("float16", "bfloat16", "float32"):
            return np.zeros((0, len(names)), dtype=np.int64)
        bk = block_k(dtype)
        # (the rows are cached per problem class: nothing here may depend on the problem's size)
        knobs = [(split, cl, gm, ts, xs, rs) for split in SPLITS for cl in (1, 2) for gm in (1, 8)
                 for ts in (0, 1) for xs in staging_choices(problem) for rs in register_choices(problem)
                 if not (rs and (ts or xs or cl > 1))]
        for bm, bn, stages, cons, pp in cores:
            for split, cl, gm, ts, xs, rs in knobs:
                rows.append((bm, bn, bk, stages, cons, gm, pp, split, ts, cl, xs, rs))
    elif family == "gemm_mma":
        widest = 16 // elt
        aa, ab = min(widest, _pow2_floor(problem["align_a"])), min(widest, _pow2_floor(problem["align_b"]))
        fp64 = dtype == "float64"
        for bm, bn, kbytes, wm, wn, stages, vab, vbb, gm, wk, minb, uc, fb, lp in cores:
            if kbytes % elt:
                continue
            bk = kbytes // elt
            va0, vb0 = max(1, vab // elt), max(1, vbb // elt)
            # planned copies (LP) for every precision, as the family's default does; fp64 also
            # its double-buffered fragments with the whole-tile copies, LP=2
            extras = {(uc, fb, lp), (0, fb, 1), (0, 2, 2)} if fp64 else {(0, 1, 1)}
            for va in {aa, min(va0, aa)}:
                for vb in {ab, min(vb0, ab)}:
                    for g in {gm, 1}:
                        for u, f, l in extras:
                            rows.append((bm, bn, bk, wm, wn, stages, va, vb, g, wk, minb, u, f, l))
    else:
        widest = 16 // DTYPES[dtype][2] if dtype in DTYPES else 4
        aa, ab = min(widest, _pow2_floor(problem["align_a"])), min(widest, _pow2_floor(problem["align_b"]))
        for bm, bn, tm, tn, bk, va0, vb0, db, unroll, minb in cores:
            for va in {min(aa, 4), min(va0, aa)}:
                for vb in {min(ab, 4), min(vb0, ab)}:
                    for gm in (1, 8):
                        for sk in SPLIT_K:
                            rows.append((bm, bn, tm, tn, bk, va, vb, db, unroll, gm, sk, minb))
    if not rows:
        return np.zeros((0, len(names)), dtype=np.int64)
    return np.unique(np.array(rows, dtype=np.int64), axis=0)


def _class_key(family: str, problem: Problem, target: Target) -> tuple:
    p = problem.as_dict()
    return (family, p.get("dtype"), p.get("out_dtype"), p.get("layout"), p.get("align_a"), p.get("align_b"),
            p.get("epilogue"), target.sm_count, target.smem_per_block_optin, target.smem_per_sm,
            target.regs_per_sm, target.max_threads_per_block, model_version())


class _Class:
    """The candidates of one problem class (family, dtype, layout, alignment, target): rows in
    PARAMS order valid for the class as far as no shape decides, and their columns."""

    def __init__(self, family: str, problem: Problem, target: Target):
        fitted = _model()["families"][family]
        cores = np.array(fitted["catalogue"]["cores"], dtype=np.int64).reshape(-1, len(CORE[family]))
        rows = expand(family, problem, cores)
        cols = {p: rows[:, i] for i, p in enumerate(PARAMS[family])}
        if len(rows):
            keep = valid_mask(family, problem, target, cols, "class")
            rows = rows[keep]
        self.family = family
        self.rows = rows
        self.cols = {p: rows[:, i] for i, p in enumerate(PARAMS[family])}

    def values(self, i: int) -> dict:
        return dict(zip(PARAMS[self.family], map(int, self.rows[i])))


_CLASSES: dict[tuple, _Class] = {}
_SPACES: "OrderedDict[tuple, Space]" = OrderedDict()
_SPACES_MAX = 256


def _class(family: str, problem: Problem, target: Target) -> _Class:
    key = _class_key(family, problem, target)
    found = _CLASSES.get(key)
    if found is None:
        found = _CLASSES[key] = _Class(family, problem, target)
    return found


def space_for(spec, problem: Problem, target: Target) -> Space:
    """The family's space for the problem, from a small LRU cache."""
    key = (spec.family, problem.key, target)
    space = _SPACES.get(key)
    if space is None:
        space = _SPACES[key] = spec.space(problem, target)
        if len(_SPACES) > _SPACES_MAX:
            _SPACES.popitem(last=False)
    else:
        _SPACES.move_to_end(key)
    return space


def candidates(spec, problem: Problem, target: Target) -> list[dict]:
    """The candidate value dicts for ``problem`` that the constraint mirror accepts, unranked."""
    cls = _class(spec.family, problem, target)
    if not len(cls.rows):
        return []
    mask = valid_mask(spec.family, problem, target, cls.cols, "shape")
    return [cls.values(i) for i in np.flatnonzero(mask)]


# ---- the API -----------------------------------------------------------------------------------

def complete(space: Space, family: str, values: Mapping[str, Any]) -> dict:
    """``values`` with every parameter: the space's defaults, then what a missing one stands for."""
    full = space.complete(values)
    for p in PARAMS[family]:
        full.setdefault(p, _DEFAULTS.get(p, 0))
    return full


def predict_ms(spec, problem: Problem, target: Target, values: Mapping[str, Any]) -> float:
    """The model's predicted time (ms) of one config (its values) on ``problem``.

    >>> from kgen.kernels.gemm.problem import gemm_problem
    >>> from kgen.registry import get_spec
    >>> spec, p = get_spec("gemm"), gemm_problem(1024, 1024, 1024)
    >>> t = predict_ms(spec, p, Target.h200(), spec.default_config(p, Target.h200()).as_dict())
    >>> 0.01 < t < 1.0
    True
    """
    family = spec.family
    cols = columns(family, [complete(space_for(spec, problem, target), family, values)])
    return float(predict_columns(family, problem, target, cols)[0])


def rank(spec, problem: Problem, target: Target, candidates: list[dict]) -> list[tuple[float, dict]]:
    """(predicted ms, values) of ``candidates`` (value dicts), fastest first, equal predictions
    in the order of their config names. Ranked as given, valid or not (``choose`` checks)."""
    if not candidates:
        return []
    family = spec.family
    space = space_for(spec, problem, target)
    full = [complete(space, family, v) for v in candidates]
    ms = predict_columns(family, problem, target, columns(family, full))
    named = sorted(((float(t), space.make(f).name, i) for i, (t, f) in enumerate(zip(ms, full))))
    return [(t, dict(candidates[i])) for t, _, i in named]


def picks(spec, problem: Problem, target: Target, count: int) -> list[tuple[Config, float]]:
    """(config, predicted ms) of the model's ``count`` fastest valid configs for ``problem``,
    fastest first (equal predictions in the order of their names); [] where the family has no
    model or none of the candidates fits."""
    family = spec.family
    if family not in ANALYTIC or not has_model(family) or count < 1:
        return []
    cls = _class(family, problem, target)
    if not len(cls.rows):
        return []
    idx = np.flatnonzero(valid_mask(family, problem, target, cls.cols, "shape"))
    if not len(idx):
        return []
    space = space_for(spec, problem, target)
    ms = predict_columns(family, problem, target, {p: c[idx] for p, c in cls.cols.items()})
    order = np.argsort(ms, kind="stable")
    found: list[tuple[Config, float]] = []
    i = 0
    while i < len(order) and len(found) < count:
        j = i + 1
        while j < len(order) and ms[order[j]] == ms[order[i]]:     # equal predictions
            j += 1
        group = [cls.values(idx[order[t]]) for t in range(i, j)]
        valid = sorted((space.make(v) for v in group if space.is_valid(v)), key=lambda c: c.name)
        found += [(c, float(ms[order[i]])) for c in valid if all(c != f for f, _ in found)]
        i = j
    return found[:count]


def pick(spec, problem: Problem, target: Target) -> tuple[Config, float] | None:
    """(config, predicted ms) of the model's fastest valid config for ``problem``; None where
    the family has no model. Of equal predictions, the config of the smaller name. A problem
    none of the candidates fits gets the family's ``default_config`` (and its prediction).

    >>> from kgen.kernels.gemm.problem import gemm_problem
    >>> from kgen.registry import get_spec
    >>> config, ms = pick(get_spec("gemm"), gemm_problem(1000, 999, 77, "float32", "NT"), Target.h200())
    >>> config.name.startswith("gemm_simt_f32_nt_"), 0 < ms < 1
    (True, True)
    """
    if spec.family not in ANALYTIC or not has_model(spec.family):
        return None
    found = picks(spec, problem, target, 1)
    if found:
        return found[0]
    config = spec.default_config(problem, target)
    return config, predict_ms(spec, problem, target, config.as_dict())


def choose(spec, problem: Problem, target: Target) -> Config | None:
    """The config of ``pick``: the model's fastest valid config, or None with no model."""
    picked = pick(spec, problem, target)
    return picked[0] if picked is not None else None
