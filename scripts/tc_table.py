"""The tensor-core table of docs/tensor_cores.md (the README shows a selection of its rows),
from a bench_gemm.py results file.

    python scripts/tc_table.py [scripts/results/nvidia-h200/bench_gemm.json]

Per problem (precision, layout, shape, epilogue) the tensor-core row with the best ratio to
cuBLAS (the families were measured side by side in the same run), in the order
docs/tensor_cores.md keeps, then the geometric means over the five mid shapes. Rows of the
CUDA-core family are left out (they have their own table).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.bench_gemm import MID_SHAPES  # noqa: E402

DEFAULT = Path(__file__).resolve().parent / "results" / "nvidia-h200" / "bench_gemm.json"
SHORT = {"bfloat16": "bf16", "float16": "fp16", "float64": "fp64", "tf32": "tf32"}


def _precision(row: dict) -> str:
    return "tf32" if row.get("precision") == "tf32" else row["dtype"]


def _order(row: dict) -> tuple:
    """Large squares, mid shapes, decode, tf32, fp64, fused: as docs/tensor_cores.md lists them."""
    p, shape = _precision(row), (row["m"], row["n"], row["k"])
    fused = row.get("epilogue", "none") != "none"
    if fused:
        group = 5
    elif p == "float64":
        group = 4
    elif p == "tf32":
        group = 3
    elif row["m"] <= 64:
        group = 2
    elif shape in MID_SHAPES:
        group = 1
    else:
        group = 0
    if group == 0:
        return (group, row["m"], p != "bfloat16", row["layout"])
    if group == 1:
        return (group, p != "bfloat16", MID_SHAPES.index(shape))
    if group == 2:
        return (group, row["n"], row["m"])
    return (group, row["m"], row["layout"])


def best_rows(rows: list[dict]) -> list[dict]:
    best: dict[tuple, dict] = {}
    for r in rows:
        if r.get("family") in (None, "gemm_simt") or "ratio_vs_cublas" not in r:
            continue
        key = (_precision(r), r["layout"], r["m"], r["n"], r["k"], r.get("epilogue", "none"))
        if key not in best or r["ratio_vs_cublas"] > best[key]["ratio_vs_cublas"]:
            best[key] = r
    return sorted(best.values(), key=_order)


def _shape(r: dict) -> str:
    m, n, k = r["m"], r["n"], r["k"]
    shape = f"{m}³" if m == n == k else f"{m}×{n}×{k}"
    epilogue = r.get("epilogue", "none")
    extra = "" if epilogue == "none" else " + " + " + ".join(epilogue.split("_"))
    return f"{SHORT[_precision(r)]} {shape}{extra}"


def table(rows: list[dict]) -> str:
    out = ["| problem | layout | family | kgen ms | TFLOP/s | cuBLAS ms | Triton ms | kgen / cuBLAS "
           "| kgen / Triton | commit | L2 | of copy rate |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in best_rows(rows):
        triton = r["baselines"].get("triton")
        bw = r.get("bandwidth_fraction")
        out.append(" | ".join([
            f"| {_shape(r)}", r["layout"], r["family"].removeprefix("gemm_"), f"{r['kgen_ms']:.4f}",
            f"{r['kgen_tflops']:.0f}", f"{r['baselines']['cublas']:.4f}",
            f"{triton:.4f}" if triton else "–", f"{r['ratio_vs_cublas']:.3f}",
            f"{r['ratio_vs_triton']:.3f}" if r.get("ratio_vs_triton") else "–", r["commit"],
            r.get("l2", "").removeprefix("flushed-"), f"{bw:.2f}" if bw else ""]).rstrip())
    return "\n".join(out)


def mid_geomeans(rows: list[dict]) -> dict[str, float]:
    """Per 16-bit dtype, the geometric mean of kgen / cuBLAS over the mid shapes."""
    means = {}
    chosen = best_rows(rows)
    for dtype in ("bfloat16", "float16"):
        ratios = [r["ratio_vs_cublas"] for r in chosen if _precision(r) == dtype
                  and (r["m"], r["n"], r["k"]) in MID_SHAPES and r.get("epilogue", "none") == "none"]
        if len(ratios) == len(MID_SHAPES):
            means[dtype] = math.exp(sum(map(math.log, ratios)) / len(ratios))
    return means


def main(argv: list[str]) -> None:
    path = Path(argv[0]) if argv else DEFAULT
    rows = json.loads(path.read_text())["rows"]
    print(table(rows))
    for dtype, mean in mid_geomeans(rows).items():
        print(f"mid-shape geometric mean ({SHORT[dtype]}): {mean:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
