"""The default 30-second tune against a 300-trial search, on GEMM shapes nobody tuned for.

For shapes of ``scripts/bench_shapes.py``'s test set (its seed; ``--per-dtype`` shapes of each
dtype's set, spread evenly over the set's order, which starts with small and skinny shapes):

1. ``kgen tune gemm ... --timeout 30`` (the default sampler and trial cap) into one temporary
   database, and ``kgen tune gemm ... --trials 300`` (``--long-timeout`` at most) into another,
   generated kernels only (KGEN_VENDOR=0) — nothing reaches ``tuning_db/``;
2. each database's choice for the shape, checked against a float64 reference, then timed side
   by side in one process on the same operands (short, long, long, short; CUDA events, L2
   flushed, median of --runs each), with cuBLAS (``torch.matmul``) once beside them.

``quality`` = long ms / short ms: 1 where the 30-second tune found as fast a config as the long
search (above 1 where it found a faster one); the aim is ≥ 0.97 on every shape.

Writes scripts/results/<device>/bench_tune_convergence.json (or --out): {"device", "commit",
"date", "seed", "rows", "summary"}; a row per shape: m, n, k, layout, dtype, precision,
short {seconds, trials, choice, ms}, long {seconds, trials, choice, ms, capped}, cublas_ms,
quality, and error where something failed. Rewritten after every shape.

    python3 scripts/bench_tune_convergence.py --dtypes bfloat16 --per-dtype 4
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from bench_shapes import (DTYPES, TOLERANCE, CudaBench, _cubin_cache, _fresh_environment,  # noqa: E402
                          dtype_label, operand_seed, shape_name, shape_set, tune_command)

QUALITY_AIM = 0.97


def spread(count: int, per: int) -> list[int]:
    """``per`` indices spread evenly over ``range(count)`` (all of them where ``per >= count``)."""
    if per >= count:
        return list(range(count))
    return sorted({(i * count) // per for i in range(per)})


def tune_steps(shape: dict, short_s: float, trials: int, long_s: float) -> dict[str, list[str]]:
    """The two tunes' command lines (the database and trial log are added per run)."""
    base = tune_command(shape, short_s)
    return {"short": base, "long": base[:-2] + ["--trials", str(trials), "--timeout", f"{long_s:g}"]}


