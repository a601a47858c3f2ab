"""Half-type GEMMs with a side of 1 or 2 (GEMV-like) through ``kgen.gemm``, untuned and
generated only, beside cuBLAS: the data behind which of them go to ``gemm_skinny``.

The shapes come from their own seed (``gemv:SEED:DTYPE``), not from the test set of
``scripts/bench_shapes.py``: the small side 1 (two thirds) or 2, on M or N alike; the big side
and K log-uniform in [16, 16384] (a quarter not multiples of 8); the four layouts. Run it once
per routing, each in its own process (KGEN_HOME a fresh folder each):

    python3 scripts/experiments/gemv_route.py --out tile.json          # the defaults: tile families
    KGEN_SKINNY_DTYPES=float32,float16,bfloat16 KGEN_SKINNY_MAX=1 \\
        python3 scripts/experiments/gemv_route.py --out vector.json    # a side of 1 to gemm_skinny
    KGEN_SKINNY_DTYPES=float32,float16,bfloat16 KGEN_SKINNY_MAX=2 \\
        python3 scripts/experiments/gemv_route.py --out side2.json     # a side of 1 or 2
    python3 scripts/experiments/gemv_route.py --compare tile.json vector.json

On an H100 (docs/evidence/nvidia-h100-80gb-hbm3/gemv_route_*_ca354f7.json) gemm_skinny lost on
both sides and both dtypes (docs/untuned_gemm.md): half types stay off it.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

LAYOUTS = ("NN", "NT", "TN", "TT")


def gemv_shapes(seed: int, dtype: str, count: int) -> list[dict]:
    rng = random.Random(f"gemv:{seed}:{dtype}")

    def dim() -> int:
        value = round(math.exp(rng.uniform(math.log(16), math.log(16384))))
        return value if rng.random() < 0.25 else max(8, round(value / 8) * 8)

    shapes = []
    for i in range(count):
        small = 1 if i % 3 else 2
        big, k = dim(), dim()
        m, n = (small, big) if rng.random() < 0.5 else (big, small)
        shapes.append({"m": m, "n": n, "k": k, "layout": rng.choice(LAYOUTS), "dtype": dtype, "precision": None})
    return shapes


def run(args) -> None:
    import os

    from bench_shapes import CudaBench, bench_shape

    gpu = CudaBench(args.runs)
    rows = []
    for dtype in ("bfloat16", "float16"):
        for i, shape in enumerate(gemv_shapes(args.seed, dtype, args.count)):
            rows += bench_shape(shape, ["untuned"], gpu, args.seed, 1000 * args.seed + i)
    env = {k: os.environ.get(k) for k in ("KGEN_SKINNY_DTYPES", "KGEN_SKINNY_MAX")}
    Path(args.out).write_text(json.dumps({"device": gpu.target.name, "seed": args.seed, "env": env,
                                          "rows": rows}, indent=1) + "\n")


def compare(first: str, second: str) -> None:
    a, b = (json.loads(Path(f).read_text()) for f in (first, second))
    key = lambda r: (r["dtype"], r["m"], r["n"], r["k"], r["layout"])
    other = {key(r): r for r in b["rows"] if r.get("ratio")}
    by_side: dict = {}
    for r in a["rows"]:
        s = other.get(key(r))
        if not (r.get("ratio") and s):
            continue
        side = min(r["m"], r["n"])
        by_side.setdefault((r["dtype"], side), []).append((r["ratio"], s["ratio"]))
        print(f"{r['dtype']:9s} {r['m']:>5}x{r['n']:<5}x{r['k']:<6} {r['layout']}  {r['ratio']:.3f} {r['choice']:50s}"
              f" {s['ratio']:.3f} {s['choice']}")
    for (dtype, side), pairs in sorted(by_side.items()):
        g = [math.exp(sum(math.log(p[j]) for p in pairs) / len(pairs)) for j in (0, 1)]
        print(f"{dtype} side {side}: {len(pairs)} shapes, geomean {g[0]:.3f} -> {g[1]:.3f}, worst "
              f"{min(p[0] for p in pairs):.3f} -> {min(p[1] for p in pairs):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--count", type=int, default=24, help="shapes per dtype")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", default="gemv_route.json")
    ap.add_argument("--compare", nargs=2, metavar=("FIRST", "SECOND"))
    args = ap.parse_args()
    if args.compare:
        compare(*args.compare)
    else:
        run(args)


if __name__ == "__main__":
    main()
