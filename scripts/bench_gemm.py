"""GEMM benchmark on this GPU: tune each problem, then time kgen's best and cuBLAS side by side.

Writes scripts/results/<device>/bench_gemm.json (rows: op, dtype, precision, layout, m, n, k,
kgen_ms, kgen_config, baselines {"cublas": ms}, relerr, plus tflops) and, with --export,
the tuned best records as JSON lines for tuning_db/.

    python scripts/bench_gemm.py --suite simt            # the issue's problem list
    python scripts/bench_gemm.py --suite quick --trials 40
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# (dtype, layout, m, n, k, trials): trials are the tune's budget for that problem.
SUITES = {
    "simt": [
        ("float32", "NN", 4096, 4096, 4096, 300),
        ("float32", "NT", 4096, 4096, 4096, 120),
        ("float32", "TN", 4096, 4096, 4096, 120),
        ("float32", "TT", 4096, 4096, 4096, 120),
        ("float32", "NN", 8192, 8192, 8192, 30),
        ("float32", "NN", 1000, 1000, 1000, 150),
        ("float32", "NN", 3000, 5000, 700, 150),
        ("float32", "NN", 128, 4096, 4096, 150),
        ("float32", "NN", 16, 4096, 4096, 150),
        ("float32", "NN", 4096, 4096, 256, 150),
    ],
    "quick": [
        ("float32", "NN", 4096, 4096, 4096, 60),
        ("float32", "NN", 1000, 1000, 1000, 40),
    ],
}


def _commit() -> str:
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _median_ms(run, timing, flush) -> float:
    from kgen.measure.bench import time_runs

    return statistics.median(time_runs(run, timing, flush))


def bench_problem(spec, problem, target, db, runner, trials, timeout_s, flush, timing):
    import cupy

    from kgen.compile import compile_source
    from kgen.measure.launch import CupyKernel
    from kgen.render import render
    from kgen.search import tune

    result = tune(spec, problem, target, runner, db, trials=trials, timeout_s=timeout_s,
                  on_progress=lambda p: print(f"\r  {p.done}/{p.budget} best "
                                              f"{p.best.time_ms if p.best else float('nan'):.4f} ms", end=""))
    print()
    best = result.best
    config = spec.space(problem, target).make(best.config)
    binary = compile_source(render(spec, problem, config, target)).binary
    kernel = CupyKernel(binary.cubin, binary.entry, binary.path)
    ops = spec.inputs(problem, seed=123)           # fresh inputs, not the tune's
    want = spec.reference(problem, ops)["c"]
    spec.run(kernel, problem, config, ops)
    cupy.cuda.get_current_stream().synchronize()
    got = ops["c"].astype(cupy.float64)
    relerr = float(cupy.linalg.norm(got - want) / cupy.linalg.norm(want))
    a, b, c = ops["a"], ops["b"], ops["c"]
    kgen_ms = _median_ms(lambda: spec.run(kernel, problem, config, ops), timing, flush)
    cublas_ms = _median_ms(lambda: cupy.matmul(a, b, out=c), timing, flush)
    flops = spec.flops(problem)
    row = dict(op="gemm", dtype=problem["dtype"], precision=problem["dtype"], layout=problem["layout"],
               m=problem["m"], n=problem["n"], k=problem["k"], kgen_ms=kgen_ms, kgen_config=config.name,
               baselines={"cublas": cublas_ms}, relerr=relerr,
               kgen_tflops=flops / kgen_ms / 1e9, cublas_tflops=flops / cublas_ms / 1e9,
               ratio_vs_cublas=cublas_ms / kgen_ms, tune_trials=result.measured + result.known,
               tune_s=result.seconds, tune_compile_s=result.compile_s, tune_measure_s=result.measure_s,
               tune_failures=dict(result.failures))
    print(f"  kgen {kgen_ms:.4f} ms ({row['kgen_tflops']:.1f} TFLOP/s)  cublas {cublas_ms:.4f} ms "
          f"({row['cublas_tflops']:.1f})  ratio {row['ratio_vs_cublas']:.3f}  relerr {relerr:.2e}  {config.name}")
    return row, result


def dispatch_overhead(spec, target, db, runner, timing, calls: int = 2000) -> dict:
    """Host time per kgen.gemm call on a tuned 256^3 problem minus a raw launch of its cubin."""
    import cupy

    import kgen
    from kgen.dispatch import Dispatcher, set_default_dispatcher
    from kgen.kernels.gemm import gemm_problem
    from kgen.search import tune

    problem = gemm_problem(256, 256, 256, "float32", "NN")
    tune(spec, problem, target, runner, db, trials=30)
    set_default_dispatcher(Dispatcher(db=db))
    a = cupy.random.default_rng(1).random((256, 256), dtype=cupy.float32)
    b = cupy.random.default_rng(2).random((256, 256), dtype=cupy.float32)
    c = cupy.empty((256, 256), dtype=cupy.float32)
    kgen.gemm(a, b, c)
    loaded = kgen.dispatch.default_dispatcher().prepare(spec, problem, 0)
    geo = spec.launch(problem, loaded.choice.config)
    args = spec.args(problem, loaded.choice.config, {"a": a, "b": b, "c": c})
    fn = loaded.kernel.function

    def per_call(f) -> float:
        best = float("inf")
        for _ in range(5):
            cupy.cuda.get_current_stream().synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            t1 = time.perf_counter()
            cupy.cuda.get_current_stream().synchronize()
            best = min(best, (t1 - t0) / calls * 1e6)
        return best

    kgen_us = per_call(lambda: kgen.gemm(a, b, c))
    raw_us = per_call(lambda: fn(geo.grid, geo.block, args, shared_mem=geo.shared_mem))
    cupy_us = per_call(lambda: cupy.matmul(a, b, out=c))
    return dict(op="dispatch_overhead", m=256, n=256, k=256, dtype="float32", kgen_us_per_call=kgen_us,
                raw_launch_us_per_call=raw_us, cupy_matmul_us_per_call=cupy_us, overhead_us=kgen_us - raw_us,
                config=loaded.choice.config.name, how=loaded.choice.how)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="simt", choices=sorted(SUITES))
    parser.add_argument("--trials", type=int, default=0, help="override every problem's budget")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per problem's tune, at most")
    parser.add_argument("--db", default="", help="database URL (default: a fresh SQLite file beside the results)")
    parser.add_argument("--out", default="", help="results file (default scripts/results/<device>/bench_gemm.json)")
    parser.add_argument("--export", default="", help="write the best record per problem here (JSON lines)")
    parser.add_argument("--recording", default="", help="write every record of the suite here (JSON lines)")
    parser.add_argument("--no-dispatch", action="store_true")
    args = parser.parse_args()

    import kgen  # noqa: F401
    from kgen.db import SqlStore, write_jsonl
    from kgen.kernels.gemm import gemm_problem
    from kgen.measure.bench import l2_flusher
    from kgen.measurement import Timing
    from kgen.problem import Target
    from kgen.runners import LocalGPURunner
    from kgen.spec import get_spec

    target = Target.detect(0)
    spec = get_spec("gemm")
    out = Path(args.out) if args.out else ROOT / "scripts" / "results" / target.slug / "bench_gemm.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    url = args.db or f"sqlite:///{out.parent / ('bench_gemm_' + str(int(time.time())) + '.db')}"
    db = SqlStore(url)
    flush = l2_flusher(target.l2_bytes)
    timing = Timing(warmup=5, runs=50)
    rows, results = [], []
    with LocalGPURunner((0,), target.l2_bytes) as runner:
        for dtype, layout, m, n, k, trials in SUITES[args.suite]:
            problem = gemm_problem(m, n, k, dtype, layout)
            print(f"{dtype} {layout} {m}x{n}x{k}: tuning ({args.trials or trials} trials)", flush=True)
            row, result = bench_problem(spec, problem, target, db, runner, args.trials or trials,
                                        args.timeout, flush, timing)
            rows.append(row)
            results.append(result)
        if not args.no_dispatch:
            rows.append(dispatch_overhead(spec, target, db, runner, timing))
            print(rows[-1])
    ratios = [r["ratio_vs_cublas"] for r in rows if "ratio_vs_cublas" in r]
    doc = {"device": target.name, "commit": _commit(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "suite": args.suite, "nvrtc": target.nvrtc_version, "driver": target.driver_version,
           "timing": timing.as_dict(), "geomean_ratio_vs_cublas": statistics.geometric_mean(ratios) if ratios else None,
           "rows": rows}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")
    if args.export:
        best = [db.best("gemm", r.problem.key, target.name) for r in results]
        write_jsonl(args.export, [b for b in best if b is not None])
    if args.recording:
        records = [rec for r in results for rec in db.records("gemm", r.problem.key, target.name)]
        write_jsonl(args.recording, records)
    print(f"{'problem':34} {'kgen ms':>9} {'cublas ms':>9} {'ratio':>6}")
    for r in rows:
        if "ratio_vs_cublas" in r:
            print(f"{r['dtype']} {r['layout']} {r['m']}x{r['n']}x{r['k']:<14} {r['kgen_ms']:9.4f} "
                  f"{r['baselines']['cublas']:9.4f} {r['ratio_vs_cublas']:6.3f}")


if __name__ == "__main__":
    main()
