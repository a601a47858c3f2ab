"""gemm_skinny's model against measurement: per random skinny problem, the model's top picks and
random valid configs timed side by side with cuBLAS, each with its predicted time.

    python3 scripts/study_skinny.py --count 24 --seed 7 --out skinny_study.jsonl

Problems (``problems``): the small side log-uniform in [1, 16], the big one in [256, 16384], K in
[64, 16384], bfloat16 / float16 / float32 (as tf32 for cuBLAS), any layout, a quarter of the
sizes odd. The seed must differ from ``scripts/bench_shapes.py``'s (1 and the run's second one):
this is training data for the model's constants, never the test set. Each config is checked
against float64 first (a wrong one is reported, not timed), then timed in turns with the others
(CUDA events, L2 flushed, median of 25). One JSON line per (problem, config): m, n, k, dtype,
layout, config, predicted_ms, model_rank, ms, cublas_ms.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

TEST_SEEDS = (1, 466571775)        # bench_shapes' seeds: never drawn here


def problems(count: int, seed: int, tiny: bool = False) -> list[tuple[int, int, int, str, str]]:
    """(m, n, k, dtype, layout) of ``count`` skinny problems from ``seed`` (``tiny``: the big side
    too in [16, 64] and K in [1024, 16384]: a few outputs, each a long dot product)."""
    if seed in TEST_SEEDS:
        raise SystemExit(f"seed {seed} draws bench_shapes' test set; choose another")
    rng = random.Random(seed)

    def log_uniform(lo: int, hi: int) -> int:
        x = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
        if rng.random() < 0.25 and x > 8:
            x += rng.choice((-1, 1)) * rng.randrange(1, 8)      # off a multiple of 8
        return max(lo, min(hi, x))

    out = []
    for _ in range(count):
        small, big, k = ((log_uniform(1, 16), log_uniform(16, 64), log_uniform(1024, 16384)) if tiny else
                         (log_uniform(1, 16), log_uniform(256, 16384), log_uniform(64, 16384)))
        m, n = (small, big) if rng.random() < 0.5 else (big, small)
        out.append((m, n, k, rng.choice(("bfloat16", "float16", "float32")), rng.choice(("NN", "NT", "TN", "TT"))))
    return out


def _tile_call(problem, dtype: str):
    """(a call of kgen.gemm on fresh operands of ``problem`` as the tile families run it untuned,
    gemm_skinny and cuBLAS no candidates; the config it runs)."""
    import os

    import kgen
    from kgen.registry import get_spec

    os.environ.update(KGEN_SKINNY_MAX="0", KGEN_VENDOR="0")
    ops = get_spec("gemm_skinny").inputs(problem, seed=3)
    a, b, c = ops["a"], ops["b"], ops["c"]
    options = dict(dtype="bfloat16") if dtype == "bfloat16" else dict(precision="tf32") if dtype == "float32" else {}
    choice = kgen.gemm_choice(a, b, c, **options)
    kgen.gemm(a, b, c, **options)
    for name in ("KGEN_SKINNY_MAX", "KGEN_VENDOR"):
        del os.environ[name]
    return (lambda: kgen.gemm(a, b, c, **options)), f"{choice.config}{'+staged ' + choice.staged if choice.staged else ''}"


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=24)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--top", type=int, default=3, help="the model's best configs per problem")
    ap.add_argument("--random", type=int, default=5, help="random valid configs per problem")
    ap.add_argument("--tiny", action="store_true", help="problems with few outputs and a long K")
    ap.add_argument("--per-split", action="store_true", help="also the model's best config of every split-K count")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    import cupy

    from compare_configs import checked_runs, in_turns
    from kgen.kernels.gemm.skinny import PARAMS, candidates, predict_seconds
    from kgen.measure.bench import l2_flusher
    from kgen.problem import Target
    from kgen.registry import get_spec

    spec, target = get_spec("gemm_skinny"), Target.detect(0)
    flush = l2_flusher(target.l2_bytes)
    rng = random.Random(args.seed)
    for m, n, k, dtype, layout in problems(args.count, args.seed, args.tiny):
        problem = spec.problem(m, n, k, dtype, layout)
        space = spec.space(problem, target)
        picks = spec.model_picks(problem, target, args.top)
        sampled = space.sample(args.random, seed=rng.randrange(1 << 30))
        configs = {c.name: c for c in picks + sampled}
        cols = candidates(problem, target)
        names = [space.make({p: int(cols[p][i]) for p in PARAMS}).name for i in range(len(cols["S"]))]
        predicted = dict(zip(names, (predict_seconds(problem, target, cols) * 1e3).tolist()))
        if args.per_split:          # the model's best of each split-K count
            for split in sorted(set(cols["SPLITK"].tolist())):
                best = min((name for i, name in enumerate(names) if cols["SPLITK"][i] == split), key=predicted.get)
                configs.setdefault(best, space.make({p: int(cols[p][names.index(best)]) for p in PARAMS}))
        order = {name: rank for rank, name in enumerate(sorted(predicted, key=predicted.get))}
        head = f"{dtype}:{layout}:{m}x{n}x{k}"
        for _, checked, runs in checked_runs("gemm_skinny", [head, *configs]):
            runs["tiles"], tile_choice = _tile_call(checked, dtype)
            times = in_turns(runs, flush, rounds=1)
            cublas = statistics.median(times.pop("cublas")) if "cublas" in times else None
            tiles = statistics.median(times.pop("tiles"))
            print(f"{head:28s} {'kgen.gemm, tile families: ' + tile_choice:56s} {tiles:8.4f} ms", flush=True)
            for name, ts in times.items():
                row = {"m": m, "n": n, "k": k, "dtype": dtype, "layout": layout, "config": name,
                       "values": configs[name].as_dict(), "predicted_ms": predicted.get(name),
                       "model_rank": order.get(name), "ms": statistics.median(ts), "cublas_ms": cublas,
                       "tiles_ms": tiles, "tiles_choice": tile_choice}
                guess = "-" if row["predicted_ms"] is None else f"{row['predicted_ms']:.4f}"   # a row count the model skips
                print(f"{head:28s} {name:56s} {row['ms']:8.4f} ms (predicted {guess}, "
                      f"rank {row['model_rank']}) cuBLAS {cublas}", flush=True)
                with args.out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
        cupy.cuda.Device().synchronize()


if __name__ == "__main__":
    main(sys.argv[1:])
