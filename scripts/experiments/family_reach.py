"""What each GEMM family can reach on one problem, against what dispatch picks: a diagnosis for
shapes where the untuned call is slow.

    python3 scripts/experiments/family_reach.py float32:TN:40x53x14440:tf32 float32:NT:130x15704x6448 \
        --sample 24 --out /tmp/reach.jsonl

For each problem (``dtype:layout:MxNxK``, ``:tf32`` for float32 read as tf32), every family
that may run it (the tensor-core families a race may time, staged operands included; for
float32, the exact CUDA-core family ``gemm`` too, which a tf32 request may use: exact is at
least as good), and in each: the cost model's ``--top`` picks and ``--sample`` configs drawn
uniformly from the space. Each config is checked against float64 on fresh inputs, then timed
as the tuner times (CUDA events, L2 flushed, median of ``--runs``); cuBLAS (``torch.matmul``,
TF32 allowed for tf32 problems) in the same run. Printed per family: the model's pick, the
best of its top picks, the best sampled config. Staged candidates are timed without their
staging copy (the row says so). Diagnosis only: nothing is written to a database.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def parse(head: str) -> dict:
    parts = head.split(":")
    dtype, layout, shape = parts[:3]
    m, n, k = (int(x) for x in shape.split("x"))
    return dict(m=m, n=n, k=k, dtype=dtype, layout=layout, precision=parts[3] if len(parts) > 3 else None)


def ways(req: dict, target) -> list[tuple[object, object, str]]:
    """(spec, problem, label) of every family that may run the request."""
    from kgen.kernels.gemm.problem import gemm_problem
    from kgen.kernels.gemm.route import request_args, tensor_core_candidates, uses_tensor_cores
    from kgen.registry import get_spec

    found = []
    args = request_args(req["m"], req["n"], req["k"], req["dtype"], req["layout"])
    if uses_tensor_cores(req["dtype"], req["precision"], "none", None) or req["dtype"] == "float32":
        for spec, problem, stage in tensor_core_candidates(args, target, True):
            if req["dtype"] == "float32" and req["precision"] is None and problem["precision"] == "tf32":
                continue                       # an exact request: tf32 families are no candidates
            found.append((spec, problem, spec.family + ("+staged" if any(stage) else "")))
    if req["dtype"] == "float32":
        found.append((get_spec("gemm"), gemm_problem(req["m"], req["n"], req["k"], "float32", req["layout"]), "gemm"))
    return found


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problems", nargs="+")
    ap.add_argument("--top", type=int, default=4, help="the cost model's best-ranked configs per family")
    ap.add_argument("--sample", type=int, default=24, help="uniformly sampled configs per family")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    from kgen.compile import CompilePool
    from kgen.kernels.gemm import cost
    from kgen.measure.bench import l2_flusher, time_runs
    from kgen.measure.launch import CupyKernel
    from kgen.measure.verify import verify
    from kgen.measurement import Timing
    from kgen.problem import Target
    from kgen.render import render

    target = Target.detect(0)
    flush = l2_flusher(target.l2_bytes)
    timing = Timing(runs=args.runs)

    def timed(run) -> float:
        return statistics.median(time_runs(run, timing, flush))

    for head in args.problems:
        req = parse(head)
        rows = []
        base = None                      # (spec, problem) whose baseline is cuBLAS's call
        with CompilePool() as pool:
            jobs = []
            for spec, problem, label in ways(req, target):
                space = spec.space(problem, target)
                picked = spec.model_choice(problem, target)
                ranked = [space.make(v) for _, v in cost.rank(spec, problem, target,
                                                              cost.candidates(spec, problem, target))
                          if space.is_valid(v)][: args.top] if cost.has_model(spec.family) else []
                chosen = {}
                if picked is not None:
                    chosen[picked[0].name] = (picked[0], "pick")
                for config in ranked:
                    chosen.setdefault(config.name, (config, "top"))
                for config in space.sample(args.sample, seed=1):
                    chosen.setdefault(config.name, (config, "sample"))
                for name, (config, why) in chosen.items():
                    jobs.append((spec, problem, label, config, why,
                                 pool.submit(render(spec, problem, config, target, space))))
                if base is None:
                    base = (spec, problem)
            built = [(spec, problem, label, config, why, fut.result()) for spec, problem, label, config, why, fut in jobs]
        operands = {}
        for spec, problem, label, config, why, result in built:
            if result.failure is not None:
                print(f"{head} {label} {config.name}: does not compile", flush=True)
                continue
            if problem.key not in operands:
                check_ops = spec.inputs(problem, seed=2)
                operands[problem.key] = (spec.inputs(problem, seed=1), check_ops, spec.reference(problem, check_ops))
            ops, check_ops, expected = operands[problem.key]
            kernel = CupyKernel(result.binary.cubin, result.binary.entry, result.binary.path)
            check = verify(spec, problem, config, kernel, check_ops, expected)
            if not check.ok:
                print(f"{head} {label} {config.name}: WRONG ({check.detail})", flush=True)
                continue
            ms = timed(lambda: spec.run(kernel, problem, config, ops))
            rows.append({"problem": head, "family": label, "config": config.name, "why": why, "ms": ms})
        cublas_ms = None
        if base is not None and base[1].key in operands:
            cublas_ms = timed(base[0].baseline(base[1], operands[base[1].key][0]))
        print(f"\n{head}: cuBLAS {cublas_ms if cublas_ms is None else round(cublas_ms * 1e3, 2)} us")
        for label in dict.fromkeys(r["family"] for r in rows):
            mine = [r for r in rows if r["family"] == label]
            pick = [r["ms"] for r in mine if r["why"] == "pick"]
            top = min((r for r in mine if r["why"] in ("pick", "top")), key=lambda r: r["ms"], default=None)
            best = min(mine, key=lambda r: r["ms"])

            def show(r):
                if r is None:
                    return "-"
                ratio = f" ({cublas_ms / r['ms']:.2f}x)" if cublas_ms else ""
                return f"{r['ms'] * 1e3:.1f} us{ratio} {r['config']}"
            print(f"  {label:22s} pick {pick[0] * 1e3 if pick else float('nan'):.1f} us | top {show(top)}"
                  f" | best of {len(mine)} {show(best)}", flush=True)
        if args.out:
            with args.out.open("a") as f:
                for r in rows:
                    f.write(json.dumps({**r, "cublas_ms": cublas_ms}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
