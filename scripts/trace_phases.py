"""Where a gemm_wgmma block's time goes: the template's phase marks, read back per block.

    python3 scripts/trace_phases.py bfloat16:NN:1000x1000x1000 gemm_wgmma_bf16_nn_64x128x64_s5_c1_g1_ts_x2 ...

Each named config (problems and configs as in scripts/compare_configs.py) is rendered with
TRACE = 1, which makes the kernel write its multiprocessor's clock at these points of each
block (thread 0 of the producer, thread 0 of the first consumer warpgroup):

    start        the block's first instruction
    ready        the barriers set up (after the cluster barrier)
    descs        the producer has issued its tensor maps' prefetches
    origin       the producer has its first tile's origin and k range
    freed        the producer's first wait for a free stage passed
    first_copy   the producer sends the first stage's copies
    first_stage  the first consumer sees the first stage land
    sums         the first unit's mainloop done (its last wgmma complete)
    parted       split-K: the first unit's part written to the workspace (and fenced)
    turn_first   split-K: the part learnt a later part finishes the tile (the counter's answer)
    turn_last    split-K: the part learnt it finishes the tile
    added        split-K: the other parts read and added (the tile's last part)
    stored       every unit's epilogue issued
    drained      the consumer's TMA stores done
    end          the producer's last instruction (in a cluster, once every stage it filled is
                 freed in each block it feeds)

and the global timer at start, sums, drained, end, and when the block's last consumer warp is
done (``last_warp_ns``: after warp 0's drain; ``end_after_cluster_ns``: the producer's end after
the last warp of its cluster's blocks, negative where it leaves first). From the sums stamps:
``sums_spread_ns``, the last block's mainloop end after the first's, and ``tail_ns``, the last
drain after the last mainloop end. The kernel runs
``--runs`` times on the same inputs, L2 flushed before each (as the tuner times); per phase,
the median over blocks and runs of the cycles since the block's start is printed, with the
slowest block's. The global timer gives the spread of the blocks' starts and the span from
the first start to the last drain. Without TRACE the marks compile to nothing: the tuned kernels are unchanged.
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

PHASES = ("start", "ready", "descs", "origin", "freed", "first_copy", "first_stage", "sums", "parted",
          "turn_first", "turn_last", "added", "stored", "drained", "end")
CLOCK_SLOTS = {"start": 1, "ready": 2, "descs": 10, "origin": 11, "freed": 12, "first_copy": 3,
               "first_stage": 4, "sums": 5, "parted": 16, "turn_first": 17, "turn_last": 18, "added": 19,
               "stored": 6, "drained": 7, "end": 9}
START_NS, DRAINED_NS, LAST_WARP_NS, END_NS, SUMS_NS = 0, 8, 14, 15, 20      # global-timer slots
WORDS_PER_BLOCK = 32     # KGEN_TRACE_WORDS of templates/common/trace.cuh


def traced(spec):
    """A copy of ``spec`` whose renders carry TRACE = 1."""
    tracing = copy.copy(spec)
    tracing.context = lambda problem, config, space: {**spec.context(problem, config, space), "TRACE": 1}
    return tracing


def phase_summary(words, blocks: int, cluster: int = 1) -> dict:
    """Per phase, the cycles since each block's start, from one run's trace words; blocks
    ``cluster`` at a time form a cluster."""
    rows = [[int(w) for w in words[b * WORDS_PER_BLOCK:(b + 1) * WORDS_PER_BLOCK]] for b in range(blocks)]
    cycles = {name: [r[slot] - r[CLOCK_SLOTS["start"]] for r in rows if r[slot]]
              for name, slot in CLOCK_SLOTS.items() if name != "start"}
    starts = [r[START_NS] for r in rows]
    drains = [r[DRAINED_NS] for r in rows if r[DRAINED_NS]]
    sums = [r[SUMS_NS] for r in rows if r[SUMS_NS]]
    last_warp = [r[LAST_WARP_NS] - r[DRAINED_NS] for r in rows if r[LAST_WARP_NS] and r[DRAINED_NS]]
    end_after = []
    for b, r in enumerate(rows):
        mates = rows[b - b % cluster:b - b % cluster + cluster]
        if r[END_NS] and all(m[LAST_WARP_NS] for m in mates):
            end_after.append(r[END_NS] - max(m[LAST_WARP_NS] for m in mates))
    return {"cycles": cycles, "start_spread_ns": max(starts) - min(starts),
            "span_ns": (max(drains) - min(starts)) if drains else None,
            "sums_spread_ns": (max(sums) - min(sums)) if sums else None,
            "tail_ns": (max(drains) - max(sums)) if sums and drains else None,
            "last_warp_ns": last_warp, "end_after_cluster_ns": end_after}


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
    from kgen.registry import get_spec

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
            blocks, cluster = spec.launch(problem, config).grid[0], int(config.get("CLUSTER", 1))
            runs = []
            for _ in range(args.runs):
                trace.fill(0)
                flush()
                spec.run(kernel, problem, config, ops)
                cupy.cuda.Device().synchronize()
                runs.append(phase_summary(trace.get(), blocks, cluster))
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
            for stamp in ("last_warp_ns", "end_after_cluster_ns"):
                values = [v for r in runs for v in r[stamp]]
                row[stamp] = statistics.median(values) if values else None
            for spread in ("sums_spread_ns", "tail_ns"):
                values = [r[spread] for r in runs if r[spread] is not None]
                row[spread] = statistics.median(values) if values else None
            print(f"{head} {name}: {blocks} blocks, starts spread {row['start_spread_ns']} ns, "
                  f"first start to last drain {row['span_ns']} ns", flush=True)
            for phase in row["median_cycles"]:
                print(f"    {phase:12s} {row['median_cycles'][phase]:9.0f} cycles (slowest block "
                      f"{row['slowest_cycles'][phase]:9.0f})", flush=True)
            print(f"    last warp done {row['last_warp_ns']} ns after warp 0; producer's end "
                  f"{row['end_after_cluster_ns']} ns after its cluster's last warp", flush=True)
            print(f"    mainloop ends spread over {row['sums_spread_ns']} ns; last drain "
                  f"{row['tail_ns']} ns after the last mainloop end", flush=True)
            if args.out:
                with args.out.open("a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
