"""Training data for the GEMM cost model: a fixed grid of problems, each family's candidates
measured on the GPU, written as a recording that scripts/train_gemm_cost.py reads.

The grid (``grid()``) is a lattice, not a draw: every dimension from powers of two and
their odd neighbours (1 to 12288), combined so that skinny, decode-like (M or N up to 64),
long-K, tiny-K and square problems all appear, in every layout, at most 2e12 flops. It holds
none of the shapes of scripts/bench_shapes.py's test set (tests/test_bench_shapes.py checks
the default seed's), which the model is judged on. ``--lattice tiny`` draws problems of small
and mid dimensions only (1 to 1536, a seed of its own), whose fastest times are a launch that
does no work: the training script takes each family's ``launch_us`` from them.

For each problem and each way a GEMM family runs it (as ``kgen.gemm`` would: the tensor-core
families directly or with staged operands, the CUDA-core family for float32), the model's
candidate configs are ranked and the first ``--top`` of them measured, with ``--random``
more drawn from the rest: the model learns where its own ranking is wrong. Each problem
gets ``--timeout`` seconds at most. With ``--vendor``, cuBLAS (the families' vendor candidate,
``kgen.kernels.gemm.vendor``) is measured on each problem as well, recorded as config
``cublas``: what a model of the vendor's time (which dispatch needs to choose between it and
an untuned generated kernel) is fitted on. The cost model's training skips those records.

    python scripts/record_grid.py --out /tmp/h200_gemm_grid.jsonl.gz          # on the GPU machine
    python scripts/record_grid.py --list                                       # the grid, no GPU
    python scripts/record_grid.py --only float32 --min-side 17 --count 160 --top 8 --random 4 \
        --timeout 8 --out /tmp/h200_gemm_grid_f32.jsonl.gz                     # CUDA-core float32
    python scripts/record_grid.py --lattice tiny --count 48 --top 4 --random 2 --timeout 8 \
        --out tests/data/h100_gemm_tiny_grid.jsonl.gz                          # the launch floor
    python scripts/record_grid.py --vendor --top 2 --random 0 --timeout 6 --out /tmp/vendor_grid.jsonl.gz
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LAYOUTS = ("NN", "NT", "TN", "TT")
SMALL = (1, 3, 8, 16, 37, 64)                    # decode-like and skinny dimensions
MID = (96, 255, 512, 1000, 1536)
LARGE = (2048, 3001, 4096, 6144, 8191, 12288)
MAX_FLOPS = 2e12
DTYPES = {"bfloat16": 0.4, "float16": 0.1, "tf32": 0.25, "float32": 0.25}   # share of the grid


KINDS = {
    "grid": [("small", "large", "large"), ("large", "small", "large"), ("small", "mid", "large"),
             ("mid", "mid", "mid"), ("large", "large", "small"), ("mid", "large", "mid"),
             ("large", "mid", "large"), ("large", "large", "mid"), ("small", "large", "mid"),
             ("mid", "small", "large"), ("large", "large", "large"), ("mid", "mid", "large")],
    # problems whose work takes a microsecond or two: what each family's launch and prologue cost
    "tiny": [("small", "small", "small"), ("small", "small", "mid"), ("small", "mid", "small"),
             ("mid", "small", "small"), ("mid", "mid", "small"), ("small", "mid", "mid"), ("mid", "small", "mid")],
}
SEEDS = {"grid": 20261205, "tiny": 20261206}


def grid(count: int = 96, seed: int | None = None, lattice: str = "grid") -> list[dict]:
    """``count`` problems of the lattice (see the module's text), the same every time;
    ``lattice`` "tiny" draws only problems of small and mid dimensions (the launch floor).

    >>> g = grid(16)
    >>> len(g), g == grid(16), all(2 * p["m"] * p["n"] * p["k"] <= MAX_FLOPS for p in g)
    (16, True, True)
    >>> max(max(p["m"], p["n"], p["k"]) for p in grid(48, lattice="tiny"))
    1536
    """
    rng = random.Random(SEEDS[lattice] if seed is None else seed)
    kinds = KINDS[lattice]
    pools = {"small": SMALL, "mid": MID, "large": LARGE}
    labels = [label for label, share in DTYPES.items() for _ in range(round(share * count))]
    labels = (labels + ["bfloat16"] * count)[:count]
    out, seen = [], set()
    i = 0
    while len(out) < count:
        kind = kinds[i % len(kinds)]
        label = labels[len(out)]
        m, n, k = (rng.choice(pools[p]) for p in kind)
        layout = LAYOUTS[i % len(LAYOUTS)]
        i += 1
        key = (m, n, k, layout, label)
        if 2 * m * n * k > MAX_FLOPS or key in seen:
            continue
        seen.add(key)
        out.append({"m": m, "n": n, "k": k, "layout": layout,
                    "dtype": "float32" if label == "tf32" else label,
                    "precision": "tf32" if label == "tf32" else None})
    return out


def ways(shape: dict, target) -> list:
    """(spec, problem) of every way a family runs the shape, as ``kgen.gemm`` would consider."""
    from kgen.kernels.gemm.route import gemm_request, tensor_core_candidates, uses_tensor_cores

    from kgen.kernels.gemm.cost import has_model

    m, n, k, dtype, layout = (shape[f] for f in ("m", "n", "k", "dtype", "layout"))
    if uses_tensor_cores(dtype, shape["precision"], "none", None):
        found = [(spec, problem) for spec, problem, _ in
                 tensor_core_candidates(dict(m=m, n=n, k=k, dtype=dtype, layout=layout), target)]
    else:
        found = gemm_request("gemm", m, n, k, dtype, layout, target)
    return [(spec, problem) for spec, problem in found if has_model(spec.family)]   # the model's families


def listed_configs(spec, problem, target, top: int, extra: int, seed: int) -> dict[str, dict]:
    """The model's ``top`` ranked candidates and ``extra`` random others, name -> values."""
    from kgen.kernels.gemm import cost as gc

    space = spec.space(problem, target)
    valid = [v for v in gc.candidates(spec, problem, target) if space.is_valid(gc.complete(space, spec.family, v))]
    ranked = [v for _, v in gc.rank(spec, problem, target, valid)]
    rest = ranked[top:]
    random.Random(seed).shuffle(rest)
    chosen = ranked[:top] + rest[:extra]
    out = {}
    for values in chosen:
        full = space.complete(values)
        out[space.make(full).name] = full
    default = spec.default_config(problem, target)
    out.setdefault(default.name, default.as_dict())
    return out


def with_vendor(spec, problem, listed: dict[str, dict]) -> dict[str, dict]:
    """``listed`` and, where the family has a vendor call for the problem, the vendor candidate
    (a tune measures it once it is offered: ``kgen.search``)."""
    from kgen.vendor import VENDOR_CONFIG

    return {**listed, VENDOR_CONFIG: {}} if spec.vendor_supported(problem) else listed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=96, help="problems of the grid")
    parser.add_argument("--top", type=int, default=16, help="the model's first candidates measured per problem")
    parser.add_argument("--random", type=int, default=8, help="more candidates drawn from the rest")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per (problem, family) at most")
    parser.add_argument("--budget", type=float, default=0, help="stop starting problems after this many seconds")
    parser.add_argument("--lattice", choices=sorted(KINDS), default="grid",
                        help="grid: the lattice of every kind; tiny: small and mid dimensions only")
    parser.add_argument("--only", default="", help="keep the grid's problems of these dtypes (comma-separated "
                                                   "labels: bfloat16, float16, tf32, float32)")
    parser.add_argument("--min-side", type=int, default=1, help="keep the problems whose M and N are at least this")
    parser.add_argument("--vendor", action="store_true", help="measure cuBLAS on each problem too (config 'cublas')")
    parser.add_argument("--list", action="store_true", help="print the grid and stop")
    parser.add_argument("--out", default="", help="the recording (.jsonl.gz)")
    args = parser.parse_args(argv)
    shapes = grid(args.count, lattice=args.lattice)
    if args.only:
        labels = set(args.only.split(","))
        if not labels <= set(DTYPES):
            parser.error(f"--only takes labels of {', '.join(DTYPES)}")
        shapes = [s for s in shapes if (s["precision"] or s["dtype"]) in labels]
    shapes = [s for s in shapes if min(s["m"], s["n"]) >= args.min_side]
    if args.list:
        for s in shapes:
            print(f"{s['m']}x{s['n']}x{s['k']} {s['layout']} {s['precision'] or s['dtype']}")
        return 0
    if not args.out:
        parser.error("--out is required")
    if args.vendor:
        os.environ["KGEN_VENDOR"] = "1"        # (a tune measures the vendor only where it is on)

    sys.path.insert(0, str(ROOT / "scripts"))
    from record_space import OnlyListed, write_recording

    from kgen.compile import CompilePool
    from kgen.db import MemoryStore
    from kgen.problem import Target
    from kgen.runners import LocalGPURunner
    from kgen.search import tune

    target = Target.detect(0)
    db = MemoryStore()
    start = time.perf_counter()
    with LocalGPURunner((0,), target.l2_bytes) as runner, CompilePool() as pool:
        for i, shape in enumerate(shapes):
            if args.budget and time.perf_counter() - start > args.budget:
                print(f"budget spent: {i} of {len(shapes)} problems recorded", flush=True)
                break
            for spec, problem in ways(shape, target):
                t0 = time.perf_counter()
                listed = listed_configs(spec, problem, target, args.top, args.random, seed=i)
                if args.vendor:
                    listed = with_vendor(spec, problem, listed)
                result = tune(spec, problem, target, OnlyListed(runner, listed), db, trials=len(listed),
                              timeout_s=args.timeout, sampler="exhaustive", seed=i, warm_start=False, pool=pool)
                best = f"{result.best.time_ms:.4f} ms {result.best.config_name}" if result.best else "none"
                print(f"[{i + 1}/{len(shapes)}] {problem.key}: {len(result.trials)}/{len(listed)} measured, "
                      f"{dict(result.failures) or 'no'} failures, best {best}, {time.perf_counter() - t0:.1f} s",
                      flush=True)
    count = write_recording(args.out, [r for f in db.families() for r in db.records(f)])
    print(f"wrote {count} records to {args.out} in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
