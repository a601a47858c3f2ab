"""How the L2 is evicted before a timed run changes what a memory-bound GEMM seems to cost.

    python3 scripts/bench_flush.py --out scripts/results/nvidia-h200/bench_flush.json

For each problem: the config bench_gemm.json keeps as the best gemm_wgmma kernel, cuBLAS,
and a read of as many bytes as the problem moves (its floor), each timed after an L2 sweep
that writes a buffer twice the L2's size (``write``: the L2 is left full of dirty lines)
and after one that reads it (``read``: clean lines), the three in turns, in one run; each
with the GPU held until the run is queued (``hold``, kgen's way) and without (the host's
launch cost shows wherever the flush is shorter than it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compare_configs import checked_runs, in_turns   # noqa: E402

PROBLEMS = ((1, 4096, 4096), (16, 4096, 4096), (64, 4096, 4096), (1, 8192, 8192), (16, 8192, 8192),
            (64, 8192, 8192), (4096, 4096, 256), (2048, 2048, 2048), (4096, 4096, 4096))
RESULTS = Path(__file__).resolve().parent / "results"


def best_configs(device: str, family: str = "gemm_wgmma") -> dict[tuple, str]:
    """(m, n, k) -> the bf16 NN config of ``family`` bench_gemm.json records as fastest."""
    rows = json.loads((RESULTS / device / "bench_gemm.json").read_text())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    best: dict[tuple, tuple[float, str]] = {}
    for r in rows:
        if (r.get("kgen_config") or "").startswith(family) and r["dtype"] == "bfloat16" and r["layout"] == "NN" \
                and not r.get("epilogue") and r.get("kgen_ms"):
            key = (r["m"], r["n"], r["k"])
            if key not in best or r["kgen_ms"] < best[key][0]:
                best[key] = (r["kgen_ms"], r["kgen_config"])
    return {key: name for key, (_, name) in best.items()}


def read_run(nbytes: int):
    """A launcher that reads ``nbytes`` of a buffer of its own once (the memory floor)."""
    import cupy

    from kgen.measure.bench import read_sweep

    return read_sweep(cupy.zeros(nbytes // 16 * 16, dtype=cupy.uint8))


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="write the rows here (JSON)")
    ap.add_argument("--commit", default="", help="the commit measured, stored with the rows")
    args = ap.parse_args(argv)

    import datetime

    from kgen.measure.bench import l2_flusher
    from kgen.problem import Target

    target = Target.detect(0)
    configs = best_configs(target.slug)
    items = []
    for m, n, k in PROBLEMS:
        if (m, n, k) in configs:
            items += [f"bfloat16:NN:{m}x{n}x{k}", configs[(m, n, k)]]
    flushes = {style: l2_flusher(target.l2_bytes, style) for style in ("write", "read")}
    rows = []
    for head, problem, runs in checked_runs("gemm_wgmma", items):
        m, n, k = problem["m"], problem["n"], problem["k"]
        nbytes = 2 * (m * k + k * n + m * n)
        runs["floor"] = read_run(nbytes)
        for style, hold in (("write", True), ("read", True), ("write", False), ("read", False)):
            times = {name: statistics.median(ts) for name, ts in in_turns(runs, flushes[style], hold=hold).items()}
            kgen = next((name for name in times if name.startswith("gemm_")), None)
            row = {"problem": head, "flush": style, "hold": hold, "kgen_config": kgen, "kgen_ms": times.get(kgen),
                   "cublas_ms": times.get("cublas"), "floor_ms": times["floor"], "bytes": nbytes,
                   "ratio_vs_cublas": times["cublas"] / times[kgen] if kgen and "cublas" in times else None,
                   "floor_tb_s": nbytes / times["floor"] * 1e-9, "device": target.name,
                   "commit": args.commit, "date": datetime.date.today().isoformat()}
            rows.append(row)
            print(f"{head:26s} {style:5s} {'hold' if hold else '    '} kgen {row['kgen_ms']:.4f} cublas {row['cublas_ms']:.4f} "
                  f"floor {row['floor_ms']:.4f} ms ({row['floor_tb_s']:.2f} TB/s)  x{row['ratio_vs_cublas']:.3f}",
                  flush=True)
    args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
