"""scripts/bench_search.py's summaries and its per-seed tasks (no GPU needed)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import bench_search  # noqa: E402

RECORDING = str(ROOT / "tests" / "data" / "h200_gemm_mma_bf16_space.jsonl.gz")


def test_a_seed_that_never_gets_there_counts_as_slower_than_every_seed_that_does():
    assert bench_search.median_trials([3, 5, 4]) == 4
    assert bench_search.median_trials([3, None, 5, 4]) == 4.5     # not 4: the miss is the slowest
    assert bench_search.median_trials([1, None, None, 4]) is None  # half never got there
    assert bench_search.median_trials([None, None, 7]) is None


def test_a_row_holds_the_medians_and_each_seeds_trials():
    fast = [0.5, 0.96, 0.995, 1.0]
    slow = [0.5, 0.6, 0.96, 0.97]
    never = [0.5, 0.6, 0.7, 0.8]
    row = bench_search.summarize("space", "s", [fast, slow, never], budget=4)
    assert row["seeds_trials_to_95"] == [2, 3, None]
    assert row["seeds_trials_to_99"] == [3, None, None]
    assert row["trials_to_95"] == 3          # median of 2, 3 and a miss
    assert row["trials_to_99"] is None       # two of three missed
    assert row["frac_at"]["10"] is None      # past the budget: no value, not the last one again
    assert row["budget"] == 4 and row["seeds"] == 3


def test_cells_gather_their_seeds_from_the_processes_into_one_row_each():
    tasks = [(RECORDING, key, "random", "/tmp") for key in ["gemm_mma|no-such-problem"]]
    out = list(bench_search.run_cells(tasks, seeds=2, budget=5, jobs=1))
    assert len(out) == 1 and isinstance(out[0], str) and "skipped" in out[0]   # why, not a crash

    from kgen.runners import Recording

    key = sorted(Recording.load(RECORDING).problems())[0]
    rows = list(bench_search.run_cells([(RECORDING, key, "random", "/tmp"), (RECORDING, key, "kgen", "/tmp")],
                                       seeds=3, budget=10, jobs=2))
    assert sorted(r["strategy"] for r in rows) == ["kgen", "random"]
    for row in rows:
        assert row["space"] == key and row["seeds"] == 3 and len(row["seeds_trials_to_95"]) == 3
        assert row["trials_available"] == 10 and 0 < row["frac_at"]["10"] <= 1.0
        assert row["frac_at"]["25"] is None
