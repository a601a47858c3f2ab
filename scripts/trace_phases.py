"""Where a gemm_wgmma block's time goes: the template's phase marks, read back per block.

    python3 scripts/trace_phases.py bfloat16:NN:1000x1000x1000 gemm_wgmma_bf16_nn_64x128x64_s5_c1_g1_ts_x2 ...

Each named config (problems and configs as in scripts/compare_configs.py) is rendered with
TRACE = 1, which makes the kernel write its multiprocessor's clock at these points of each
block (thread 0 of the producer, thread 0 of the first consumer warpgroup):

    start        the block's first instruction
    ready        the barriers set up (after the cluster barrier)
    first_copy   the producer sends the first stage's copies
    first_stage  the first consumer sees the first stage land
    sums         the first unit's mainloop done (its last wgmma complete)
    stored       every unit's epilogue issued
    drained      the consumer's TMA stores done
    end          the block's last instruction (after the final cluster barrier)

and the global timer at start and drained. The kernel runs ``--runs`` times on the same inputs,
L2 flushed before each (as the tuner times); per phase, the median over blocks and runs of
the cycles since the block's start is printed, with the slowest block's. The global timer
gives the spread of the blocks' starts and the span from the first start to the last
drain. Without TRACE the marks compile to nothing: the tuned kernels are unchanged.
``--out FILE`` appends a JSON line per config.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.compare_configs import _groups  # noqa: E402

PHASES = ("start", "ready", "first_copy", "first_stage", "sums", "stored", "drained", "end")
CLOCK_SLOTS = {"start": 1, "ready": 2, "first_copy": 3, "first_stage": 4, "sums": 5, "stored": 6,
               "drained": 7, "end": 9}
START_NS, DRAINED_NS = 0, 8      # global-timer slots
WORDS_PER_BLOCK = 16


def traced(spec):
    """A copy of ``spec`` whose renders carry TRACE = 1."""
    tracing = copy.copy(spec)
    tracing.context = lambda problem, config, space: {**spec.context(problem, config, space), "TRACE": 1}
    return tracing


def phase_summary(words, blocks: int) -> dict:
    """Per phase, the cycles since each block's start, from one run's trace words."""
    rows = [words[b * WORDS_PER_BLOCK:(b + 1) * WORDS_PER_BLOCK] for b in range(blocks)]
    cycles = {name: [int(r[slot]) - int(r[CLOCK_SLOTS["start"]]) for r in rows if int(r[slot])]
              for name, slot in CLOCK_SLOTS.items() if name != "start"}
    starts = [int(r[START_NS]) for r in rows]
    drains = [int(r[DRAINED_NS]) for r in rows if int(r[DRAINED_NS])]
    return {"cycles": cycles, "start_spread_ns": max(starts) - min(starts),
            "span_ns": (max(drains) - min(starts)) if drains else None}


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("items", nargs="+", help="dtype:layout:MxNxK, then config names; repeat")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", type=Path, help="append a JSON line per config here")
    args = ap.parse_args(argv)

    import cupy

    from kgen.compile import compile_source
    from kgen.measure.bench import l2_flusher
    from kgen.measure.launch import CupyKernel
    from kgen.problem import Target
    from kgen.render import render
    from kgen.spec import get_spec

    spec, target = get_spec("gemm_wgmma"), Target.detect(0)
    tracing = traced(spec)
    flush = l2_flusher(target.l2_bytes)
    for head, names in _groups(args.items):
        dtype, layout, shape = head.split(":")
        m, n, k = (int(x) for x in shape.split("x"))
        problem = spec.problem(m, n, k, dtype, layout)
        space = spec.space(problem, target)
        found = space.find(names)
        ops = spec.inputs(problem, seed=1)
        for name in names:
            if name not in found:
                print(f"{head} {name}: not a valid config of this problem's space", flush=True)
                continue
            config = found[name]
            binary = compile_source(render(tracing, problem, config, target, space)).binary
            kernel = CupyKernel(binary.cubin, binary.entry, binary.path)
            pointer = kernel._module.get_global("kgen_trace")
            trace = cupy.ndarray((1024 * WORDS_PER_BLOCK,), dtype=cupy.uint64, memptr=pointer)
            blocks = spec.launch(problem, config).grid[0]
            runs = []
            for _ in range(args.runs):
                trace.fill(0)
                flush()
                spec.run(kernel, problem, config, ops)
                cupy.cuda.Device().synchronize()
                runs.append(phase_summary(trace.get(), blocks))
            row = {"problem": head, "config": name, "blocks": blocks, "runs": args.runs,
                   "start_spread_ns": statistics.median(r["start_spread_ns"] for r in runs),
                   "span_ns": statistics.median(r["span_ns"] for r in runs if r["span_ns"] is not None)
                   if any(r["span_ns"] is not None for r in runs) else None,
                   "median_cycles": {}, "slowest_cycles": {}}
            for phase in PHASES[1:]:
                values = [c for r in runs for c in r["cycles"][phase]]
                if values:
                    row["median_cycles"][phase] = statistics.median(values)
                    row["slowest_cycles"][phase] = statistics.median(max(r["cycles"][phase]) for r in runs
                                                                     if r["cycles"][phase])
            print(f"{head} {name}: {blocks} blocks, starts spread {row['start_spread_ns']} ns, "
                  f"first start to last drain {row['span_ns']} ns", flush=True)
            for phase in row["median_cycles"]:
                print(f"    {phase:12s} {row['median_cycles'][phase]:9.0f} cycles (slowest block "
                      f"{row['slowest_cycles'][phase]:9.0f})", flush=True)
            if args.out:
                with args.out.open("a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
