"""The memory-bound families side by side with PyTorch eager, ``torch.compile`` and CuPy, in one run.

Each case is timed as a user calls it (``kgen.elementwise``, ``kgen.cast``, ``kgen.reduce``,
``kgen.softmax``, ``kgen.rmsnorm``, ``kgen.permute`` on PyTorch tensors, into a preallocated
output where the call takes one) with CUDA events, the L2 flushed before each run, median
of the runs, kgen's time the mean of its medians before and after its baselines
(``kgen_ms_runs``); the device-to-device copy rate is measured in the same run, and each row gives
the fraction of it that kgen reaches (bytes moved / kgen time / copy rate). Before timing,
each case's kgen result is compared with PyTorch's.

    python scripts/bench_memory.py                       # every case -> scripts/results/<device>/bench_memory.json
    python scripts/bench_memory.py --ops softmax,rmsnorm --no-compile --quick

Rows: family, op, dtype, shape, bytes, kgen_ms, baselines ({"torch", "torch.compile", "cupy"}: ms),
fraction_of_copy, speedup (fastest baseline / kgen), config and how dispatch chose it
(tuned, default, nearest), ok (the result matched PyTorch's).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchlib import add_run_args, commit, geomean, gpu_session, last_choice, median_ms, write_keys  # noqa: E402

MB = 1 << 20


def _cases(quick: bool) -> list[dict]:
    """(family, op, dtype, shape) of every case; sizes from about 1 MB to about 4 GB moved."""
    cases = []
    def add(family, op, dtype, shape):
        cases.append({"family": family, "op": op, "dtype": dtype, "shape": list(shape)})
    for n in ([1 << 18, 1 << 24] if quick else [1 << 16, 1 << 18, 1 << 22, 1 << 24, 1 << 26, 1 << 28]):
        add("elementwise", "2 * x + y", "float32", (n,))
    for n in ([1 << 24] if quick else [1 << 18, 1 << 22, 1 << 26, 1 << 28]):
        add("elementwise", "2 * x + y", "bfloat16", (n,))
    for n in ([1 << 24] if quick else [1 << 18, 1 << 22, 1 << 26, 1 << 28]):
        add("cast", "float32->bfloat16", "float32", (n,))
    for n in ([1 << 24] if quick else [1 << 18, 1 << 22, 1 << 26, 1 << 28]):
        add("reduce", "sum", "float32", (n,))
    add("reduce", "sum", "bfloat16", (8192, 8192))
    for rows, cols in ([(32768, 8192)] if quick else [(256, 1024), (4096, 4096), (32768, 8192), (4096, 50257),
                                                      (65536, 128), (8, 262144), (16, 152064)]):
        add("softmax", "softmax", "bfloat16", (rows, cols))
    for rows, cols in ([(32768, 8192)] if quick else [(256, 1024), (4096, 4096), (32768, 8192), (65536, 128),
                                                      (8192, 5120), (8, 262144)]):
        add("rmsnorm", "rmsnorm", "bfloat16", (rows, cols))
    add("softmax", "softmax", "float32", (8192, 8192))
    for n in ([8192] if quick else [512, 4096, 16384]):
        add("permute", "transpose", "float32", (n, n))
    add("permute", "transpose", "bfloat16", (8192, 8191))
    add("permute", "NCHW->NHWC", "bfloat16", (64, 256, 56, 56))
    if not quick:
        add("permute", "NHWC->NCHW", "bfloat16", (64, 56, 56, 256))
        add("permute", "NCHW->NHWC", "float32", (32, 64, 112, 112))
    return cases


def _inputs(case: dict, torch) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(1)
    dtype = getattr(torch, case["dtype"])
    shape = tuple(case["shape"])

    def rand(shape, dtype=dtype, low=-1.0, high=1.0):
        x = torch.rand(shape, device="cuda", generator=gen, dtype=torch.float32) * (high - low) + low
        x[x == 0] = 0.5
        return x.to(dtype)
    return {"x": rand(shape), "y": rand(shape), "w": rand(shape[-1:]) if case["family"] == "rmsnorm" else None}


def _calls(case: dict, ops: dict, torch, cupy, kgen) -> tuple[Callable, Callable, Callable | None, int, Callable]:
    """(kgen call, PyTorch eager function, CuPy call or None, bytes moved, kgen's choice)."""
    x, y, w = ops["x"], ops["y"], ops["w"]
    size = x.element_size()
    n = x.numel()
    family, op = case["family"], case["op"]
    if family == "elementwise":
        out = torch.empty_like(x)
        cx, cy = (cupy.asarray(x), cupy.asarray(y)) if x.dtype != torch.bfloat16 else (None, None)
        return (lambda: kgen.elementwise("2 * x + y", x=x, y=y, out=out), lambda x, y: 2 * x + y,
                (lambda: 2 * cx + cy) if cx is not None else None, 3 * n * size, out)
    if family == "cast":
        out = torch.empty_like(x, dtype=torch.bfloat16)
        return (lambda: kgen.cast(x, "bfloat16", out=out), lambda x, y: x.to(torch.bfloat16), None,
                n * (size + 2), out)
    if family == "reduce":
        rows = x.reshape(-1, x.shape[-1]) if x.dim() > 1 else x.reshape(1, -1)
        cx = cupy.asarray(x) if x.dtype != torch.bfloat16 else None
        if x.dim() == 1:
            return (lambda: kgen.reduce(x, "sum", axis=None), lambda x, y: x.sum(), (lambda: cx.sum()) if cx is not None else None,
                    n * size, None)
        return (lambda: kgen.reduce(x, "sum"), lambda x, y: x.sum(-1), None, n * size + rows.shape[0] * size, None)
    if family == "softmax":
        out = torch.empty_like(x)
        cx = cupy.asarray(x) if x.dtype != torch.bfloat16 else None
        cupy_fn = None
        if cx is not None:
            import cupyx.scipy.special as special
            cupy_fn = lambda: special.softmax(cx, axis=-1)      # noqa: E731
        return (lambda: kgen.softmax(x, out=out), lambda x, y: torch.softmax(x, -1), cupy_fn, 2 * n * size, out)
    if family == "rmsnorm":
        out = torch.empty_like(x)

        def eager(x, y, w=w):
            return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
        return (lambda: kgen.rmsnorm(x, w, 1e-6, out=out), eager, None, 2 * n * size + w.numel() * size, out)
    if family == "permute":
        axes = {"transpose": (1, 0), "NCHW->NHWC": (0, 2, 3, 1), "NHWC->NCHW": (0, 3, 1, 2)}[op]
        out = torch.empty(tuple(x.shape[a] for a in axes), device="cuda", dtype=x.dtype)
        cx = cupy.asarray(x) if x.dtype != torch.bfloat16 else None
        return (lambda: kgen.permute(x, axes, out=out), lambda x, y: x.permute(*axes).contiguous(),
                (lambda: cupy.ascontiguousarray(cx.transpose(axes))) if cx is not None else None, 2 * n * size, out)
    raise ValueError(family)


def copy_rate(torch, flush, runs: int) -> float:
    """Bytes per ms of a 1 GiB device-to-device copy (read + write), L2 flushed."""
    src = torch.rand(1 << 28, device="cuda")
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), runs, flush)
    return 2 * src.numel() * 4 / ms


