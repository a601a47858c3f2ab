"""Named tensor-core GEMM configs timed side by side on one problem, with cuBLAS, in one run.

    python3 scripts/compare_configs.py bfloat16:NN:4096x4096x256 \\
        gemm_wgmma_bf16_nn_64x128x64_s5_c2_g8_pp gemm_wgmma_bf16_nn_64x128x64_s5_c2_g8_pp_ts ...

Each config is checked against the float64 reference on fresh inputs first (a wrong one is
reported, not timed), then timed as the tuner times (CUDA events, L2 flushed before each
run, median). Several problems may be given, each followed by its configs; a problem may
also be any family's problem key as the database writes it (``softmax|cols=50257|...``; its
family is the key's, and there is no baseline but for GEMM). For the question
"does this change of one parameter pay": the configs run in turns, so a drift of the card
shows in all of them alike. ``--family`` picks the kernel family (default gemm_wgmma;
gemm_mma for the portable one). ``--out FILE`` appends the rows as JSON lines.

For "does this change of the template pay": ``--base-template FILE`` (the family's template
as it was, e.g. ``git show HEAD:templates/gemm/wgmma.cu.j2 > /tmp/base.cu.j2``) runs each
named config a second time as ``NAME@base``, rendered from FILE, in the same turns.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROUNDS = 3            # each config timed ROUNDS times, in turns with the others


def is_problem_key(head: str) -> bool:
    """Whether a problem is named by any family's problem key ("family|field=value|..."; no
    cuBLAS baseline, no FLOP rate) rather than as a GEMM shape ("dtype:layout:MxNxK")."""
    return "|" in head


def _groups(items: list[str]) -> list[tuple[str, list[str]]]:
    groups: list[tuple[str, list[str]]] = []
    for item in items:
        if item.count(":") == 2 or is_problem_key(item):
            groups.append((item, []))
        elif not groups:
            raise SystemExit(f"{item}: name a problem (dtype:layout:MxNxK or a problem key) before its configs")
        else:
            groups[-1][1].append(item)
    return groups


def checked_runs(family: str, items: list[str], base_template: Path | None = None) -> list[tuple[str, object, dict]]:
    """For each problem of ``items`` (dtype:layout:MxNxK, then config names): the problem and
    a launcher for each named config that compiles and passes the check against float64 on
    fresh inputs (the others are reported), and cuBLAS's, all on the same timing inputs; with
    ``base_template``, each config rendered from that file too, as ``NAME@base``."""
    from kgen.compile import CompilePool
    from kgen.kernels.gemm.tc import torch_baseline
    from kgen.measure.launch import CupyKernel
    from kgen.measure.verify import verify
    from kgen.problem import Problem, Target
    from kgen.render import render
    from kgen.registry import get_spec

    if base_template is not None and not base_template.is_file():
        raise SystemExit(f"--base-template {base_template}: no such file")
    target = Target.detect(0)

    def variants_of(spec) -> list[tuple[str, object]]:
        variants = [("", spec)]
        if base_template is not None:
            base = copy.copy(spec)
            base.template = str(base_template.resolve())
            variants.append(("@base", base))
        return variants

    cases = []          # (head, spec, problem, [(name, variant spec, config, future)])
    with CompilePool() as pool:          # knobs.compile_workers processes
        for head, names in _groups(items):
            if is_problem_key(head):
                problem = Problem.from_key(head)
                spec = get_spec(problem.family)
            else:
                spec = get_spec(family)
                dtype, layout, shape = head.split(":")
                m, n, k = (int(x) for x in shape.split("x"))
                problem = spec.problem(m, n, k, dtype, layout)
            variants = variants_of(spec)
            space = spec.space(problem, target)
            by_name = space.find(names)
            jobs = []
            for name in names:
                if name not in by_name:
                    print(f"{head} {name}: not a valid config of this problem's space", flush=True)
                    continue
                for suffix, variant in variants:
                    jobs.append((name + suffix, variant, by_name[name],
                                 pool.submit(render(variant, problem, by_name[name], target, space))))
            cases.append((head, spec, problem, jobs))
        cases = [(head, spec, problem,
                  [(name, variant, config, fut.result()) for name, variant, config, fut in jobs])
                 for head, spec, problem, jobs in cases]
    checked = []
    for head, spec, problem, jobs in cases:
        ops = spec.inputs(problem, seed=1)
        check_ops = spec.inputs(problem, seed=2)          # fresh inputs for the check, and their
        expected = spec.reference(problem, check_ops)     # reference, once for every config
        runs = {}
        for name, variant, config, result in jobs:
            if result.failure is not None:
                print(f"{head} {name}: does not compile ({result.failure.detail[:300]})", flush=True)
                continue
            binary = result.binary
            kernel = CupyKernel(binary.cubin, binary.entry, binary.path)
            # each variant launched through its own spec: its arguments, and its workspaces
            # (kgen.kernels.gemm.wgmma keeps one per template), are its own
            check = verify(variant, problem, config, kernel, check_ops, expected)   # outputs poisoned each time
            if not check.ok:
                print(f"{head} {name}: WRONG ({check.detail})", flush=True)
                continue
            runs[name] = (lambda kernel=kernel, variant=variant, config=config, problem=problem, ops=ops:
                          variant.run(kernel, problem, config, ops))
        cublas = None if is_problem_key(head) else torch_baseline(problem, ops)
        if cublas is not None:
            runs["cublas"] = cublas
        checked.append((head, problem, runs))
    return checked


def in_turns(runs: dict, flush, rounds: int = ROUNDS, hold: bool | None = None) -> dict[str, list[float]]:
    """Each run's median time (ms) in each of ``rounds`` rounds, the runs taking turns
    (``hold``: see kgen.measure.bench.time_runs)."""
    from kgen.measure.bench import time_runs
    from kgen.measurement import Timing

    timing = Timing(runs=25)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(statistics.median(time_runs(run, timing, flush, hold=hold)))
    return times


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("items", nargs="+", help="dtype:layout:MxNxK, then config names; repeat")
    ap.add_argument("--family", default="gemm_wgmma", help="gemm_wgmma or gemm_mma")
    ap.add_argument("--out", type=Path, help="append the rows here (JSON lines)")
    ap.add_argument("--base-template", type=Path, help="also run each config rendered from this template file")
    args = ap.parse_args(argv)

    import cupy

    from kgen.measure.bench import l2_flusher
    from kgen.problem import Target

    flush = l2_flusher(Target.detect(0).l2_bytes)
    for head, problem, runs in checked_runs(args.family, args.items, args.base_template):
        keyed = is_problem_key(head)
        flops = None if keyed else 2 * problem["m"] * problem["n"] * problem["k"]
        times = in_turns(runs, flush)
        base = statistics.median(times["cublas"]) if "cublas" in times else None
        for name, ts in times.items():
            ms = statistics.median(ts)
            row = {"family": problem.family if keyed else args.family, "problem": head, "config": name,
                   "ms": ms, "rounds_ms": ts, "vs_cublas": base / ms if base else None,
                   "tflops": 1e-9 * flops / ms if flops else None}
            print(f"{head:28s} {name:48s} {ms:8.4f} ms"
                  + (f" {row['tflops']:6.1f} TFLOP/s" if flops else "")
                  + (f"  x{row['vs_cublas']:.3f} cuBLAS" if base else ""), flush=True)
            if args.out:
                with args.out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
        cupy.cuda.Device().synchronize()


if __name__ == "__main__":
    main(sys.argv[1:])
