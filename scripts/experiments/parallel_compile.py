"""What a first-call race pays to compile its candidates, on the CPU alone (no GPU): the default
picks of gemm_wgmma, gemm_mma and gemm_skinny for one bfloat16 problem each, compiled by NVRTC
(no cache) one after another, then side by side in threads as ``Dispatcher.load_many`` does.

    python scripts/experiments/parallel_compile.py [--repeats 3]

Prints one JSON object: the seconds of each way, the median of ``--repeats``, and the host's
core count.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PROBLEMS = [("gemm_wgmma", (333, 517, 1200)), ("gemm_mma", (333, 517, 1200)), ("gemm_skinny", (8, 517, 1200))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    from kgen.compile import compile_source
    from kgen.problem import Target
    from kgen.registry import get_spec
    from kgen.render import render

    target = Target.h200()
    sources = []
    for family, (m, n, k) in PROBLEMS:
        spec = get_spec(family)
        problem = spec.problem(m, n, k, "bfloat16", "NN")
        sources.append(render(spec, problem, spec.default_config(problem, target), target))

    def compile_all(parallel: bool) -> float:
        start = time.perf_counter()
        if parallel:
            with ThreadPoolExecutor(len(sources)) as pool:
                results = list(pool.map(lambda s: compile_source(s, use_cache=False), sources))
        else:
            results = [compile_source(s, use_cache=False) for s in sources]
        assert all(r.failure is None for r in results)
        return time.perf_counter() - start

    serial = statistics.median(compile_all(False) for _ in range(args.repeats))
    threads = statistics.median(compile_all(True) for _ in range(args.repeats))
    print(json.dumps({"kernels": [family for family, _ in PROBLEMS], "serial_s": round(serial, 3),
                      "threads_s": round(threads, 3), "host_cores": os.cpu_count()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