def run_tune(cmd: list[str], db: Path, log: Path, cap_s: float) -> dict:
    """One tune into ``db``: seconds, trials finished (the trial log's lines), error."""
    start = time.perf_counter()
    env = dict(os.environ, KGEN_VENDOR="0")
    try:
        done = subprocess.run(cmd + ["--db", f"sqlite:///{db}", "--log", str(log)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=cap_s + 120)
        error = None if done.returncode == 0 else \
            f"exit {done.returncode}: " + " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])[:300]
    except subprocess.TimeoutExpired:
        error = "did not finish"
    trials = len(log.read_text().splitlines()) if log.exists() else 0
    return {"seconds": round(time.perf_counter() - start, 1), "trials": trials, "error": error}


def summarize(rows: list[dict]) -> list[dict]:
    out = []
    for label in dict.fromkeys(dtype_label(r) for r in rows):
        q = [r["quality"] for r in rows if dtype_label(r) == label and r.get("quality")]
        if not q:
            continue
        out.append({"dtype": label, "count": len(q), "geomean": math.exp(sum(map(math.log, q)) / len(q)),
                    "min": min(q), "median": statistics.median(q),
                    "at_least_aim": sum(v >= QUALITY_AIM for v in q)})
    return out


def time_choice(gpu, case, db: Path):
    """(config, run, relative error of one checked run) of what dispatch runs for ``case`` with
    ``db``'s records."""
    import kgen

    os.environ["KGEN_DB_URL"] = f"sqlite:///{db}"
    kgen.refresh()
    choice = kgen.gemm_choice(case.a, case.b, case.c, **case.kwargs)

    def run():
        kgen.gemm(case.a, case.b, case.c, **case.kwargs)

    err = gpu.check(case, run)
    return choice.config, run, err


def bench_one(shape: dict, index: int, args, gpu, work: Path) -> dict:
    row = {k: shape[k] for k in ("m", "n", "k", "layout", "dtype", "precision")}
    dbs = {}
    for name, cmd in tune_steps(shape, args.short, args.trials, args.long_timeout).items():
        dbs[name] = work / f"{index}_{name}.db"
        cap = args.short if name == "short" else args.long_timeout
        row[name] = run_tune(cmd, dbs[name], work / f"{index}_{name}.jsonl", cap)
        if name == "long":
            row[name]["capped"] = row[name]["trials"] < args.trials
        if row[name]["error"]:
            row["error"] = f"{name} tune: {row[name]['error']}"
            return row
    case = gpu.prepare(shape, operand_seed(args.seed, dtype_label(shape), index))
    try:
        runs = {}
        for name in ("short", "long"):
            config, run, err = time_choice(gpu, case, dbs[name])
            row[name].update(choice=config, relerr=err if math.isfinite(err) else None)
            if not (math.isfinite(err) and err <= TOLERANCE[dtype_label(shape)]):
                row["error"] = f"{name}: result off by {err:.3g}"
                return row
            runs[name] = run
        times = {"short": [], "long": []}
        for name in ("short", "long", "long", "short"):
            times[name].append(gpu.time(runs[name]))
        for name in times:
            row[name]["ms"] = statistics.median(times[name])
        row["cublas_ms"] = gpu.time(case.cublas) if case.cublas is not None else None
        row["quality"] = row["long"]["ms"] / row["short"]["ms"]
        return row
    finally:
        case.__dict__.clear()
        gpu.release()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1, help="the test set's seed (bench_shapes.py)")
    ap.add_argument("--count", type=int, default=60, help="shapes in each dtype's set")
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--per-dtype", type=int, default=4, help="shapes of each dtype's set, spread over it")
    ap.add_argument("--skip", type=int, default=0, help="start the spread this many shapes later")
    ap.add_argument("--short", type=float, default=30.0, help="seconds of the default tune")
    ap.add_argument("--trials", type=int, default=300, help="trials of the long search")
    ap.add_argument("--long-timeout", type=float, default=240.0, help="seconds the long search may take at most")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", default="")
    ap.add_argument("--commit", default="")
    args = ap.parse_args(argv)
    dtypes = [d for d in args.dtypes.split(",") if d]
    if set(dtypes) - set(DTYPES):
        ap.error(f"dtypes: choose from {', '.join(DTYPES)}")

    work = Path(tempfile.mkdtemp(prefix="kgen-convergence-"))
    _fresh_environment(work / "home", _cubin_cache(work / "home", False))
    gpu = CudaBench(args.runs)
    out = Path(args.out) if args.out else ROOT / "scripts" / "results" / gpu.target.slug / "bench_tune_convergence.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    from benchlib import commit

    header = {"device": gpu.target.name, "commit": args.commit or commit(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "seed": args.seed, "short_s": args.short, "trials": args.trials, "long_timeout_s": args.long_timeout,
              "timing": gpu.timing.as_dict()}
    rows: list[dict] = []
    for label in dtypes:
        shapes = shape_set(args.seed, label, args.count)
        for index in spread(args.count - args.skip, args.per_dtype):
            index += args.skip
            row = bench_one(shapes[index], index, args, gpu, work)
            row["index"] = index
            rows.append(row)
            q = row.get("quality")
            print(f"{label:8} {shape_name(shapes[index]):22} short {row['short']['trials']:>3} trials "
                  f"{row['short']['seconds']:>5} s, long {row.get('long', {}).get('trials', 0):>3} trials "
                  f"{row.get('long', {}).get('seconds', 0):>5} s: " +
                  (f"quality {q:.3f}" if q else f"ERROR {row.get('error')}"), flush=True)
            out.write_text(json.dumps({**header, "rows": rows, "summary": summarize(rows)}, indent=1) + "\n")
    for s in summarize(rows):
        print(f"{s['dtype']:8} {s['count']} shapes: quality geomean {s['geomean']:.3f}, median {s['median']:.3f}, "
              f"min {s['min']:.3f}; {s['at_least_aim']} at >= {QUALITY_AIM}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
