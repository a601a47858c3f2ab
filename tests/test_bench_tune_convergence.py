"""The convergence benchmark's pure parts: which shapes, which commands, the summary."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import bench_tune_convergence as conv  # noqa: E402


def test_spread_takes_evenly_spaced_distinct_indices():
    assert conv.spread(60, 4) == [0, 15, 30, 45]
    assert conv.spread(5, 9) == [0, 1, 2, 3, 4]
    picked = conv.spread(60, 7)
    assert len(picked) == 7 and picked == sorted(set(picked)) and picked[-1] < 60


def test_the_two_tunes_differ_only_in_their_budget():
    shape = {"m": 13, "n": 8, "k": 776, "layout": "TN", "dtype": "float32", "precision": "tf32"}
    steps = conv.tune_steps(shape, 30, 300, 240)
    short, long = steps["short"], steps["long"]
    assert short[-2:] == ["--timeout", "30"] and "--trials" not in short
    assert long[-4:] == ["--trials", "300", "--timeout", "240"]
    assert short[:-2] == long[:-4]
    assert ["--precision", "tf32"] == short[short.index("--precision"):short.index("--precision") + 2]


def test_summary_counts_the_shapes_at_the_aim_per_dtype():
    rows = [{"dtype": "bfloat16", "precision": None, "quality": q} for q in (1.0, 0.96, 1.02)]
    rows.append({"dtype": "float32", "precision": "tf32", "quality": 0.5})
    rows.append({"dtype": "float32", "precision": None, "error": "short tune: did not finish"})
    summary = {s["dtype"]: s for s in conv.summarize(rows)}
    assert set(summary) == {"bfloat16", "tf32"}
    assert summary["bfloat16"]["count"] == 3 and summary["bfloat16"]["at_least_aim"] == 2
    assert summary["bfloat16"]["min"] == 0.96 and summary["tf32"]["geomean"] == 0.5
