"""What kgen.dist's GEMM algorithms would reach on 8 and 64 GPUs, by its own alpha-beta model
(kgen/dist/cost.py), until more GPUs are lent to measure it. No GPU needed.

    python scripts/project_dist.py [--out FILE]

Inputs (named in the results file): one GPU multiplies at RATE TFLOP/s (the H200's cuBLAS
bfloat16 rate at large sizes); within a node of 8 GPUs, NVLink 4 at 900 GB/s per GPU and
alpha 5 us a step; across nodes, a 400 Gb/s network per GPU (50 GB/s) and alpha 10 us, taken
as the bandwidth of every collective once the ranks span nodes (the model is flat: it has no
topology, which flatters nothing: a hierarchical collective would do better). Each rank
computes m n k / p of the product; the operands start as 2-D blocks on the squarest grid and
each algorithm brings them to its layouts (those moves counted); SUMMA's panels are
KGEN_DIST_PANEL wide, as kgen.dist.gemm cuts them. Rows: gpus, m, n, k,
algorithm, comm_ms (the model), compute_ms, efficiency_serial (compute over compute + comm:
the algorithms run each step after the other today) and efficiency_overlapped (compute over
the larger of the two: what chunked overlap could reach), chosen (the model's pick). Written to
scripts/results/model/dist_projection.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kgen.dist.cost import ALGORITHMS, GemmCase, choose, estimate  # noqa: E402
from kgen.dist.layout import resolve  # noqa: E402
from kgen.knobs import knobs  # noqa: E402

RATE_TFLOPS = 720.0                      # one H200, cuBLAS bfloat16 at large sizes
FABRICS = {8: ("NVLink 4, one node", 900e9, 5e-6), 64: ("400 Gb/s network per GPU, 8 nodes", 50e9, 10e-6)}
SHAPES = [(16384, 16384, 16384), (32768, 32768, 32768), (8192, 28672, 8192)]    # the last: an MLP's up-projection


def rows() -> list[dict]:
    out = []
    for gpus, (fabric, bandwidth, alpha) in FABRICS.items():
        start = resolve("block2d", gpus)
        for m, n, k in SHAPES:
            case = GemmCase(m, n, k, gpus, 2, 4, start, start)
            compute = 2.0 * m * n * k / gpus / (RATE_TFLOPS * 1e12)
            picked = choose(case, alpha, 1.0 / bandwidth, knobs.dist_panel)
            for algorithm in ALGORITHMS:
                est = estimate(case, algorithm, alpha, 1.0 / bandwidth, knobs.dist_panel)
                out.append({"gpus": gpus, "fabric": fabric, "m": m, "n": n, "k": k, "algorithm": algorithm,
                            "received_mb": round(est.bytes / 1e6, 1), "steps": est.steps,
                            "comm_ms": round(est.seconds * 1e3, 3), "compute_ms": round(compute * 1e3, 3),
                            "efficiency_serial": round(compute / (compute + est.seconds), 3),
                            "efficiency_overlapped": round(compute / max(compute, est.seconds), 3),
                            "chosen": algorithm == picked})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "scripts" / "results" / "model" / "dist_projection.json"))
    args = parser.parse_args()
    table = rows()
    doc = {"model": "kgen/dist/cost.py (alpha-beta, flat)", "rate_tflops_per_gpu": RATE_TFLOPS, "dtype": "bfloat16",
           "fabrics": {str(g): {"name": f, "bytes_per_s": b, "alpha_s": a} for g, (f, b, a) in FABRICS.items()},
           "start_layout": "block2d (squarest grid)", "summa_panel": knobs.dist_panel, "rows": table}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print("| GPUs | m x n x k | algorithm | comm ms | compute ms | efficiency (serial / overlapped) |")
    print("|---|---|---|---|---|---|")
    for r in table:
        if r["chosen"]:
            print(f"| {r['gpus']} | {r['m']}x{r['n']}x{r['k']} | {r['algorithm']} | {r['comm_ms']} | "
                  f"{r['compute_ms']} | {r['efficiency_serial']:.2f} / {r['efficiency_overlapped']:.2f} |")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
