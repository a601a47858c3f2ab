"""Ground truth for search studies: measure a whole config space (or a uniform sample of it)
on the GPU and write every measurement as a compressed recording for replay.

A space small enough (the wgmma family's: 75-164 valid configs per problem) is measured
whole (``--configs 0``). The CUDA-core and mma.sync spaces hold 35,000-150,000 valid configs
per problem, hours of compiling each; they are recorded as a uniform sample of distinct
valid configs (``--configs N``), and a replay searches exactly that sample.

    python scripts/record_space.py --set wgmma --configs 0 --out tests/data/h200_gemm_wgmma_bf16.jsonl.gz
    python scripts/record_space.py --set simt --configs 400 --out tests/data/h200_gemm_f32_simt_space.jsonl.gz

Each problem gets ``--timeout`` seconds at most; what was measured by then is kept.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = [(2048, 2048, 2048), (1000, 1000, 1000), (128, 4096, 4096), (3000, 5000, 700)]
SETS = {   # name: (family, dtype, shapes)
    "simt": ("gemm", "float32", SHAPES),
    "mma": ("gemm_mma", "bfloat16", SHAPES),
    # TMA needs 16-byte rows: the odd shape's k is 720 (not 700) for it
    "wgmma": ("gemm_wgmma", "bfloat16", [(4096, 4096, 4096)] + SHAPES[:3] + [(3000, 5000, 720)]),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=sorted(SETS), required=True)
    parser.add_argument("--configs", type=int, default=0, help="configs per problem (0: every valid one)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per problem")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="the recording (.jsonl.gz)")
    args = parser.parse_args()

    from kgen.db import MemoryStore, write_jsonl
    from kgen.kernels.gemm_route import gemm_request
    from kgen.problem import Target
    from kgen.runners import LocalGPURunner
    from kgen.search import tune

    family, dtype, shapes = SETS[args.set]
    target = Target.detect(0)
    db = MemoryStore()
    records = []
    with LocalGPURunner((0,), target.l2_bytes) as runner:
        for m, n, k in shapes:
            [(spec, problem)] = [c for c in gemm_request(family, m, n, k, dtype, "NN", target)
                                 if c[0].family == family]
            valid = sum(1 for _ in spec.space(problem, target).iter_values())
            budget = args.configs or valid
            sampler = "exhaustive" if budget >= valid else "random"
            t0 = time.perf_counter()
            result = tune(spec, problem, target, runner, db, trials=budget, timeout_s=args.timeout,
                          sampler=sampler, seed=args.seed, warm_start=False)
            ok = sum(1 for t in result.trials if t.ok)
            best = f"{result.best.time_ms:.4f} ms" if result.best else "none"
            print(f"{problem.key}: {len(result.trials)}/{valid} valid configs measured ({ok} ok, "
                  f"{dict(result.failures)} failed), best {best}, {time.perf_counter() - t0:.0f} s", flush=True)
            records.extend(db.records(family, problem.key, target.name))
    out = Path(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "recording.jsonl"
        count = write_jsonl(plain, records)
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(plain, "rb") as src, gzip.GzipFile(out, "wb", mtime=0) as dst:
            shutil.copyfileobj(src, dst)
    print(f"wrote {count} records to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
