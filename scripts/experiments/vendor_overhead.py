"""Where the vendor choice's extra GPU time comes from: cuBLAS timed three ways on one shape.

    python scripts/experiments/vendor_overhead.py [--rounds 4] [--out FILE.jsonl]

Per shape (small problems where ``untuned+vendor`` ran 0.85-0.90x the benchmark's own
``torch.matmul``, and one large one), with the operands ``scripts/bench_shapes.py`` makes:
``bench`` (that benchmark's cuBLAS closure), ``vendor`` (the GEMM families' vendor call,
``kgen.kernels.gemm.vendor.vendor_call``, on the same CuPy arrays) and ``kgen`` (``kgen.gemm``
with the vendor candidate chosen), timed in alternating rounds as the benchmark times (L2
flushed, the GPU held until each run is queued); and the CUDA kernels each way launches in one
call (``torch.profiler``), so that an extra kernel or a different cuBLAS kernel shows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

SHAPES = [  # m, n, k, layout, dtype, precision
    (8, 1872, 304, "TN", "float32", "tf32"),
    (32, 24, 10, "NN", "float32", None),
    (245, 8, 1526, "TT", "float32", None),
    (88, 191, 1176, "TT", "bfloat16", None),
    (6, 172, 336, "NN", "bfloat16", None),
    (39, 8, 785, "NT", "float16", None),
    (4096, 4096, 4096, "NN", "bfloat16", None),
]


def kernels_of(run) -> list[str]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return [e.name[:90] for e in prof.events() if e.device_type.name == "CUDA"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    os.environ["KGEN_VENDOR"] = "1"
    import kgen
    from bench_shapes import CudaBench
    from kgen.kernels.gemm.problem import gemm_problem, tc_problem
    from kgen.kernels.gemm.vendor import vendor_call
    from kgen.measure.bench import _gpu_hold

    gpu = CudaBench(args.runs)
    rows = []
    for m, n, k, layout, dtype, precision in SHAPES:
        shape = dict(m=m, n=n, k=k, layout=layout, dtype=dtype, precision=precision)
        case = gpu.prepare(shape, 7)
        kgen.refresh()
        choice = kgen.gemm_choice(case.a, case.b, case.c, **case.kwargs)
        problem = (tc_problem("gemm_mma", m, n, k, dtype, layout) if precision or dtype != "float32"
                   else gemm_problem(m, n, k, dtype, layout))
        call = vendor_call(problem)

        def vendor(case=case, call=call):
            call(case.a, case.b, case.c, 1.0, 0.0, None)

        def through_kgen(case=case):
            kgen.gemm(case.a, case.b, case.c, **case.kwargs)

        ways = {"bench": case.cublas, "vendor": vendor, "kgen": through_kgen}
        times = {name: [] for name in ways}
        gave_up = {name: 0 for name in ways}      # batches whose GPU hold timed out (the host in the time)
        for r in range(args.rounds):
            order = list(ways) if r % 2 == 0 else list(reversed(ways))
            for name in order:
                times[name].append(gpu.time(ways[name]))
                gave_up[name] += bool(_gpu_hold().timed_out)
        row = dict(shape, choice=choice.config, how=choice.how,
                   ms={name: statistics.median(t) for name, t in times.items()},
                   rounds={name: t for name, t in times.items()}, hold_timed_out=gave_up,
                   kernels={name: kernels_of(run) for name, run in ways.items()})
        rows.append(row)
        us = {name: round(v * 1000, 2) for name, v in row["ms"].items()}
        print(f"{m}x{n}x{k} {layout} {dtype} {precision or ''}: {choice.config} ({choice.how}) us {us}"
              f" holds timed out {gave_up}")
        for name, names in row["kernels"].items():
            print(f"   {name:7} {names}")
        gpu.release()
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
