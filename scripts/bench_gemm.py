"""GEMM benchmark on this GPU: tune each problem, then time kgen's best and cuBLAS side by side.

Writes scripts/results/<device>/bench_gemm.json (rows: op, dtype, precision, layout, m, n, k,
kgen_ms, kgen_config, baselines {"cublas": ms}, relerr, plus tflops) and, with --export,
the tuned best records as JSON lines for tuning_db/.

Rows of the tensor-core families add family, out_dtype, epilogue, baselines "cublas_cupy",
"cublas_torch" (the faster is "cublas") and "triton", ratio_vs_triton, and for M <= 64
bandwidth_fraction against the copy rate measured at the start of the run.

    python scripts/bench_gemm.py --suite simt                      # CUDA cores, float32
    python scripts/bench_gemm.py --suite tc-large --timeout 13 --merge   # tensor cores, then tc-small
    python scripts/bench_gemm.py --suite quick --trials 40
    python scripts/bench_gemm.py --suite tc-whole --sampler exhaustive --timeout 60 --merge
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
COPY_BYTES_PER_S = 4.1e12      # replaced by the copy rate measured at the start of a run
sys.path.insert(0, str(ROOT))

# The five mid shapes of the tensor-core benchmark (the last is tuned with both families).
MID_SHAPES = ((2048, 2048, 2048), (4096, 4096, 256), (1000, 1000, 1000), (3000, 5000, 700), (128, 4096, 4096))

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
    # tensor cores; a 7th field gives precision / out_dtype / epilogue, and "families" to tune
    # (default: the family preferred on the device); trials are capped by --timeout
    "tc-large": [
        (d, l, s, s, s, 200) for s in (4096, 8192) for d in ("bfloat16", "float16") for l in ("NN", "TN")
    ] + [
        (d, "NN", m, n, k, 200) for d in ("bfloat16", "float16")
        for m, n, k in MID_SHAPES[:4]
    ] + [
        (d, "NN", *MID_SHAPES[4], 200, {"families": ["gemm_wgmma", "gemm_mma"]}) for d in ("bfloat16", "float16")
    ],
    "tc-small": [
        ("bfloat16", "NN", m, nk, nk, 200, {"families": ["gemm_wgmma", "gemm_mma"]})
        for nk in (4096, 8192) for m in (1, 16, 64)
    ] + [
        ("float32", "NN", s, s, s, 200, {"precision": "tf32"}) for s in (4096, 8192)
    ] + [
        ("float64", "NN", s, s, s, 200) for s in (4096, 8192)
    ] + [
        ("bfloat16", "NN", 4096, 4096, 4096, 200, {"epilogue": "bias_gelu"}),
    ],
    # what a first run of tc-large left out, then tc-small
    "tc-rest": [],
    # the Hopper family where split-K applies (tiles that leave SMs idle), then the rest of its rows
    "tc-splitk": [
        ("bfloat16", "NN", m, nk, nk, 200) for nk in (4096, 8192) for m in (1, 16, 64)
    ] + [
        (d, "NN", m, n, k, 200) for d in ("bfloat16", "float16") for m, n, k in ((128, 4096, 4096), (1000, 1000, 1000))
    ],
    "tc-hopper-rest": [
        (d, l, s, s, s, 200) for s in (4096, 8192) for d in ("bfloat16", "float16") for l in ("NN", "TN")
    ] + [
        (d, "NN", m, n, k, 200) for d in ("bfloat16", "float16") for m, n, k in ((2048, 2048, 2048), (4096, 4096, 256))
    ] + [
        ("bfloat16", "NN", 4096, 4096, 4096, 200, {"epilogue": "bias_gelu"}),
    ],
    # the mid shape the Hopper suites leave out, both tensor-core families side by side
    "tc-mid-rest": [
        (d, "NN", 3000, 5000, 700, 200, {"families": ["gemm_wgmma", "gemm_mma"]}) for d in ("bfloat16", "float16")
    ],
    # 1000^3 with both tensor-core families side by side (the portable one's planned copies won
    # 3000x5000x700)
    "tc-1000": [
        (d, "NN", 1000, 1000, 1000, 200, {"families": ["gemm_wgmma", "gemm_mma"]}) for d in ("bfloat16", "float16")
    ],
    # tf32 on the Hopper family: NN (B transposed by the producers) and NT (TMA only)
    "tc-tf32": [
        ("float32", l, s, s, s, 200, {"precision": "tf32", "families": ["gemm_wgmma"]})
        for s in (4096, 8192) for l in ("NN", "NT")
    ],
    # tf32 NN alone: computed swapped (RS), B staged by TMA and transposed in shared memory (XS),
    # or B copied by cp.async
    "tc-tf32-nn": [
        ("float32", "NN", s, s, s, 200, {"precision": "tf32", "families": ["gemm_wgmma"]}) for s in (4096, 8192)
    ],
    # the decode shapes alone (bf16, the Hopper family), for a longer tune than tc-splitk's
    "tc-decode": [
        ("bfloat16", "NN", m, nk, nk, 200) for nk in (4096, 8192) for m in (1, 16, 64)
    ],
    # fp64 alone, on the portable family (the only one with fp64)
    "tc-f64": [
        ("float64", "NN", s, s, s, 200, {"families": ["gemm_mma"]}) for s in (4096, 8192)
    ],
    # the rows short of cuBLAS whose Hopper spaces are small enough to measure whole
    # (--sampler exhaustive): decode (332-364 configs) and 4096x4096x256 (719)
    "tc-whole": [
        ("bfloat16", "NN", m, nk, nk, 0) for m, nk in ((1, 8192), (16, 4096), (16, 8192), (64, 8192), (64, 4096))
    ] + [
        (d, "NN", 4096, 4096, 256, 0) for d in ("bfloat16", "float16")
    ],
    "tc-wgmma": [
        ("bfloat16", "NN", 4096, 4096, 4096, 30),
        ("bfloat16", "TN", 4096, 4096, 4096, 20),
    ],
    "tc-probe": [
        ("bfloat16", "NN", 4096, 4096, 4096, 50),
        ("bfloat16", "NN", 16, 4096, 4096, 30),
        ("float64", "NN", 4096, 4096, 4096, 20),
        ("bfloat16", "NN", 4096, 4096, 4096, 20, {"epilogue": "bias_gelu"}),
    ],
    "tc-quick": [
        ("bfloat16", "NN", 4096, 4096, 4096, 40),
        ("bfloat16", "NN", 16, 4096, 4096, 30),
        ("float32", "NN", 4096, 4096, 4096, 20, {"precision": "tf32"}),
        ("float64", "NN", 4096, 4096, 4096, 20),
        ("bfloat16", "NN", 4096, 4096, 4096, 20, {"epilogue": "bias_gelu"}),
    ],
}


SUITES["tc-rest"] = [r for r in SUITES["tc-large"] if r[0] == "float16"] + SUITES["tc-small"]
# the rows of tc-splitk whose tuned bests split K (their parts meet by polling): N = K = 4096
SUITES["tc-splitk-poll"] = [r for r in SUITES["tc-splitk"] if r[3:5] == (4096, 4096)]


def _commit() -> str:
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _median_ms(run, timing, flush) -> float:
    from kgen.measure.bench import time_runs

    return statistics.median(time_runs(run, timing, flush))


def _baselines(spec, problem, ops) -> dict:
    """Library runs on the same operands: cuBLAS through CuPy and PyTorch, autotuned Triton."""
    import cupy

    runs = {}
    if problem.family == "gemm":
        runs["cublas_cupy"] = lambda a=ops["a"], b=ops["b"], c=ops["c"]: cupy.matmul(a, b, out=c)
        return runs
    from kgen.kernels.gemm.tc import torch_baseline, torch_view

    plain = problem["epilogue"] == "none" and problem["out_dtype"] == problem["dtype"]
    if plain and problem["dtype"] in ("float16", "float64"):
        runs["cublas_cupy"] = lambda a=ops["a"], b=ops["b"], c=ops["c"]: cupy.matmul(a, b, out=c)
    try:
        runs["cublas_torch"] = torch_baseline(problem, ops)
    except ImportError:
        pass
    if plain and problem["dtype"] in ("float16", "bfloat16"):
        try:
            sys.path.insert(0, str(ROOT / "scripts"))
            from triton_matmul import matmul

            ta, tb = torch_view(ops["a"], problem["dtype"]), torch_view(ops["b"], problem["dtype"])
            tc = torch_view(ops["c"], problem["out_dtype"])
            runs["triton"] = lambda: matmul(ta, tb, tc)
        except ImportError as exc:
            print(f"  (no triton baseline: {exc})")
    return runs


def _as_float64(problem, c):
    if problem.family == "gemm":
        return c.astype("float64")
    from kgen.kernels.gemm.tc import as_float64

    return as_float64(c, problem["out_dtype"])


def bench_problem(spec, problem, target, db, runner, trials, timeout_s, flush, timing, sampler="kgen"):
    import cupy

    from kgen.compile import compile_source
    from kgen.measure.launch import CupyKernel
    from kgen.render import render
    from kgen.search import tune

    if sampler == "exhaustive":
        trials = len(spec.space(problem, target).configs())
    result = tune(spec, problem, target, runner, db, trials=trials, timeout_s=timeout_s, sampler=sampler,
                  on_progress=lambda p: print(f"\r  {p.done}/{p.budget} best "
                                              f"{p.best.time_ms if p.best else float('nan'):.4f} ms", end=""))
    print()
    best = result.best
    if best is None:
        print(f"  every trial failed: {dict(result.failures)}")
        return None, result
    config = spec.space(problem, target).make(best.config)
    binary = compile_source(render(spec, problem, config, target)).binary
    kernel = CupyKernel(binary.cubin, binary.entry, binary.path)
    ops = spec.inputs(problem, seed=123)           # fresh inputs, not the tune's
    want = spec.reference(problem, ops)["c"]
    spec.run(kernel, problem, config, ops)
    cupy.cuda.get_current_stream().synchronize()
    got = _as_float64(problem, ops["c"])
    relerr = float(cupy.linalg.norm(got - want) / cupy.linalg.norm(want))
    kgen_ms = _median_ms(lambda: spec.run(kernel, problem, config, ops), timing, flush)
    baselines = {name: _median_ms(run, timing, flush) for name, run in _baselines(spec, problem, ops).items()}
    cublas = [v for name, v in baselines.items() if name.startswith("cublas")]
    baselines["cublas"] = min(cublas)
    flops = spec.flops(problem)
    tc = problem.family != "gemm"
    row = dict(op="gemm", family=problem.family, dtype=problem["dtype"],
               precision=problem.get("precision") if tc and problem["dtype"] == "float32" else problem["dtype"],
               out_dtype=problem.get("out_dtype", problem["dtype"]), layout=problem["layout"],
               m=problem["m"], n=problem["n"], k=problem["k"], kgen_ms=kgen_ms, kgen_config=config.name,
               baselines=baselines, relerr=relerr,
               kgen_tflops=flops / kgen_ms / 1e9, cublas_tflops=flops / baselines["cublas"] / 1e9,
               ratio_vs_cublas=baselines["cublas"] / kgen_ms, tune_trials=result.measured + result.known,
               tune_s=result.seconds, tune_compile_s=result.compile_s, tune_measure_s=result.measure_s,
               tune_failures=dict(result.failures), tune_sampler=sampler)
    if tc and problem["epilogue"] != "none":
        row["epilogue"] = problem["epilogue"]
    if "triton" in baselines:
        row["ratio_vs_triton"] = baselines["triton"] / kgen_ms
    if problem["m"] <= 64:
        row["bandwidth_fraction"] = spec.bytes(problem) / (kgen_ms * 1e-3) / COPY_BYTES_PER_S
    print(f"  kgen {kgen_ms:.4f} ms ({row['kgen_tflops']:.1f} TFLOP/s)  "
          + "  ".join(f"{k} {v:.4f}" for k, v in baselines.items())
          + f"  ratio {row['ratio_vs_cublas']:.3f}  relerr {relerr:.2e}  {config.name}")
    return row, result


def copy_rate(flush) -> float:
    """Device-to-device copy rate (bytes read + written per second) of a 1 GiB buffer."""
    import cupy

    from kgen.measure.bench import time_runs
    from kgen.measurement import Timing

    src = cupy.ones(1 << 28, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    ms = statistics.median(time_runs(lambda: dst.__setitem__(Ellipsis, src), Timing(warmup=3, runs=20), flush))
    return 2 * src.nbytes / (ms * 1e-3)


def _row_key(row: dict) -> tuple:
    return (row["op"], row.get("family", "gemm"), row.get("dtype"), row.get("precision"), row.get("out_dtype"),
            row.get("layout"), row.get("epilogue"), row.get("m"), row.get("n"), row.get("k"))


def _merged(path: Path, device: str, run: dict, rows: list) -> dict:
    """The results file with these rows replacing earlier rows of the same problems; each row
    keeps the commit and date of the run that measured it, ``runs`` lists every run."""
    doc = json.loads(path.read_text()) if path.is_file() else {"device": device, "rows": []}
    runs = doc.get("runs") or ([{k: doc[k] for k in ("commit", "date", "suite") if k in doc}] if doc["rows"] else [])
    for row in doc["rows"]:
        for k in ("commit", "date", "suite"):
            row.setdefault(k, doc.get(k))
    new = {_row_key(r) for r in rows}
    return {"device": device, "runs": runs + [run], "rows": [r for r in doc["rows"] if _row_key(r) not in new] + rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="simt", choices=sorted(SUITES))
    parser.add_argument("--trials", type=int, default=0, help="override every problem's budget")
    parser.add_argument("--timeout", type=float, default=240, help="seconds per problem's tune, at most")
    parser.add_argument("--db", default="", help="database URL (default: a fresh SQLite file beside the results)")
    parser.add_argument("--out", default="", help="results file (default scripts/results/<device>/bench_gemm.json)")
    parser.add_argument("--export", default="", help="write the best record per problem here (JSON lines)")
    parser.add_argument("--recording", default="", help="write every record of the suite here (JSON lines)")
    parser.add_argument("--no-dispatch", action="store_true", help=argparse.SUPPRESS)   # call overhead: bench_dispatch.py
    parser.add_argument("--merge", action="store_true", help="keep the file's rows of other problems")
    parser.add_argument("--commit", default="", help="the commit measured (where the tree has no .git)")
    parser.add_argument("--families", default="", help="only these families (comma-separated)")
    parser.add_argument("--sampler", default="kgen", help="the tunes' sampler (exhaustive: every valid config, "
                                                          "as --timeout allows; --trials ignored)")
    args = parser.parse_args()

    import kgen  # noqa: F401
    from kgen.db import SqlStore, write_jsonl
    from kgen.kernels.gemm.route import gemm_request
    from kgen.measure.bench import l2_flusher, l2_label
    from kgen.measurement import Timing
    from kgen.problem import Target
    from kgen.runners import LocalGPURunner

    target = Target.detect(0)
    out = Path(args.out) if args.out else ROOT / "scripts" / "results" / target.slug / "bench_gemm.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    url = args.db or f"sqlite:///{out.parent / ('bench_gemm_' + str(int(time.time())) + '.db')}"
    db = SqlStore(url)
    flush = l2_flusher(target.l2_bytes)
    timing = Timing(warmup=5, runs=50)
    global COPY_BYTES_PER_S
    COPY_BYTES_PER_S = copy_rate(flush)
    print(f"copy rate {COPY_BYTES_PER_S / 1e12:.2f} TB/s")
    families = set(args.families.split(",")) if args.families else None
    rows, results = [], []
    with LocalGPURunner((0,), target.l2_bytes) as runner:
        for dtype, layout, m, n, k, trials, *extra in SUITES[args.suite]:
            extra = dict(extra[0]) if extra else {}
            wanted = set(extra.pop("families", ())) or None
            candidates = gemm_request("gemm", m, n, k, dtype, layout, target, **extra)
            for order, (spec, problem) in enumerate(candidates):
                if families and spec.family not in families:
                    continue
                if not families and (spec.family not in wanted if wanted else order > 0):
                    continue
                budget = "every valid config" if args.sampler == "exhaustive" else f"{args.trials or trials} trials"
                print(f"{problem.key}: tuning ({budget})", flush=True)
                try:
                    row, result = bench_problem(spec, problem, target, db, runner, args.trials or trials,
                                                args.timeout, flush, timing, args.sampler)
                except Exception as exc:       # one broken family must not lose the other rows
                    print(f"  FAILED: {type(exc).__name__}: {exc}")
                    continue
                results.append(result)
                if row is not None:
                    rows.append(row)
    ratios = [r["ratio_vs_cublas"] for r in rows if "ratio_vs_cublas" in r]
    run = {"commit": args.commit or _commit(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "suite": args.suite, "nvrtc": target.nvrtc_version, "driver": target.driver_version,
           "timing": timing.as_dict(), "l2": l2_label(), "copy_bytes_per_s": COPY_BYTES_PER_S,
           "geomean_ratio_vs_cublas": statistics.geometric_mean(ratios) if ratios else None}
    for row in rows:
        row.update(commit=run["commit"], date=run["date"], suite=args.suite, l2=run["l2"])
    out.write_text(json.dumps(_merged(out, target.name, run, rows) if args.merge else
                              {"device": target.name, **run, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")
    if args.export:
        best = [db.best(r.problem.family, r.problem.key, target.name) for r in results]
        write_jsonl(args.export, [b for b in best if b is not None])
    if args.recording:
        records = [rec for r in results for rec in db.records(r.problem.family, r.problem.key, target.name)]
        write_jsonl(args.recording, records)
    print(f"{'problem':48} {'kgen ms':>9} {'cublas ms':>9} {'ratio':>6} {'triton':>6}")
    for r in rows:
        if "ratio_vs_cublas" in r:
            what = f"{r['family']} {r['precision']} {r['layout']} {r.get('epilogue', '')}"
            print(f"{what:28} {r['m']}x{r['n']}x{r['k']:<12} {r['kgen_ms']:9.4f} "
                  f"{r['baselines']['cublas']:9.4f} {r['ratio_vs_cublas']:6.3f} "
                  f"{r.get('ratio_vs_triton', float('nan')):6.3f}")


if __name__ == "__main__":
    main()
