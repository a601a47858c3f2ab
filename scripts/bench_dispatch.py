"""Host time per call on a small GEMM, side by side: kgen.gemm (CuPy float32 on CUDA cores,
CuPy float16 and PyTorch bfloat16 on tensor cores), the exported module, a raw
cupy.RawKernel launch of the same cubin, cupy.matmul and torch.matmul; and the cold start
of a tuned problem in a fresh process with a warm cubin cache (the median of three runs after
the one that writes the dispatch memo; that first run is reported as without_memo_ms).

Writes scripts/results/<device>/bench_dispatch.json: rows {path, us_per_call} and
{path: "cold_start", ms}.

The paths are timed in turns (each repeat times every path once), so that the host's slow
spells do not fall on one path alone; --profile adds a cProfile breakdown of each kgen path.

    python scripts/bench_dispatch.py [--out FILE] [--commit SHA] [--profile]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
N = 256           # the problem: N x N x N


def per_call_us(paths: dict, calls: int = 200, repeats: int = 30) -> dict:
    """Per path, the best of ``repeats`` host times of ``calls`` back-to-back calls (GPU not
    waited for), in microseconds per call. The paths take turns within each repeat, so a
    slow spell of the host falls on all of them alike.

    ``calls`` stays well below the launch queue's depth (about a thousand): a longer burst fills
    the queue, and then every path is timed at the GPU's pace instead of its own."""
    import cupy

    best = dict.fromkeys(paths, float("inf"))
    for _ in range(repeats):
        for name, fn in paths.items():
            cupy.cuda.get_current_stream().synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            t1 = time.perf_counter()
            cupy.cuda.get_current_stream().synchronize()
            best[name] = min(best[name], (t1 - t0) / calls * 1e6)
    return best


def profile(name: str, fn, calls: int = 3000, top: int = 12) -> None:
    """Where the host time of ``calls`` calls of ``fn`` goes (cProfile, by own time)."""
    from launch_costs import profile_text

    print(f"--- profile of {name} ({calls} calls)\n{profile_text(fn, calls, top, 'tottime')}")


COLD = r"""
import json, sys, time
import cupy
a = cupy.random.default_rng(1).random(({n}, {n}), dtype=cupy.float32)
b = cupy.random.default_rng(2).random(({n}, {n}), dtype=cupy.float32)
cupy.cuda.Device(0).synchronize()
t0 = time.perf_counter()
import kgen
t1 = time.perf_counter()
c = kgen.gemm(a, b)
cupy.cuda.Device(0).synchronize()
t2 = time.perf_counter()
from kgen.dispatch import default_dispatcher
how = [l.choice.how for l in default_dispatcher()._loaded.values()]
ok = bool(cupy.allclose(c, a @ b, rtol=1e-4, atol=1e-3))
mods = sorted(m for m in ("sqlalchemy", "jinja2", "optuna", "cuda.bindings.nvrtc") if m in sys.modules)
print(json.dumps({{"import_ms": (t1 - t0) * 1e3, "first_call_ms": (t2 - t1) * 1e3, "how": how, "ok": ok,
                  "modules": mods}}))
"""


