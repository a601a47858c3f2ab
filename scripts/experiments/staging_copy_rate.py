"""The staging copy's rate (GPU machine): operands of odd row length copied into 16-byte rows.

    python scripts/experiments/staging_copy_rate.py [--out FILE] [--knobs]

For 2- and 4-byte elements and shapes from 3 x 255 to 16383 x 4097 (none of a test set), times
``kgen.kernels.gemm.staging.stage_rows`` and CuPy's slice assignment (``buf[:, :cols] = src``,
the copy staging used before) with CUDA events, the L2 flushed before each run, median of 30;
checks that both give the same bytes. Prints JSON rows (bytes read plus written over the time,
in GB/s, and microseconds); ``--knobs`` ends with the staging knobs they imply: the copy rate
(the median rate of the copies over 16 MB) and the fixed cost (the median time of the copies
under 64 KB).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SHAPES = [(3, 255), (37, 1001), (255, 3), (1001, 1001), (4099, 1001), (1001, 8191), (8191, 4095), (16383, 4097),
          (12289, 3001)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="")
    parser.add_argument("--knobs", action="store_true", help="end with the KGEN_STAGING_* values the rates imply")
    args = parser.parse_args()
    import cupy

    from kgen.kernels.gemm.staging import padded_ld, stage_rows
    from kgen.measure.bench import l2_flusher, time_runs
    from kgen.measurement import Timing
    from kgen.problem import Target

    flush = l2_flusher(Target.detect(0).l2_bytes)
    timing = Timing(runs=30)
    rows_out = []
    for itemsize, dtype, name in ((2, cupy.uint16, "float16"), (4, cupy.float32, "float32")):
        for rows, cols in SHAPES:
            src = cupy.random.default_rng(1).integers(0, 1000, size=(rows, cols)).astype(dtype)
            ld = padded_ld(cols, name)
            new, old = cupy.zeros((rows, ld), dtype), cupy.zeros((rows, ld), dtype)

            def kgen_copy(src=src, new=new, rows=rows, cols=cols, ld=ld):
                stage_rows(src.data.ptr, cols, new.data.ptr, ld, rows, cols, itemsize)

            def slice_copy(src=src, old=old, cols=cols):
                old[:, :cols] = src

            kgen_copy(), slice_copy()
            assert bool((new[:, :cols] == old[:, :cols]).all()), (rows, cols)
            moved = 2.0 * rows * cols * itemsize
            for how, run in (("stage_rows", kgen_copy), ("cupy_slice", slice_copy)):
                ms = statistics.median(time_runs(run, timing, flush))
                row = {"copy": how, "itemsize": itemsize, "rows": rows, "cols": cols, "bytes": int(moved),
                       "us": round(ms * 1e3, 2), "gbs": round(moved / (ms * 1e-3) / 1e9, 1)}
                rows_out.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                                              "rows": rows_out}, indent=1) + "\n")
    if args.knobs:
        mine = [r for r in rows_out if r["copy"] == "stage_rows"]
        rate = statistics.median(r["gbs"] for r in mine if r["bytes"] >= 16e6)
        fixed = statistics.median(r["us"] for r in mine if r["bytes"] < 64e3)
        print(f"KGEN_STAGING_COPY_GBS={rate:.0f} KGEN_STAGING_LAUNCH_US={fixed:.2f}")


if __name__ == "__main__":
    main()
