"""scripts/trace_phases.py and scripts/ab_gain.py with no GPU: the phase marks exist only in a
traced render, a trace's words become per-phase cycles since each block's start, and an A/B
run's rows give the geometric mean gain."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from kgen.compile import compile_source
from kgen.kernels.gemm.wgmma import GemmWgmma
from kgen.problem import Target
from kgen.render import render

from compiling import sass_or_skip

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts.trace_phases import (CLOCK_SLOTS, DRAINED_NS, END_NS, LAST_WARP_NS, START_NS, SUMS_NS,  # noqa: E402
                                  WORDS_PER_BLOCK, phase_summary, traced)

SPEC = GemmWgmma()
NAME = "gemm_wgmma_bf16_nn_64x128x64_s5_c1_g1_ts_x2"


def test_only_a_traced_render_marks_phases():
    target = Target.h200()
    problem = SPEC.problem(1000, 1000, 1000, "bfloat16", "NN")
    space = SPEC.space(problem, target)
    config = space.find([NAME])[NAME]
    plain = render(SPEC, problem, config, target, space)
    marked = render(traced(SPEC), problem, config, target, space)
    assert "kgen_trace" not in plain.code and "__device__ unsigned long long kgen_trace" in marked.code
    assert plain.digest != marked.digest        # never one cache entry for both
    plain_sass = sass_or_skip(compile_source(plain, use_cache=False).binary.cubin)
    marked_sass = sass_or_skip(compile_source(marked, use_cache=False).binary.cubin)
    # the global timer at start, the sums, drained, the last warp's end and the producer's end
    assert "GLOBALTIMER" not in plain_sass and marked_sass.count("GLOBALTIMER") == 5
    assert "REDG.E.MAX.64" in marked_sass and "REDG" not in plain_sass   # the last warp's stamp
    assert marked_sass.count("CS2R") > plain_sass.count("CS2R")     # the clock reads


def test_phase_summary_counts_cycles_from_each_blocks_start():
    words = np.zeros(2 * WORDS_PER_BLOCK, dtype=np.uint64)
    for block, (ns, clock) in enumerate(((1000, 50), (1300, 9000))):
        row = words[block * WORDS_PER_BLOCK:]
        row[START_NS], row[CLOCK_SLOTS["start"]] = ns, clock
        row[CLOCK_SLOTS["ready"]] = clock + 400 + 100 * block
        row[CLOCK_SLOTS["end"]] = clock + 5000
    words[DRAINED_NS] = 4000                    # block 1 never reached the drain mark
    summary = phase_summary(words, 2)
    assert summary["cycles"]["ready"] == [400, 500]
    assert summary["cycles"]["end"] == [5000, 5000]
    assert summary["cycles"]["sums"] == []      # marks not written are left out
    assert summary["start_spread_ns"] == 300 and summary["span_ns"] == 3000
    assert summary["last_warp_ns"] == [] and summary["end_after_cluster_ns"] == []
    assert summary["sums_spread_ns"] is None and summary["tail_ns"] is None   # no sums stamped
    words[SUMS_NS], words[WORDS_PER_BLOCK + SUMS_NS] = 3000, 3400
    summary = phase_summary(words, 2)
    assert summary["sums_spread_ns"] == 400 and summary["tail_ns"] == 600


def test_a_traced_split_k_render_marks_how_the_parts_meet():
    target = Target.h200()
    problem = SPEC.problem(64, 4096, 4096, "bfloat16", "NN")
    space = SPEC.space(problem, target)
    name = "gemm_wgmma_bf16_nn_64x64x64_s8_c1_g1_k2_ts"
    code = render(traced(SPEC), problem, space.find([name])[name], target, space).code
    for phase in ("parted", "turn_first", "turn_last", "added"):
        assert f"KGEN_MARK({CLOCK_SLOTS[phase]})" in code, phase


def test_phase_summary_times_the_end_against_the_clusters_last_warp():
    words = np.zeros(4 * WORDS_PER_BLOCK, dtype=np.uint64)
    for block, (drained, last, end) in enumerate(((100, 150, 400), (100, 300, 250), (90, 95, 80), (0, 0, 500))):
        row = words[block * WORDS_PER_BLOCK:]
        row[START_NS], row[DRAINED_NS], row[LAST_WARP_NS], row[END_NS] = 1, drained, last, end
    summary = phase_summary(words, 4, cluster=2)
    assert summary["last_warp_ns"] == [50, 200, 5]
    # blocks 0 and 1 are a cluster whose last warp ends at 300; block 3 never stamped its warps
    assert summary["end_after_cluster_ns"] == [100, -50]


def test_ab_gain_compares_each_config_with_its_base_version(tmp_path):
    import json

    from scripts.ab_gain import main as ab_gain

    rows = [("p1", "c", 1.0), ("p1", "c@base", 1.1), ("p2", "c", 2.0), ("p2", "c@base", 2.0),
            ("p2", "cublas", 1.5)]
    path = tmp_path / "compare.jsonl"
    path.write_text("".join(json.dumps({"problem": p, "config": c, "ms": ms}) + "\n" for p, c, ms in rows))
    assert ab_gain([str(path)]) == 0                          # sqrt(1.1 * 1.0) = 1.049
    assert ab_gain([str(path), "--min-gain", "0.06"]) == 1
    path.write_text(json.dumps({"problem": "p", "config": "c", "ms": 1.0}) + "\n")
    assert ab_gain([str(path)]) == 1                          # nothing ran in both versions