def _compare(got, want, dtype) -> bool:
    import torch

    tol = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 2e-2}[dtype]
    got, want = got.float(), want.float()
    return bool(torch.allclose(got, want, rtol=tol, atol=tol * float(want.abs().max().clamp(min=1))))


def bench_case(case: dict, args, torch, cupy, kgen, flush, rate: float, log) -> dict:
    ops = _inputs(case, torch)
    call, eager, cupy_fn, moved, out = _calls(case, ops, torch, cupy, kgen)
    row = dict(case, bytes=moved, baselines={}, ok=None, config="", how="")
    try:
        got = call()
        got = out if out is not None else got
        torch.cuda.synchronize()
        row["ok"] = _compare(got if isinstance(got, torch.Tensor) else torch.as_tensor(got), eager(ops["x"], ops["y"]),
                             case["dtype"])
        row["config"], row["how"] = last_choice(case["family"])
        row["kgen_ms"] = median_ms(call, args.runs, flush)
    except Exception as exc:                                     # a failure is a row, not the end of the run
        row["error"] = f"{type(exc).__name__}: {exc}"[:500]
        log(f"  kgen failed: {row['error']}")
    row["baselines"]["torch"] = median_ms(lambda: eager(ops["x"], ops["y"]), args.runs, flush)
    if cupy_fn is not None:
        row["baselines"]["cupy"] = median_ms(cupy_fn, args.runs, flush)
    if args.compile:
        try:
            compiled = torch.compile(eager, mode="max-autotune-no-cudagraphs", dynamic=False)
            compiled(ops["x"], ops["y"])
            row["baselines"]["torch.compile"] = median_ms(lambda: compiled(ops["x"], ops["y"]), args.runs, flush)
        except Exception as exc:
            row["compile_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if "kgen_ms" in row:     # timed again after its baselines: neither side has the first place
        row["kgen_ms_runs"] = [row["kgen_ms"], median_ms(call, args.runs, flush)]
        row["kgen_ms"] = statistics.fmean(row["kgen_ms_runs"])
        row["fraction_of_copy"] = moved / row["kgen_ms"] / rate
        best = min(row["baselines"].values())
        row["speedup"] = best / row["kgen_ms"]
        row["fastest_baseline"] = min(row["baselines"], key=row["baselines"].get)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default="", help="families to run, comma-separated (default: all)")
    parser.add_argument("--quick", action="store_true", help="one or two sizes per family")
    parser.add_argument("--rows-at-most", type=int, default=0,
                        help="only the 2-D cases of at most this many rows (e.g. 16: the few long rows)")
    parser.add_argument("--no-compile", dest="compile", action="store_false", help="leave torch.compile out")
    add_run_args(parser, "write the problem keys of the cases here, one file per family (KEYS.FAMILY.txt), "
                         "for `kgen tune FAMILY --from`")
    args = parser.parse_args(argv)

    cupy, torch, kgen, target, flush = gpu_session()
    rate = copy_rate(torch, flush, args.runs)
    print(f"{target.name}: copy {rate * 1e3 / 1e12:.2f} TB/s", flush=True)
    wanted = set(filter(None, args.ops.split(",")))
    out = Path(args.out) if args.out else ROOT / "scripts" / "results" / target.slug / "bench_memory.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"device": target.name, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": args.commit or commit(), "copy_tb_s": rate * 1e3 / 1e12, "runs": args.runs,
            "torch": torch.__version__, "compile_mode": "max-autotune-no-cudagraphs" if args.compile else None,
            "l2": "flushed"}
    rows = []
    for case in _cases(args.quick):
        if wanted and case["family"] not in wanted:
            continue
        if args.rows_at_most and (len(case["shape"]) != 2 or case["shape"][0] > args.rows_at_most):
            continue
        start = time.perf_counter()
        row = bench_case(case, args, torch, cupy, kgen, flush, rate, print)
        rows.append(row)
        base = " ".join(f"{k} {v:.4f}" for k, v in row["baselines"].items())
        print(f"{case['family']:11s} {case['op']:18s} {case['dtype']:8s} {str(tuple(case['shape'])):22s} "
              f"kgen {row.get('kgen_ms', float('nan')):.4f} ms ({row.get('fraction_of_copy', float('nan')):.2f} copy, "
              f"{row['how']}) | {base} | x{row.get('speedup', float('nan')):.2f} ok={row['ok']} "
              f"[{time.perf_counter() - start:.0f} s]", flush=True)
        out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")     # kept as it grows
        if args.keys:
            write_keys(args.keys, case["family"])
    fractions = [r["fraction_of_copy"] for r in rows if "fraction_of_copy" in r]
    speedups = [r["speedup"] for r in rows if "speedup" in r]
    if speedups:
        print(f"geomean speed-up over the fastest baseline {geomean(speedups):.2f}; "
              f"fraction of copy median {statistics.median(fractions):.2f}")
    print(f"wrote {out}")
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
