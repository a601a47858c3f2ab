"""How many trials per second the tuning driver sustains, with emulated GPUs (no GPU needed).

Each emulated GPU takes ``--ms`` milliseconds per measurement (a sleep in a thread, one
thread per GPU); configs are really rendered and compiled (run twice: the second run finds
the cubins cached, which leaves the driver's own cost). ``tune_many`` over four float32
problems, as scripts/bench_tune_scaling.py runs on real GPUs. Prints one JSON row per GPU
count: trials/s and the emulated GPUs' idle fraction.

    python scripts/bench_tune_driver.py --gpus 1,2 --ms 80 --trials 25 --sampler random
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kgen.measurement import Measurement, Timing  # noqa: E402
from kgen.runners.base import Runner  # noqa: E402

PROBLEMS = [(4096, 4096, 4096), (2048, 2048, 2048), (1000, 1000, 1000), (3000, 5000, 700)]


class EmulatedGPUs(Runner):
    """``slots`` GPUs, each busy ``ms`` per measurement; times are a fixed function of the name."""

    needs_binaries = True

    def __init__(self, slots: int, ms: float):
        self.slots, self.ms = slots, ms
        self.busy = 0.0
        self._threads = ThreadPoolExecutor(slots)
        self._lock = threading.Lock()

    def _measure(self, task) -> Measurement:
        start = time.perf_counter()
        time.sleep(self.ms / 1000)
        with self._lock:
            self.busy += time.perf_counter() - start
        t = 1.0 + (hash(task.config.name) % 100) / 100
        return Measurement(config_name=task.config.name, config=task.config.as_dict(),
                           problem_key=task.problem.key, times_ms=(t,) * 5, timing=Timing(),
                           measure_s=self.ms / 1000)

    def submit(self, task):
        return self._threads.submit(self._measure, task)

    def close(self) -> None:
        self._threads.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", default="1,2")
    parser.add_argument("--ms", type=float, default=80.0, help="milliseconds per emulated measurement")
    parser.add_argument("--trials", type=int, default=25, help="trials per problem")
    parser.add_argument("--sampler", default="random")
    args = parser.parse_args()

    from kgen.db import MemoryStore
    from kgen.kernels.gemm.problem import gemm_problem
    from kgen.multi import tune_many
    from kgen.problem import Target
    from kgen.registry import get_spec

    problems = [gemm_problem(*shape) for shape in PROBLEMS]
    for gpus in (int(g) for g in args.gpus.split(",")):
        with EmulatedGPUs(gpus, args.ms) as runner:
            start = time.perf_counter()
            results = tune_many(get_spec("gemm"), problems, Target.h200(), runner, MemoryStore(),
                                trials=args.trials, sampler=args.sampler, seed=gpus, warm_start=False)
            seconds = time.perf_counter() - start
        n = sum(len(r.trials) for r in results)
        print(json.dumps({"gpus": gpus, "trials": n, "seconds": round(seconds, 2),
                          "trials_per_s": round(n / seconds, 2),
                          "gpu_idle_fraction": round(max(0.0, 1 - runner.busy / (gpus * seconds)), 3),
                          "constraint_rejections": sum(r.failures["constraints"] for r in results),
                          "compile_s_per_trial": round(sum(r.compile_s for r in results) / max(n, 1), 3)}))


if __name__ == "__main__":
    main()
