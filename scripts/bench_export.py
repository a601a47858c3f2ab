"""Host cost of a call of an exported tensor-core GEMM package, against the raw launch it ends
in and against kgen.gemm, side by side in one run on the GPU machine.

    python scripts/bench_export.py [--out FILE] [--commit C]

Exports one shipped problem of gemm_mma and of gemm_wgmma (``kgen export``, NVIDIA H200
records; the cubins run on any sm_90 GPU), checks the package's result against kgen's, then
times per call (median of 30 bursts of 200 calls, the host's time to return, the GPU's queue
never full): ``raw`` (the package's own bound launch with its arguments built: cuLaunchKernel
alone), ``exported`` (``pkg.gemm(a, b, c)`` repeated: found by the arrays' identities and
shapes, launch), ``exported_planned`` (the same call without that lookup: the operands read,
the plan and the arguments looked up, launch), ``exported_new_c`` (``pkg.gemm(a, b)``, a new
output each call) and ``kgen`` (``kgen.gemm(a, b, c)``). Rows (family, problem, config, us per call, overhead_us = exported -
raw) into scripts/results/<device>/bench_export.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import benchlib  # noqa: E402

PROBLEMS = {
    "gemm_mma": "gemm_mma|align_a=4|align_b=8|dtype=bfloat16|epilogue=none|k=700|layout=NN|m=3000|n=5000|"
                "out_dtype=bfloat16|precision=native",
    "gemm_wgmma": "gemm_wgmma|align_a=8|align_b=8|dtype=bfloat16|epilogue=none|k=4096|layout=NN|m=1|n=4096|"
                  "out_dtype=bfloat16|precision=native",
}
OVERHEAD_TARGET_US = 2.0


def host_us(fn, calls: int = 200, bursts: int = 30) -> float:
    """Median host microseconds per call over bursts (the GPU synchronised between bursts)."""
    import cupy

    for _ in range(20):
        fn()
    cupy.cuda.Device().synchronize()
    samples = []
    for _ in range(bursts):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
        cupy.cuda.Device().synchronize()
    return statistics.median(samples)


def planned_us(module, fn) -> float:
    """``host_us(fn)`` with the repeated call's lookup off: every call takes the planned path
    (the operands read, the plan and the arguments looked up), as a call with new arrays does."""
    hot = module._CUPY_NDARRAY
    module._CUPY_NDARRAY = module._NoType
    try:
        return host_us(fn)
    finally:
        module._CUPY_NDARRAY = hot


def export(family: str, folder: Path):
    from kgen.export import export_package

    listing = folder / f"{family}.txt"
    listing.write_text(PROBLEMS[family] + "\n")
    name = f"bench_{family}"
    export_package(family, folder, name=name, device="NVIDIA H200", problems=listing)
    sys.path.insert(0, str(folder))
    return __import__(name)


def operands(entry):
    import cupy

    from kgen.kernels.gemm.tc import to_bf16

    m, n, k = (entry["problem"][x] for x in ("m", "n", "k"))
    rng = cupy.random.default_rng(0)
    a = to_bf16(rng.random((m, k), dtype=cupy.float32) - 0.5)     # fresh rows: the records' alignment
    b = to_bf16(rng.random((k, n), dtype=cupy.float32) - 0.5)
    return a, b, cupy.empty((m, n), dtype=cupy.uint16)


def measure(family: str, folder: Path) -> dict:
    import cupy

    import kgen
    from kgen.kernels.gemm.tc import from_bf16

    module = export(family, folder)
    entry = module.TABLE["problems"][PROBLEMS[family]]
    a, b, c = operands(entry)
    assert module.problem_key(a, b, dtype="bfloat16") == PROBLEMS[family]
    module.gemm(a, b, c, dtype="bfloat16")
    want = kgen.gemm(a, b, dtype="bfloat16")
    cupy.cuda.Device().synchronize()
    relerr = float(cupy.abs(from_bf16(c) - from_bf16(want)).max() / cupy.abs(from_bf16(want)).max())
    plan = next(iter(module._PLANS.values()))
    args = next(iter(plan["cached"].values()))
    stream = cupy.cuda.get_current_stream().ptr
    times = {
        "raw": host_us(lambda: plan["launch"](args, stream)),
        "exported": host_us(lambda: module.gemm(a, b, c, dtype="bfloat16")),
        "exported_planned": planned_us(module, lambda: module.gemm(a, b, c, dtype="bfloat16")),
        "exported_new_c": host_us(lambda: module.gemm(a, b, dtype="bfloat16")),
        "kgen": host_us(lambda: kgen.gemm(a, b, c, dtype="bfloat16")),
    }
    return {"family": family, "problem": PROBLEMS[family], "config": entry["config"], "relerr_vs_kgen": relerr,
            "us_per_call": times, "overhead_us": times["exported"] - times["raw"],
            "target_us": OVERHEAD_TARGET_US}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="")
    parser.add_argument("--commit", default="")
    args = parser.parse_args()
    import cupy

    from kgen.problem import Target

    target = Target.detect(0)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for family in PROBLEMS:
            row = measure(family, Path(folder))
            print(json.dumps(row), flush=True)
            rows.append(row)
    out = Path(args.out) if args.out else ROOT / "scripts" / "results" / target.slug / "bench_export.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                               "commit": args.commit or benchlib.commit(),
                               "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                               "method": "host perf_counter, median of 30 bursts of 200 calls", "rows": rows},
                              indent=1) + "\n")


if __name__ == "__main__":
    main()
