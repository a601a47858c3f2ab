"""The first-call race's own times beside the benchmark's, on a few shapes of the random set
(GPU): each shape through ``scripts/bench_shapes.py``'s ``bench_shape`` in both untuned modes, in
a fresh KGEN_HOME, with ``kgen.ops.race`` logging each race at DEBUG (its candidates' times and
the one kept).

    python scripts/experiments/race_log.py [--shape 4x256x176:TT:float32 ...]

Prints each race's log line, then one line per (shape, mode): kgen's and cuBLAS's microseconds
and the choice.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SHAPES = ["4x256x176:TT:float32", "2x152x2024:NN:float32", "8x8x55:NT:float16", "28x1x14656:NN:bfloat16"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", action="append", help="MxNxK:LAYOUT:DTYPE (tf32: DTYPE tf32); repeatable")
    args = parser.parse_args(argv)

    import scripts.bench_shapes as bench

    home = Path(tempfile.mkdtemp(prefix="kgen-race-log-"))
    bench._fresh_environment(home, Path(os.environ.get("KGEN_CACHE_DIR", home / "cubins")))
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("kgen.ops.race").setLevel(logging.DEBUG)
    gpu = bench.CudaBench(30)
    for i, text in enumerate(args.shape or SHAPES):
        size, layout, dtype = text.split(":")
        m, n, k = (int(x) for x in size.split("x"))
        shape = dict(m=m, n=n, k=k, layout=layout, dtype="float32" if dtype == "tf32" else dtype,
                     precision="tf32" if dtype == "tf32" else None)
        for row in bench.bench_shape(shape, ["untuned+vendor", "untuned"], gpu, 0, 1000 + i, log=lambda line: None):
            kgen_us = row["kgen_ms"] * 1e3 if row["kgen_ms"] else float("nan")
            cublas_us = row["baselines"]["cublas"] * 1e3 if row["baselines"]["cublas"] else float("nan")
            print(f"{text} {row['mode']}: kgen {kgen_us:.2f} us, cuBLAS {cublas_us:.2f} us, {row['choice']}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
