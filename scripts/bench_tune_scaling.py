"""Tuning throughput with 1, 2, ... GPUs: the same problems and budget on each count.

Each count gets a fresh in-memory database (nothing is answered from earlier runs), a local
Dask cluster with one worker per GPU, and ``tune_many`` over the problems. A row per count:
{gpus, problems, trials, seconds, trials_per_s, gpu_idle_fraction, compile_variants_per_s,
speedup_vs_1}. The idle fraction is 1 - (time the workers spent measuring) / (gpus x wall
time). Written to scripts/results/<device>/bench_tune_scaling.json.

    python scripts/bench_tune_scaling.py --gpus 1,2 --trials 60
    python scripts/bench_tune_scaling.py --gpus 1,2 --replay tests/data/h200_gemm_f32_simt.jsonl.gz   # CPU only
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

DEFAULT_PROBLEMS = [(4096, 4096, 4096), (2048, 2048, 2048), (1000, 1000, 1000), (3000, 5000, 700)]


def _commit() -> str:
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                                       stderr=subprocess.DEVNULL).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _cluster(gpus: int, replay):
    """A local cluster of ``gpus`` GPU workers (real ones, or CPU workers replaying)."""
    from distributed import LocalCluster

    from kgen.runners.dask import gpu_cluster

    if replay is None:
        return gpu_cluster(list(range(gpus)))
    return LocalCluster(n_workers=gpus, threads_per_worker=1, processes=True, resources={"GPU": 1},
                        dashboard_address=":0")


def run_count(gpus: int, problems, trials: int, replay, target) -> dict:
    from distributed import Client

    from kgen.db import MemoryStore
    from kgen.multi import tune_many
    from kgen.runners import ReplayRunner
    from kgen.runners.dask import DaskRunner
    from kgen.registry import get_spec

    spec = get_spec("gemm")
    with _cluster(gpus, replay) as cluster, Client(cluster) as client:
        client.wait_for_workers(gpus, timeout=180)
        measure = ReplayRunner(replay, seed=gpus).answer if replay is not None else None
        runner = DaskRunner(client, measure=measure)
        start, start_epoch = time.perf_counter(), time.time()
        results = tune_many(spec, problems, target, runner, MemoryStore(), trials=trials, sampler="random",
                            seed=gpus, warm_start=False)
        seconds = time.perf_counter() - start
        runner.close()
    measured = [m for r in results for m in r.trials]
    busy = sum(end - begin for _, begin, end in runner.where.values())
    idle = idle_breakdown(runner.where.values(), start_epoch)
    compiled = [m for m in measured if m.compile_s > 0]
    compile_cpu_s = sum(m.compile_s for m in compiled)
    return {"gpus": gpus, "problems": len(problems), "trials": len(measured), "seconds": round(seconds, 2),
            "trials_per_s": round(len(measured) / seconds, 3),
            "gpu_idle_fraction": round(max(0.0, 1 - busy / (gpus * seconds)), 3),
            "compile_variants_per_s": round(len(compiled) / seconds, 2) if compiled else None,
            "compile_cpu_s_per_variant": round(compile_cpu_s / len(compiled), 3) if compiled else None,
            "failures": sum(1 for m in measured if m.failure), "lost": runner.lost, "retries": runner.retries,
            **idle}


def idle_breakdown(spans, start_epoch: float) -> dict:
    """Where the workers' idle time went: from the tune's start to the first measurement,
    before each worker's first measurement, between measurements, after each one's last."""
    by_worker: dict[str, list[tuple[float, float]]] = {}
    for worker, begin, end in spans:
        by_worker.setdefault(worker, []).append((begin, end))
    if not by_worker:
        return {}
    first = min(b for s in by_worker.values() for b, _ in s)
    last = max(e for s in by_worker.values() for _, e in s)
    head, tail, gaps = [], [], []
    for s in by_worker.values():
        s.sort()
        head.append(s[0][0] - first)
        tail.append(last - s[-1][1])
        gaps.extend(max(0.0, b2 - e1) for (_, e1), (b2, _) in zip(s, s[1:]))
    return {"first_measurement_after_s": round(first - start_epoch, 3), "idle_head_s": round(max(head), 3), "idle_tail_s": round(max(tail), 3),
            "gap_median_ms": round(1e3 * statistics.median(gaps), 2) if gaps else None,
            "gap_total_s": round(sum(gaps), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", default="1,2", help="GPU counts to compare, e.g. 1,2 or 1,2,4,8")
    parser.add_argument("--trials", type=int, default=60, help="trials per problem")
    parser.add_argument("--replay", default="", help="replay a recording on CPU workers instead of GPUs")
    parser.add_argument("--out", default="", help="results file")
    parser.add_argument("--commit", default="", help="the commit measured (where the tree has no usable .git)")
    args = parser.parse_args()

    from kgen.kernels.gemm.problem import gemm_problem
    from kgen.problem import Problem, Target
    from kgen.runners import Recording

    counts = [int(x) for x in args.gpus.split(",")]
    replay = Recording.load(args.replay) if args.replay else None
    if replay is not None:
        target = Target.h200(replay.device_name() or "NVIDIA H200")
        problems = [p for p in (gemm_problem(*s) for s in DEFAULT_PROBLEMS) if p.key in replay.problems()]
        problems = problems or [Problem.from_key(k) for k in sorted(replay.problems())[:4]]
    else:
        target = Target.detect(0)
        problems = [gemm_problem(*s) for s in DEFAULT_PROBLEMS]
    rows = []
    for n in counts:
        print(f"{n} GPU(s): {len(problems)} problems x {args.trials} trials", flush=True)
        rows.append(run_count(n, problems, args.trials, replay, target))
        rows[-1]["speedup_vs_1"] = round(rows[-1]["trials_per_s"] / rows[0]["trials_per_s"], 3) \
            if rows[0]["gpus"] == 1 else None
        print(json.dumps(rows[-1]), flush=True)
    device = target.slug + ("-replay" if replay is not None else "")
    out = Path(args.out) if args.out else ROOT / "scripts" / "results" / device / "bench_tune_scaling.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"device": target.name + (" (replayed on CPU workers)" if replay is not None else ""),
           "commit": args.commit or _commit(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "trials_per_problem": args.trials, "problems": [p.key for p in problems], "rows": rows}
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
