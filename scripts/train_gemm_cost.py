"""Fit the GEMM cost model's learned correction and write kgen/kernels/gemm/cost_model.json.

The model (kgen/kernels/gemm/cost.py) predicts a config's time as the launch (``launch_us``)
plus the rest of an analytical estimate times exp(w . features). This script takes
``launch_us`` from the tiny lattice's fastest times (``launch_floor``), fits the analytical
constants (bounded Nelder-Mead on a listwise loss of the analytical times), then w, per family,
by Newton's method on a listwise loss within each recorded problem of the time over the launch
(a problem's overall level, or a template's, which no config choice changes, does not pull the
weights; configs near the problem's best weigh most: the top pick is what the model is for);
the median residual left is the model's ``bias``, and ``LEVELS`` kinds of config get a shift
fitted on every measurement (``fit_levels``). Failures are left out.

Training data (nothing else): the recorded spaces tests/data/h200_gemm_wgmma_bf16_space.jsonl.gz,
tests/data/h200_gemm_mma_bf16_space.jsonl.gz, tests/data/h200_gemm_f32_simt_space.jsonl.gz, the
grid of scripts/record_grid.py (tests/data/*_gemm_grid.jsonl.gz, by the device it was recorded
on: skinny, decode-like, long-K, tiny-K and square problems, each family's candidates; the one
there, tests/data/h100_gemm_grid.jsonl.gz, was recorded on an H100 SXM, whose SMs, clocks and
shared memory are the H200's: its rankings of configs carry over, its times are read as they
are) and the shipped tuning_db/*.jsonl records. Records of older template digests are used as they are
(a problem measured with two templates is two groups, each centred on its own).

It then evaluates the model honestly, leaving one problem out at a time: for each recorded
problem with several measured configs, fit on every other problem, rank that problem's
measured configs and report the true rank of the model's top pick and its measured time over
the problem's best, next to the family's default_config (where that config was measured).
tests/data/h200_gemm_f32_simt.jsonl.gz (ten SIMT problems, four layouts, 120-300 configs
each; not part of the training data) is used for evaluation only. The table is printed and
written to scripts/results/cost_model_lopo.json.

    python scripts/train_gemm_cost.py            # fit, write the model, evaluate
    python scripts/train_gemm_cost.py --no-lopo  # fit and write only
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kgen.kernels.gemm import cost as gc  # noqa: E402
from kgen.problem import Problem, Target  # noqa: E402
from kgen.registry import get_spec  # noqa: E402

GRIDS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "data").glob("*_gemm_grid.jsonl.gz"))
# scripts/record_grid.py --lattice tiny: problems of almost no work, where the launch is the time
TINY = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "data").glob("*_gemm_tiny_grid.jsonl.gz"))
SPACE_FILES = {      # scripts/record_grid.py's grids: every family's grid problems
    "gemm_wgmma": ["tests/data/h200_gemm_wgmma_bf16_space.jsonl.gz", *GRIDS, *TINY],
    "gemm_mma": ["tests/data/h200_gemm_mma_bf16_space.jsonl.gz", *GRIDS, *TINY],
    "gemm": ["tests/data/h200_gemm_f32_simt_space.jsonl.gz", *GRIDS, *TINY],
}
SHIPPED = {f: f"tuning_db/nvidia-h200_{f}.jsonl" for f in gc.FAMILIES}
EVAL_ONLY = {"gemm": ["tests/data/h200_gemm_f32_simt.jsonl.gz"]}
RESULTS = ROOT / "scripts" / "results" / "cost_model_lopo.json"

# analytical constants (H200): clock under tensor load, per-SM rates per clock, bandwidths
HW_COMMON = dict(clock_ghz=1.755, smem_bytes_clk=128.0, sm_l2_bytes_clk=64.0, l2_bw=13e12, dram_bw=4.25e12,
                 sm_store_bytes_clk=64.0, launch_us=4.0, fill_us=1.0, p_total=4.0, p_kb=4.0)
HW = {
    "gemm_wgmma": dict(HW_COMMON, tc16_flops_clk=4096.0, tf32_flops_clk=2048.0, load_latency_us=1.0,
                       epilogue_us=0.3, ts_hide=0.8, pp_hide=0.7, split_sync_us=1.0, tf32_copy=1.42,
                       tf32_staged=1.35, tile_us=0.3, cluster_us=0.1, wgmma_gap_clk=6.0),
    # (store16_bytes_clk: the rate an SM's mma epilogue writes a 16-bit output, 4-byte register
    # stores a thread: 8192 x 8192 x 16 f16 in 128 x 256 tiles, whose output is all its time, wrote
    # 134 MB in 143 us on an H100 under ncu, 3.6 bytes a clock, where wgmma's TMA stores took 54 us.
    # The recordings rank configs within a problem, so they cannot set this level against the other
    # family's; 32-bit outputs, not measured so, keep sm_store_bytes_clk)
    "gemm_mma": dict(HW_COMMON, tc16_flops_clk=2800.0, tf32_flops_clk=1400.0, f64_flops_clk=256.0,
                     load_latency_us=1.0, epilogue_us=0.3, copy8=1.3, copy4=1.8, copy2=4.0, lp_gain=0.92,
                     mma_sat_warps=8.0, store16_bytes_clk=4.0),
    "gemm": dict(HW_COMMON, fma_flops_clk=256.0, f64_fma_flops_clk=128.0, load_latency_us=1.0, epilogue_us=0.3,
                 copy8=1.2, copy4=1.5, copy2=3.0, lds_cost=2.0, simt_sat_warps=16.0, split_sync_us=2.0,
                 atomic_bw=2.0e12),
}
FEATURES = {
    "gemm_wgmma": ["area", "aspect", "bm64", "bm256", "bn64", "bn192", "stages", "shallow", "cons2", "pingpong",
                   "rpc128", "tma_store", "cluster", "group", "split", "quant", "pad", "inv_kb", "ts_inv_kb",
                   "pp_inv_kb", "kb_lt_stages", "cluster_rows", "group_l2", "share_l2", "share_dram",
                   "share_launch", "rs", "staged", "copied", "epilogue"],
    "gemm_mma": ["area", "aspect", "warp_area", "warp_aspect", "warps", "bk_bytes", "stages", "shallow",
                 "va_narrow", "vb_narrow", "va_plain", "vb_plain", "group", "wk", "minb2", "bps", "resident_warps",
                 "quant", "pad", "inv_kb", "lp", "fb2", "uc", "share_l2", "share_dram", "share_launch", "chain",
                 "group_l2", "epilogue"],
    "gemm": ["area", "aspect", "thread_area", "thread_aspect", "threads", "bk", "va_narrow", "vb_narrow", "va_t",
             "vb_t", "db", "unroll_full", "unroll1", "group", "split", "minb2", "bps", "resident_warps", "quant",
             "pad", "inv_kt", "big_thread", "share_l2", "share_dram", "share_launch", "chain"],
}
# the analytical constants fitted to the recordings (bounds: what is physically plausible)
FIT_HW = {
    "gemm_wgmma": {"l2_bw": (4e12, 20e12), "sm_l2_bytes_clk": (24.0, 128.0), "smem_bytes_clk": (64.0, 256.0),
                   "load_latency_us": (0.3, 3.0), "p_total": (1.2, 8.0), "p_kb": (1.5, 8.0),
                   "epilogue_us": (0.02, 2.0), "sm_store_bytes_clk": (16.0, 256.0), "ts_hide": (0.01, 0.98),
                   "pp_hide": (0.01, 0.98), "split_sync_us": (0.1, 5.0), "tile_us": (0.01, 3.0),
                   "cluster_us": (0.005, 2.0), "wgmma_gap_clk": (0.5, 32.0)},
    "gemm_mma": {"l2_bw": (4e12, 20e12), "sm_l2_bytes_clk": (24.0, 128.0), "smem_bytes_clk": (64.0, 256.0),
                 "load_latency_us": (0.2, 3.0), "p_total": (1.2, 8.0), "p_kb": (1.5, 8.0),
                 "epilogue_us": (0.02, 2.0), "copy8": (1.0, 2.0), "copy4": (1.0, 4.0), "copy2": (1.0, 10.0),
                 "mma_sat_warps": (2.0, 32.0), "tc16_flops_clk": (1500.0, 4096.0)},
    "gemm": {"l2_bw": (4e12, 20e12), "sm_l2_bytes_clk": (24.0, 128.0), "load_latency_us": (0.2, 3.0),
             "p_total": (1.2, 8.0), "p_kb": (1.5, 8.0), "epilogue_us": (0.02, 2.0), "copy8": (1.0, 2.0),
             "copy4": (1.0, 4.0), "copy2": (1.0, 10.0), "lds_cost": (0.2, 8.0), "simt_sat_warps": (2.0, 48.0),
             "split_sync_us": (0.2, 8.0), "atomic_bw": (2e11, 2e13)},
}
# launch_us is not fitted: it is measured, the fastest times of the tiny lattice's problems
# (the median of their lowest LAUNCH_QUANTILE), a launch that does no work
LAUNCH_QUANTILE = 0.25
WORK_FLOOR_MS = 0.5e-3   # measured time over the launch, at least this (noise on problems of no work)
# kinds of config whose level the listwise fit cannot set (it ranks configs near each problem's
# best): a shift fitted on every measurement, the median residual of the kind against the rest's
# (gemm_mma's plain loads, an operand not 4-byte aligned: synchronous loads, no cp.async)
LEVELS = {"gemm_mma": ["plain"]}
HW_PRIOR = {"gemm_wgmma": 1.0, "gemm_mma": 1.0, "gemm": 1.0}   # pull of the constants' starting values
HW_EVALS = 700       # Nelder-Mead evaluations per fit of the constants
RIDGE = {"gemm_wgmma": 3.0, "gemm_mma": 3.0, "gemm": 3.0}
NEAR = 0.25          # weight exp(-log(t / best) / NEAR) + FLOOR: the configs near the best decide
FLOOR = 0.05
TAU = 0.05          # temperature of the listwise loss (log time): 5 % apart is a factor e
CLIP = 2.5           # |learned correction| at most (log units)
CATALOGUE_TOP = 8    # cores of each recorded space's fastest configs
VECTOR_TOP = 2      # cores of each recorded space's fastest configs per pair of vector widths (mma, SIMT)
MODEL_PICKS = 4      # cores of the family model picks of each recorded problem


@dataclass(eq=False)
class Group:
    """The measured configs of one problem under one template digest."""

    family: str
    problem: Problem
    digest: str
    source: str
    values: list = field(default_factory=list)
    times: list = field(default_factory=list)
    names: list = field(default_factory=list)
    cache: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.problem.key

    def columns(self):
        if "cols" not in self.cache:
            self.cache["cols"] = gc.columns(self.family, self.values)
        return self.cache["cols"]

    def arrays(self, hw: dict, names: list[str]):
        tag = json.dumps([hw, names], sort_keys=True)
        if self.cache.get("tag") != tag:
            ms, feats = gc.terms(self.family, self.problem, TARGET, self.columns(), hw, names)
            self.cache.update(tag=tag, terms=(np.asarray(ms, float), feats))
        return self.cache["terms"]

    def analytic(self, hw: dict) -> np.ndarray:
        return gc.terms(self.family, self.problem, TARGET, self.columns(), hw)[0]


TARGET = Target.h200()


def read_jsonl(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        for line in f:
            line = line.strip()
            if line:
                yield json.loads(line)


def load_groups(family: str, paths: list[str]) -> list[Group]:
    """Groups of successful measurements, configs completed with the current space's defaults;
    a config measured twice in a group keeps its median."""
    spec = get_spec(family)
    found: dict[tuple, Group] = {}
    per: dict[tuple, dict] = {}
    for rel in paths:
        path = ROOT / rel
        if not path.exists():
            continue
        for r in read_jsonl(path):
            if r.get("family") != family or r.get("time_ms") is None or r.get("failure"):
                continue
            problem = Problem.from_key(r["problem_key"])
            digest = r.get("provenance", {}).get("template_digest", "")
            gkey = (problem.key, digest, rel)
            if gkey not in found:
                found[gkey] = Group(family, problem, digest, rel)
                per[gkey] = {}
            space = gc.space_for(spec, problem, TARGET)
            try:
                values = gc.complete(space, family, r["config"])
                name = space.make(values).name
            except Exception:
                continue
            per[gkey].setdefault(name, (values, []))[1].append(float(r["time_ms"]))
    groups = []
    for gkey, g in found.items():
        for name in sorted(per[gkey]):
            values, times = per[gkey][name]
            g.values.append(values)
            g.times.append(statistics.median(times))
            g.names.append(name)
        if g.values:
            groups.append(g)
    return groups


def design(groups: list[Group], names: list[str], hw: dict):
    """Stacked (X, y, weights, group index) of the groups: y = log measured - log analytical."""
    xs, ys, ws, gs = [], [], [], []
    for gi, g in enumerate(groups):
        ms, feats = g.arrays(hw, names)
        t = np.asarray(g.times)
        x = np.column_stack([feats[n] for n in names]) if names else np.zeros((len(t), 0))
        y = np.log(t) - np.log(ms)
        rel = np.log(t / t.min())
        w = np.exp(-rel / NEAR) + FLOOR
        xs.append(x), ys.append(y), ws.append(w), gs.append(np.full(len(t), gi))
    return np.vstack(xs), np.concatenate(ys), np.concatenate(ws), np.concatenate(gs)


def fit(family: str, groups: list[Group], hw: dict, names: list[str] | None = None,
        ridge: float | None = None) -> dict:
    """The fitted parameters of one family (weights on standardised features, bias, hw)."""
    names = FEATURES[family] if names is None else names
    ridge = RIDGE[family] if ridge is None else ridge
    x, y, w, g = design(groups, names, hw)
    # centre x and y within each group (weighted): only differences between configs of a problem
    xc, yc = x.copy(), y.copy()
    for gi in np.unique(g):
        sel = g == gi
        ww = w[sel] / w[sel].sum()
        xc[sel] -= ww @ x[sel]
        yc[sel] -= ww @ y[sel]
    mean = np.average(x, axis=0, weights=w) if len(names) else np.zeros(0)
    scale = np.sqrt(np.average((x - mean) ** 2, axis=0, weights=w)) if len(names) else np.zeros(0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    z = xc / scale
    # every group counts alike, however many configs it holds
    sizes = np.bincount(g)
    gw = w / sizes[g] * len(y) / len(sizes)
    if len(names):
        a = z.T @ (z * gw[:, None]) + ridge * np.eye(len(names)) * gw.sum() / len(y)
        beta = np.linalg.solve(a, z.T @ (gw * yc))
    else:
        beta = np.zeros(0)
    # bias: the mean residual left (each group's weighted mean residual, groups averaged)
    resid = y - ((x - mean) / scale) @ beta
    per_group = [np.average(resid[g == gi], weights=w[g == gi]) for gi in np.unique(g)]
    bias = float(np.median(per_group))
    return {"hw": dict(hw), "features": list(names), "mean": [float(v) for v in mean],
            "scale": [float(v) for v in scale], "weights": [float(v) for v in beta], "bias": bias, "clip": CLIP}


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def listwise(log_pred: np.ndarray, log_t: np.ndarray) -> float:
    """Cross-entropy of the model's softmax over a problem's configs (-log time / TAU) against
    the measurement's: it counts where the predicted and the measured fastest configs lie,
    and a slow config predicted fast costs as much as the fast one it displaces."""
    q = _softmax(-(log_t - log_t.min()) / TAU)
    z = -(log_pred - log_pred.min()) / TAU
    return float(-(q @ z) + np.log(np.exp(z - z.max()).sum()) + z.max())


def _loss(groups: list[Group], hw: dict) -> float:
    """The listwise loss of the analytical times, each group weighing alike."""
    total = 0.0
    for g in groups:
        total += listwise(np.log(g.analytic(hw)), np.log(np.asarray(g.times)))
    total /= max(1, len(groups))
    return total if math.isfinite(total) else 1e9


def nelder_mead(f, x0: np.ndarray, step: float = 0.3, evals: int = 500) -> np.ndarray:
    """Minimise f from x0 by the Nelder-Mead simplex (reflect, expand, contract, shrink)."""
    n = len(x0)
    pts = [x0.copy()] + [x0 + step * np.eye(n)[i] for i in range(n)]
    vals = [f(p) for p in pts]
    used = n + 1
    while used < evals:
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        centre = np.mean(pts[:-1], axis=0)
        worst = pts[-1]
        xr = centre + (centre - worst)
        fr = f(xr)
        used += 1
        if fr < vals[0]:
            xe = centre + 2.0 * (centre - worst)
            fe = f(xe)
            used += 1
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = centre + 0.5 * ((xr if fr < vals[-1] else worst) - centre)
            fc = f(xc)
            used += 1
            if fc < min(fr, vals[-1]):
                pts[-1], vals[-1] = xc, fc
            else:
                for i in range(1, n + 1):
                    pts[i] = pts[0] + 0.5 * (pts[i] - pts[0])
                    vals[i] = f(pts[i])
                used += n
    return pts[int(np.argmin(vals))]


def fit_hw(family: str, groups: list[Group], hw0: dict, evals: int | None = None) -> dict:
    """The analytical constants FIT_HW[family] fitted (log scale, within their bounds) to the
    groups; the rest as given."""
    names = sorted(FIT_HW[family])
    lo = np.log([FIT_HW[family][k][0] for k in names])
    hi = np.log([FIT_HW[family][k][1] for k in names])
    width = hi - lo
    usable = [g for g in groups if len(g.times) >= 3]

    def unpack(u):
        x = lo + width * (0.5 - 0.5 * np.cos(np.pi * u))     # u in any real: a periodic map into bounds
        return {**hw0, **{k: float(np.exp(v)) for k, v in zip(names, x)}}

    def start(k, i):
        v = min(max(math.log(hw0[k]), lo[i] + 1e-9), hi[i] - 1e-9)
        return math.acos(1 - 2 * (v - lo[i]) / width[i]) / math.pi

    u0 = np.array([start(k, i) for i, k in enumerate(names)])
    x0 = np.array([math.log(hw0[k]) for k in names])
    prior = HW_PRIOR.get(family, 0.0)

    def objective(u):
        hw = unpack(u)
        x = np.array([math.log(hw[k]) for k in names])
        return _loss(usable, hw) + prior * float(np.mean(((x - x0) / width) ** 2))

    best = nelder_mead(objective, u0, step=0.15, evals=evals or HW_EVALS)
    return unpack(best)


def fit_listwise(family: str, groups: list[Group], hw: dict, names: list[str] | None = None,
                 ridge: float | None = None, steps: int = 30) -> dict:
    """The linear correction fitted by Newton's method on the listwise loss (convex in the
    weights) plus ridge * |w|^2 on standardised features."""
    names = FEATURES[family] if names is None else names
    ridge = RIDGE[family] if ridge is None else ridge
    usable = [g for g in groups if len(g.times) >= 2]
    launch = hw["launch_us"] * 1e-3
    blocks = []
    for g in usable:     # the correction scales the work: what the analytical time and the measured leave over the launch
        ms, feats = g.arrays(hw, names)
        x = np.column_stack([feats[n] for n in names]) if names else np.zeros((len(ms), 0))
        work = np.maximum(np.asarray(g.times) - launch, WORK_FLOOR_MS)
        blocks.append((x, np.log(np.maximum(ms - launch, 1e-9)), np.log(work)))
    allx = np.vstack([b[0] for b in blocks])
    mean, scale = allx.mean(axis=0), allx.std(axis=0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    zs = [((x - mean) / scale, a, lt) for x, a, lt in blocks]
    w = np.zeros(len(names))
    for _ in range(steps):
        grad = 2 * ridge * w
        hess = 2 * ridge * np.eye(len(names))
        for z, a, lt in zs:
            q = _softmax(-(lt - lt.min()) / TAU)
            p = _softmax(-(a + z @ w) / TAU)
            d = z / TAU
            # loss = -q.(-(a+zw)/T) + lse(-(a+zw)/T): gradient d^T (q - p), Hessian d^T (P - pp^T) d
            grad += d.T @ (q - p) / len(zs)
            hess += (d.T @ (d * p[:, None]) - np.outer(d.T @ p, d.T @ p)) / len(zs)
        step = np.linalg.solve(hess, grad)
        w -= step
        if not len(step) or np.abs(step).max() < 1e-6:
            break
    resid = [np.median(lt - (a + z @ w)) for z, a, lt in zs]
    return {"hw": dict(hw), "features": list(names), "mean": [float(v) for v in mean],
            "scale": [float(v) for v in scale], "weights": [float(v) for v in w],
            "bias": float(np.median(resid)), "clip": CLIP}


def launch_floor(groups: list[Group], default_us: float) -> float:
    """The launch's time in microseconds: the median of the lowest LAUNCH_QUANTILE of the tiny
    lattice's problems' fastest times (``default_us`` where no such problem was recorded)."""
    bests = sorted(min(g.times) * 1e3 for g in groups if g.source in TINY)
    if not bests:
        return default_us
    return float(statistics.median(bests[:max(1, round(len(bests) * LAUNCH_QUANTILE))]))


def fit_levels(family: str, groups: list[Group], fitted: dict) -> dict:
    """The LEVELS shifts of ``family`` on the correction (log units, within +-CLIP): over every
    measurement, the median residual of the work (measured and predicted, over the launch) of
    configs of the kind, less that of the others."""
    names = LEVELS.get(family, [])
    if not names:
        return {}
    launch = fitted["hw"]["launch_us"] * 1e-3
    resid, kinds = [], {n: [] for n in names}
    for g in groups:
        pred = predict(g, fitted)
        _, feats = g.arrays(fitted["hw"], names)
        work = np.maximum(np.asarray(g.times) - launch, WORK_FLOOR_MS)
        resid.append(np.log(work) - np.log(np.maximum(pred - launch, 1e-9)))
        for n in names:
            kinds[n].append(feats[n] > 0.5)
    resid = np.concatenate(resid)
    out = {}
    for n in names:
        kind = np.concatenate(kinds[n])
        if kind.any() and (~kind).any():
            out[n] = float(np.clip(np.median(resid[kind]) - np.median(resid[~kind]), -CLIP, CLIP))
    return out


def predict(group: Group, fitted: dict) -> np.ndarray:
    cols = gc.columns(group.family, group.values)
    return gc.predict_columns(group.family, group.problem, TARGET, cols, fitted)


# ---- catalogue -----------------------------------------------------------------------------

def catalogue(family: str, shipped: list[Group], spaces: list[Group], exclude: str | None = None) -> list:
    """Cores: of every shipped record, of each recorded space's CATALOGUE_TOP fastest configs,
    and of the family's default and model picks for each recorded problem (``exclude``: a
    problem key left out, for the held-out evaluation)."""
    spec = get_spec(family)
    cores = set()
    for g in shipped + spaces:
        if g.key == exclude:
            continue
        order = np.argsort(g.times, kind="stable")
        take = list(order) if any(g is s for s in shipped) else list(order[:CATALOGUE_TOP])
        if family in ("gemm_mma", "gemm") and not any(g is s for s in shipped):
            # the fastest of each pair of vector widths: the cores an unaligned problem can use
            seen: dict = {}
            for i in order:
                pair = (g.values[i]["VA"], g.values[i]["VB"])
                if seen.get(pair, 0) < VECTOR_TOP:
                    seen[pair] = seen.get(pair, 0) + 1
                    take.append(i)
        for i in take:
            cores.add(gc.core_of(family, g.values[i], g.problem["dtype"]))
    problems = {g.key: g.problem for g in shipped + spaces if g.key != exclude}
    for key in sorted(problems):
        p = problems[key]
        try:
            picks = spec.model_picks(p, TARGET, MODEL_PICKS) + [spec.default_config(p, TARGET)]
        except Exception:
            continue
        for c in picks:
            cores.add(gc.core_of(family, c.as_dict(), p["dtype"]))
    return sorted(cores)


# ---- evaluation ----------------------------------------------------------------------------

def evaluate(family: str, fitted: dict, group: Group) -> dict:
    pred = predict(group, fitted)
    t = np.asarray(group.times)
    best = t.min()
    order = sorted(range(len(t)), key=lambda i: (pred[i], group.names[i]))
    top = order[0]
    true_rank = int(np.sum(t < t[top])) + 1
    spec = get_spec(family)
    default = spec.default_config(group.problem, TARGET).name
    d = group.names.index(default) if default in group.names else None
    # rank correlation of the prediction with the measurement (Spearman)
    rp = np.argsort(np.argsort(pred))
    rt = np.argsort(np.argsort(t))
    rho = float(np.corrcoef(rp, rt)[0, 1]) if len(t) > 2 else float("nan")
    top5 = min(t[i] for i in order[:5]) / best
    return {"family": family, "problem": group.key, "source": group.source, "digest": group.digest,
            "configs": len(t), "best_ms": float(best), "pick": group.names[top], "pick_rank": true_rank,
            "pick_ratio": float(t[top] / best), "top5_ratio": float(top5),
            "default": default, "default_ratio": (float(t[d] / best) if d is not None else None),
            "default_rank": (int(np.sum(t < t[d])) + 1 if d is not None else None),
            "analytic_ratio": None, "spearman": rho}


def lopo(family: str, groups: list[Group], hw: dict, eval_groups: list[Group], min_configs: int = 2) -> list[dict]:
    """Leave one problem out: for each evaluated group, fit on the groups of other problems."""
    rows = []
    for g in eval_groups:
        if len(g.times) < min_configs:
            continue
        fitted = fit_groups(family, [h for h in groups if h.key != g.key], hw)
        row = evaluate(family, fitted, g)
        a = evaluate(family, analytic_only(fitted["hw"]), g)
        row["analytic_ratio"], row["analytic_rank"] = a["pick_ratio"], a["pick_rank"]
        rows.append(row)
    return rows


FIT = {"gemm_wgmma": fit_listwise, "gemm_mma": fit_listwise, "gemm": fit_listwise}


def fit_groups(family: str, groups: list[Group], hw: dict) -> dict:
    """The family's model fitted on ``groups`` from the constants ``hw``: the analytical
    constants (where FIT_HW names some), the correction, then the levels."""
    hw = fit_hw(family, groups, hw) if FIT_HW.get(family) else hw
    fitted = FIT[family](family, groups, hw)
    fitted["levels"] = fit_levels(family, groups, fitted)
    return fitted


def analytic_only(hw: dict) -> dict:
    return {"hw": hw, "features": [], "mean": [], "scale": [], "weights": [], "bias": 0.0, "clip": CLIP}


def short(key: str) -> str:
    p = Problem.from_key(key).as_dict()
    extra = "" if p.get("epilogue", "none") == "none" else f" {p['epilogue']}"
    return f"{p['dtype'][:4]} {p['layout']} {p['m']}x{p['n']}x{p['k']}{extra}"


def print_table(rows: list[dict]) -> None:
    head = f"{'family':10} {'problem':34} {'src':5} {'n':>5} {'pick':>6} {'rank':>5} {'analyt':>6} {'default':>7} {'top5':>6} {'rho':>5}"
    print(head)
    print("-" * len(head))
    for r in rows:
        src = "space" if "space" in r["source"] else ("db" if "tuning_db" in r["source"] else "eval")
        d = f"{r['default_ratio']:.3f}" if r["default_ratio"] is not None else "  -"
        print(f"{r['family']:10} {short(r['problem']):34} {src:5} {r['configs']:5d} {r['pick_ratio']:6.3f} "
              f"{r['pick_rank']:5d} {r['analytic_ratio']:6.3f} {d:>7} {r['top5_ratio']:6.3f} {r['spearman']:5.2f}")


def summary(rows: list[dict]) -> dict:
    def gm(xs):
        xs = [x for x in xs if x is not None]
        return float(math.exp(sum(math.log(x) for x in xs) / len(xs))) if xs else None

    both = [r for r in rows if r["default_ratio"] is not None]
    return {"problems": len(rows), "pick_geomean": gm([r["pick_ratio"] for r in rows]),
            "pick_worst": max((r["pick_ratio"] for r in rows), default=None),
            "within_1.05": sum(r["pick_ratio"] <= 1.05 for r in rows),
            "within_1.15": sum(r["pick_ratio"] <= 1.15 for r in rows),
            "analytic_geomean": gm([r["analytic_ratio"] for r in rows]),
            "default_measured": len(both),
            "pick_geomean_where_default": gm([r["pick_ratio"] for r in both]),
            "default_geomean": gm([r["default_ratio"] for r in both])}


def train(family: str, lopo_eval: bool = True, verbose: bool = True):
    t0 = time.perf_counter()
    spaces = load_groups(family, SPACE_FILES[family])
    shipped = load_groups(family, [SHIPPED[family]])
    groups = spaces + shipped
    start = dict(HW[family], launch_us=launch_floor(groups, HW[family]["launch_us"]))
    fitted = fit_groups(family, groups, start)
    fitted["catalogue"] = {"core_params": list(gc.CORE[family]), "cores": [list(c) for c in
                                                                        catalogue(family, shipped, spaces)]}
    fitted["data"] = {"groups": len(groups), "measurements": int(sum(len(g.times) for g in groups)),
                      "problems": len({g.key for g in groups})}
    rows = []
    if lopo_eval:
        evals = spaces + [g for g in shipped if len(g.times) >= 2]
        extra = load_groups(family, EVAL_ONLY.get(family, []))
        rows = lopo(family, groups, start, evals + extra)   # from the initial constants: honest folds
    if verbose:
        print(f"{family}: {fitted['data']} fitted in {time.perf_counter() - t0:.1f} s, "
              f"{len(fitted['catalogue']['cores'])} catalogue cores")
    return fitted, rows


def rounded(value):
    """Floats rounded to 12 decimals, all the way down: fits on two machines differ in the last
    bits (summation order), not in what they predict."""
    if isinstance(value, float):
        return round(value, 12) + 0.0
    if isinstance(value, list):
        return [rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    return value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-lopo", action="store_true", help="fit and write the model only")
    ap.add_argument("--out", default=str(gc.MODEL_PATH), help="the model file to write")
    ap.add_argument("--families", default=",".join(gc.FAMILIES))
    ap.add_argument("--keep-others", action="store_true",
                    help="keep the other families of the model file as they are (refit only --families)")
    args = ap.parse_args(argv)
    families, all_rows = {}, []
    if args.keep_others:
        families = dict(json.loads(gc.MODEL_PATH.read_text())["families"])
    for family in args.families.split(","):
        fitted, rows = train(family, not args.no_lopo)
        families[family] = fitted
        all_rows += rows
    families = rounded(families)        # the same data give the same file (and version) on any machine
    used = {p for f in families for p in SPACE_FILES[f] + [SHIPPED[f]] if (ROOT / p).exists()}
    model = {"version": f"gemm-cost-1+{gc.parameters_digest(families)}", "target": TARGET.name,
             "trained_on": sorted(used), "families": families}
    Path(args.out).write_text(json.dumps(model, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out} ({Path(args.out).stat().st_size / 1024:.0f} KiB), version {model['version']}")
    if all_rows:
        print()
        print_table(all_rows)
        sums = {f: summary([r for r in all_rows if r["family"] == f]) for f in families}
        for f, s in sums.items():
            print(f"{f}: {json.dumps(s)}")
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps({"model_version": model["version"], "summary": sums, "rows": all_rows},
                                      indent=1) + "\n")
        print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
