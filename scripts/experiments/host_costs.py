"""Two host costs on the CPU alone (no GPU): checking an imported record, and a dispatch miss.

    python scripts/experiments/host_costs.py [--records 20000] [--problems 30]

- ``check``: microseconds a record of ``scripts/bench_db.py``'s synthetic file takes in
  ``Validator.why_each`` (its family's space, config, name and time), one process, the cyclic
  garbage collector paused as an import pauses it; the median of 7 passes, each with a fresh
  Validator (so each pass builds every problem's space again).
- ``miss``: milliseconds ``Dispatcher.prepare`` takes for a problem it has not seen (choose,
  render, the compile cache's cubin, load), with a fake launcher, for gemm_wgmma and gemm_mma at
  new M and for gemm_grouped_wgmma at new token counts; the median over ``--problems`` problems
  after the first (which compiles), and the kernels loaded.

Prints one JSON object. Compilation goes through NVRTC (the CUDA 13 wheels compile for sm_90
here); compiled cubins are kept in a temporary KGEN_HOME.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "tests")]


def check_us(records: int) -> float:
    from bench_db import synthetic
    from kgen.db.validity import Validator

    fields = []
    for r in synthetic(records):
        m, p = r.measurement, r.provenance
        fields.append((r.family, m.problem_key, m.config_name, m.config, m.time_ms, p.device, p.cc,
                       p.template_digest, m.failure.kind if m.failure else None))
    passes = []
    gc.disable()
    try:
        for _ in range(7):
            start = time.perf_counter()
            verdicts = list(Validator().why_each(fields))
            passes.append((time.perf_counter() - start) / len(fields) * 1e6)
            assert not any(verdicts), [v for v in verdicts if v][:3]
    finally:
        gc.enable()
    return statistics.median(passes)


def miss_ms(problems: int) -> dict:
    from fakes import FakeLauncher
    from kgen.dispatch import Dispatcher
    from kgen.kernels.gemm.grouped import grouped_problem
    from kgen.kernels.gemm.problem import tc_problem
    from kgen.problem import Target
    from kgen.registry import get_spec

    dispatcher = Dispatcher(launcher=FakeLauncher(), targets={0: Target.h200()})
    cases = {"gemm_wgmma": lambda i: tc_problem("gemm_wgmma", 1000 + 16 * i, 1024, 1024, "bfloat16", "NN"),
             "gemm_mma": lambda i: tc_problem("gemm_mma", 1000 + 16 * i, 1024, 1024, "bfloat16", "NN"),
             "gemm_grouped_wgmma": lambda i: grouped_problem(64, 8000 + 7 * i, 1408, 2048, "bfloat16", "NT",
                                                             family="gemm_grouped_wgmma")}
    out = {}
    for family, problem in cases.items():
        spec, times, before = get_spec(family), [], len(dispatcher.launcher.kernels)
        for i in range(problems):
            start = time.perf_counter()
            dispatcher.prepare(spec, problem(i), 0)
            times.append((time.perf_counter() - start) * 1e3)
        out[family] = {"median_ms": round(statistics.median(times[1:]), 2), "problems": problems,
                       "kernels_loaded": len(dispatcher.launcher.kernels) - before}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--problems", type=int, default=30)
    args = parser.parse_args()
    os.environ["KGEN_HOME"] = tempfile.mkdtemp(prefix="kgen-host-costs-")
    print(json.dumps({"check_us_per_record": round(check_us(args.records), 2), "miss": miss_ms(args.problems)},
                     indent=1))


if __name__ == "__main__":
    main()
