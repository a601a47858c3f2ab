"""Tuned GEMM kernels exported by kgen. The only runtime dependency is CuPy.

    import __PACKAGE__
    c = __PACKAGE__.gemm(a, b)            # CuPy (or __cuda_array_interface__) arrays
    __PACKAGE__.problems()                # the exported problem keys
    __PACKAGE__.choose(4096, 4096, 4096, "float32", "NN", 4, 4)   # the config a call would use

A problem that was not exported uses the nearest exported config of the same dtype and
layout whose vector widths the operands allow, else that dtype and layout's scalar-load
kernel (``fallback="nearest"``, the default), or raises ``ExportedError``
(``fallback="error"``).
"""

import json
import math
import os

from . import _launch, _loader, _rules   # none of them loads NumPy or CuPy

_HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(_HERE, "table.json")) as _f:
    TABLE = json.load(_f)
_PLANS = {}


class ExportedError(Exception):
    """An input this module cannot serve; the message says what to do."""


def problems():
    return sorted(TABLE["problems"])


def _distance(entry, m, n, k):
    p = entry["problem"]
    return math.sqrt(sum((math.log2(max(1, x)) - math.log2(max(1, p[name]))) ** 2
                         for x, name in ((m, "m"), (n, "n"), (k, "k"))))


def choose(m, n, k, dtype, layout, align_a, align_b, fallback="nearest"):
    """(config name, config values, how) for a problem: 'exact' or 'nearest'."""
    key = _rules.problem_key(m, n, k, dtype, layout, align_a, align_b)
    entry = TABLE["problems"].get(key)
    if entry is not None:
        return entry["config"], entry["values"], "exact"
    if fallback != "nearest":
        raise ExportedError(f"{key} was not exported; export it, or call with fallback='nearest'")
    usable = [e for e in TABLE["problems"].values()
              if e["problem"]["dtype"] == dtype and e["problem"]["layout"] == layout
              and e["values"]["VA"] <= align_a and e["values"]["VB"] <= align_b]
    if not usable:
        fallback_entry = TABLE.get("fallbacks", {}).get(f"{dtype}|{layout}")
        if fallback_entry is None:
            raise ExportedError(f"no exported {dtype} {layout} kernel fits {key}; export one for it")
        return fallback_entry["config"], fallback_entry["values"], "unaligned"
    best = min(usable, key=lambda e: (_distance(e, m, n, k), e["config"]))
    return best["config"], best["values"], "nearest"


def _plan(a, b, c, ia, ib, ic, fallback):
    for x, label in ((ia, "a"), (ib, "b")):
        if len(x["shape"]) != 2:
            raise ExportedError(f"{label} must be 2-D")
    (m, k), (k2, n) = ia["shape"], ib["shape"]
    if k != k2:
        raise ExportedError(f"inner dimensions differ: a is {m}x{k}, b is {k2}x{n}")
    import numpy as np

    dtype = np.dtype(ia["typestr"]).name
    if dtype != np.dtype(ib["typestr"]).name or dtype not in _rules.ITEMSIZE:
        raise ExportedError(f"a and b must share one dtype of {sorted(_rules.ITEMSIZE)}")
    size = _rules.ITEMSIZE[dtype]

    def strides(info):
        if info.get("strides") is None:
            return (info["shape"][1], 1)
        return tuple(s // size for s in info["strides"])

    la, lb = _rules.operand_layout((m, k), strides(ia)), _rules.operand_layout((k, n), strides(ib))
    if la is None or lb is None:
        raise ExportedError("a and b must be row-major or transposed views of row-major arrays; pass .copy()")
    align_a = _rules.alignment(ia["data"][0], la[1], size)
    align_b = _rules.alignment(ib["data"][0], lb[1], size)
    if ic is not None:
        if tuple(ic["shape"]) != (m, n) or np.dtype(ic["typestr"]).name != dtype:
            raise ExportedError(f"c must be {m}x{n} {dtype}")
        ldc = strides(ic)[0]
    else:
        ldc = n
    plan = {"m": m, "n": n, "dtype": dtype, "empty": m == 0 or n == 0}
    if plan["empty"]:
        return plan
    name, values, how = choose(m, n, k, dtype, la[0] + lb[0], align_a, align_b, fallback)
    grid, block, smem = _rules.launch_geometry(m, n, dtype, values)
    scalar = np.float64 if dtype == "float64" else np.float32
    dims = (np.int32(m), np.int32(n), np.int32(k), np.int64(la[1]), np.int64(lb[1]), np.int64(max(ldc, 1)))
    kernel = _loader.kernel(_HERE, TABLE["arch"], name, smem)
    template = (np.uint64(0), np.uint64(0), np.uint64(0), *dims, scalar(0), scalar(0))
    plan.update(config=name, how=how, split_k=values["SK"] > 1, dims=dims,
                launch=_launch.BoundLaunch(kernel.kernel, grid, block, smem, template))
    return plan


def gemm(a, b, c=None, alpha=1.0, beta=0.0, fallback="nearest"):
    """C = alpha * a @ b + beta * c with the exported kernel for the shape; returns c.

    Runs on CuPy's current stream, without synchronising. The first call of a signature
    chooses and loads the kernel; later calls reuse that plan."""
    ndarray = _launch.cupy_ndarray()
    if type(a) is ndarray and type(b) is ndarray and (c is None or type(c) is ndarray):
        pa, pb = a.data.ptr, b.data.ptr            # CuPy's own attributes: cheaper than the interface
        sig = ("cupy", a.shape, a.strides, a.dtype.char, pa & 15, a.data.device_id,
               b.shape, b.strides, b.dtype.char, pb & 15, b.data.device_id, fallback)
        if c is not None:
            sig += (c.shape, c.strides, c.dtype.char, c.data.device_id)
        ia = ib = ic = None
    else:
        import cupy

        ia, ib = a.__cuda_array_interface__, b.__cuda_array_interface__
        ic = c.__cuda_array_interface__ if c is not None else None
        pa, pb = ia["data"][0], ib["data"][0]
        sig = (ia["shape"], ia["strides"], ia["typestr"], pa & 15,
               ib["shape"], ib["strides"], ib["typestr"], pb & 15,
               None if ic is None else (ic["shape"], ic["strides"], ic["typestr"]), fallback,
               cupy.cuda.runtime.getDevice())
    plan = _PLANS.get(sig)
    if plan is None:
        if ia is None:
            ia, ib = a.__cuda_array_interface__, b.__cuda_array_interface__
            ic = c.__cuda_array_interface__ if c is not None else None
        plan = _PLANS[sig] = _plan(a, b, c, ia, ib, ic, fallback)
    if c is None:
        import cupy

        c = cupy.empty((plan["m"], plan["n"]), dtype=plan["dtype"])
        beta = 0.0
    if plan["empty"]:
        return c
    if plan["split_k"]:          # partial sums are added atomically into beta * c
        _launch.scale_output(c, beta)
    plan["launch"]((pa, pb, _launch.data_pointer(c), *plan["dims"], alpha, beta))
    return c