def _plan_of(dtype: str) -> dict:
    """The config and family kgen.gemm's plan for ``dtype`` uses, and how it was chosen."""
    import kgen.dispatch

    for plan in reversed(list(kgen.dispatch.default_dispatcher().plans.values())):
        if plan.problem["dtype"] == dtype and getattr(plan, "config", None) is not None:
            return {"config": plan.config.name, "family": plan.problem.family, "how": getattr(plan, "how", None)}
    return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="")
    parser.add_argument("--commit", default="")
    parser.add_argument("--profile", action="store_true", help="also print where each kgen path's host time goes")
    args = parser.parse_args()

    import cupy

    import kgen
    from kgen.db import SqlStore
    from kgen.dispatch import Dispatcher, set_default_dispatcher
    from kgen.kernels.gemm.problem import gemm_problem
    from kgen.problem import Target
    from kgen.runners import LocalGPURunner
    from kgen.search import tune
    from kgen.registry import get_spec

    target = Target.detect(0)
    out = Path(args.out) if args.out else ROOT / "scripts" / "results" / target.slug / "bench_dispatch.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kgen-bench-dispatch-"))
    url = f"sqlite:///{work / 'tuning.db'}"
    db = SqlStore(url)
    spec = get_spec("gemm")
    problem = gemm_problem(N, N, N, "float32", "NN")
    with LocalGPURunner((0,), target.l2_bytes) as runner:
        tune(spec, problem, target, runner, db, trials=20)
    set_default_dispatcher(Dispatcher(db=db))
    rng = cupy.random.default_rng(0)
    a, b = rng.random((N, N), dtype=cupy.float32), rng.random((N, N), dtype=cupy.float32)
    c = cupy.empty((N, N), dtype=cupy.float32)
    kgen.gemm(a, b, c)
    loaded = kgen.dispatch.default_dispatcher().prepare(spec, problem, 0)
    geo = spec.launch(problem, loaded.choice.config)
    raw_args = spec.args(problem, loaded.choice.config, {"a": a, "b": b, "c": c})
    raw_kernel = loaded.kernel.function
    split_k = loaded.choice.config["SK"] > 1

    def raw():
        if split_k:        # the same zeroing as kgen.gemm's, so that only the call path differs
            cupy.cuda.runtime.memsetAsync(c.data.ptr, 0, c.nbytes, cupy.cuda.get_current_stream().ptr)
        raw_kernel(geo.grid, geo.block, raw_args, shared_mem=geo.shared_mem)

    # each path: its row's fields and the call; all are timed together at the end
    paths = {"kgen.gemm cupy float32": (dict(config=loaded.choice.config.name, how=loaded.choice.how),
                                        lambda: kgen.gemm(a, b, c)),
             "raw RawKernel launch (same cubin)": ({}, raw),
             "cupy.matmul float32": ({}, lambda: cupy.matmul(a, b, out=c))}

    # the exported module of the same database
    pkg = work / "pkg"
    subprocess.run([sys.executable, "-m", "kgen.cli", "export", "gemm", "-o", str(pkg), "--name", "bench_kernels",
                    "--db", url], check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    sys.path.insert(0, str(pkg))
    import bench_kernels

    bench_kernels.gemm(a, b, c)
    paths["exported module float32"] = ({}, lambda: bench_kernels.gemm(a, b, c))

    h = rng.random((N, N), dtype=cupy.float32).astype(cupy.float16)
    hc = cupy.empty((N, N), dtype=cupy.float16)
    kgen.gemm(h, h, hc)
    paths["kgen.gemm cupy float16 (tensor cores)"] = (_plan_of("float16"), lambda: kgen.gemm(h, h, hc))
    paths["cupy.matmul float16"] = ({}, lambda: cupy.matmul(h, h, out=hc))
    try:
        import torch

        t = torch.rand(N, N, device="cuda", dtype=torch.bfloat16)
        tc = torch.empty(N, N, device="cuda", dtype=torch.bfloat16)
        kgen.gemm(t, t, tc)
        paths["kgen.gemm torch bfloat16 (tensor cores)"] = (_plan_of("bfloat16"), lambda: kgen.gemm(t, t, tc))
        paths["torch.matmul bfloat16"] = ({}, lambda: torch.matmul(t, t, out=tc))
        t32 = torch.rand(N, N, device="cuda")
        tc32 = torch.empty(N, N, device="cuda")
        paths["torch.matmul float32"] = ({}, lambda: torch.matmul(t32, t32, out=tc32))
    except ImportError:
        pass
    us = per_call_us({name: fn for name, (_, fn) in paths.items()})
    rows = [dict(path=name, us_per_call=us[name], **fields) for name, (fields, _) in paths.items()]
    if args.profile:
        for name, (_, call) in paths.items():
            if name.startswith(("kgen", "exported", "raw")):
                profile(name, call)

    # cold start: a fresh process, the tuned record in the database, the cubin in the disk cache
    env = {**os.environ, "KGEN_DB_URL": url, "PYTHONPATH": os.pathsep.join(sys.path)}
    runs = []   # the first writes the dispatch memo (kgen/dispatch_memo.py); the others use it
    for _ in range(4):
        res = subprocess.run([sys.executable, "-c", COLD.format(n=N)], capture_output=True, text=True, env=env)
        if res.returncode != 0:
            raise SystemExit(res.stderr)
        runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    memo = sorted(runs[1:], key=lambda r: r["first_call_ms"])[len(runs[1:]) // 2]   # median
    rows.append(dict(path="cold_start", ms=memo["first_call_ms"], import_ms=memo["import_ms"], how=memo["how"],
                     correct=all(r["ok"] for r in runs), runs_ms=[r["first_call_ms"] for r in runs],
                     without_memo_ms=runs[0]["first_call_ms"], modules_loaded=memo["modules"]))
    raw_us = us["raw RawKernel launch (same cubin)"]
    for r in rows:
        if "us_per_call" in r and r["path"].startswith(("kgen", "exported")):
            r["overhead_over_raw_us"] = r["us_per_call"] - raw_us
    doc = {"device": target.name, "commit": args.commit, "m": N, "n": N, "k": N,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "rows": rows}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    for r in rows:
        print(r)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
