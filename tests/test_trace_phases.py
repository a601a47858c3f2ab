"""scripts/trace_phases.py with no GPU: the phase marks exist only in a traced render, and a
trace's words become per-phase cycles since each block's start."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from kgen.compile import compile_source
from kgen.kernels.gemm_wgmma import GemmWgmma
from kgen.problem import Target
from kgen.render import render

from compiling import sass_or_skip

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts.trace_phases import CLOCK_SLOTS, DRAINED_NS, START_NS, WORDS_PER_BLOCK, phase_summary, traced  # noqa: E402

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
    assert "GLOBALTIMER" not in plain_sass and marked_sass.count("GLOBALTIMER") == 2
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
