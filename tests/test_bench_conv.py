"""scripts/bench_conv.py's cases: every suite's shapes make valid problems, ResNet-50's layers are
distinct and each appears at both batch sizes, the batched cases make problems both batched
families run on Hopper, and
the grouped cases make grouped problems, the backward suite has a data gradient and a weight gradient per layer but the stem;
kgen's time is the mean of its medians before and after the baselines."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import bench_conv  # noqa: E402

from kgen.kernels.gemm.batched import route  # noqa: E402
from kgen.problem import Target  # noqa: E402


def test_cases_make_valid_problems():
    cases = bench_conv._cases(False, set(bench_conv.SUITES))
    suites = {s: [c for c in cases if c["suite"] == s] for s in bench_conv.SUITES}
    assert len(suites["resnet50-b64"]) == len(suites["resnet50-b1"]) == len(bench_conv.RESNET50) == 23
    assert len(set(bench_conv.RESNET50)) == 23
    assert len(suites["float32"]) == 2 * 23 and all(c["dtype"] == "float32" for c in suites["float32"])
    for case in cases:
        if case.get("op") == "bmm":
            problem = bench_conv._bmm_problem(case)
            assert problem.family == "gemm_batched" and problem["batch"] == case["batch"]
            families = [p.family for _, p in route(Target.h200(), problem)]
            assert families[-1] == "gemm_batched" and (families[0] == "gemm_batched_wgmma" or case["suite"] != "bmm")
        elif case.get("op") == "grouped":
            problem = bench_conv._grouped_problem(case)
            assert problem.family == "gemm_grouped" and (problem["groups"], problem["m"]) == (case["groups"], case["m"])
        elif case.get("op") == "grouped_wgrad":
            problem = bench_conv._kgrouped_problem(case)
            assert problem.family == "gemm_kgrouped" and problem["k"] == case["k"] and problem["layout"] == "TN"
        elif case.get("op") == "depthwise":
            assert bench_conv._depthwise_problem(case).family == "conv2d_depthwise"
        else:
            exact = case["dtype"] == "float32" and case.get("precision") is None
            assert exact == (case["suite"] == "float32")                  # exact float32: that suite only
            assert bench_conv._flops(case) > 0
            assert bench_conv._problem(case).family == ("conv2d_simt" if exact else "conv2d")
    backward = suites["backward"]
    assert sum(c["op"] == "dgrad" for c in backward) == 22
    assert sum(c["op"] == "wgrad" for c in backward) == 22
    assert len(suites["grouped"]) == len(suites["grouped-wgrad"]) == len(bench_conv.GROUPED)
    # each weight gradient is its forward layer's: K x N products over the layer's rows
    assert {(c["groups"], c["k"], c["n"], c["m"]) for c in suites["grouped-wgrad"]} == \
        {(g, rows, n, k) for g, rows, n, k, _ in bench_conv.GROUPED}
    shapes = bench_conv.random_bmm(16)
    assert shapes == bench_conv.random_bmm(16) and len(set(shapes)) == 16      # reproducible, distinct
    assert {s[4] for s in shapes} == {"NN", "NT", "TN", "TT"} and any(s[1] % 8 or s[2] % 8 for s in shapes)
    assert all(2 <= s[0] <= 256 and 16 <= min(s[1:3]) and max(s[1:3]) <= 1024 and 64 <= s[3] <= 1024 for s in shapes)
    layers = bench_conv.random_grouped(10)
    assert layers == bench_conv.random_grouped(10) and len(set(layers)) == 10
    assert all(4 <= g <= 256 and g <= m and n % 64 == k % 64 == 0 and 2.0 * m * n * k <= 2e12 for g, m, n, k, _ in layers)
    assert {case[:5] for case in (tuple(c[f] for f in ("groups", "m", "n", "k", "layout")) for c in cases
                                  if c["suite"] == "grouped-random")} == set(layers)
    quick = bench_conv._cases(True, {"resnet50-b64", "bmm", "grouped"})
    assert 0 < len(quick) < len(cases) and {c["suite"] for c in quick} == {"resnet50-b64", "bmm", "grouped"}


def test_kgen_timed_again_after_its_baselines():
    row = {"kgen_ms": 2.0, "tflops": 30.0, "speedup": 0.9, "speedup_vs_fastest": 0.6, "baselines": {"cudnn": 1.8},
           "_again": lambda: 1.0}
    out = bench_conv._timed_again(row)
    assert "_again" not in out and out["kgen_ms_runs"] == [2.0, 1.0] and out["kgen_ms"] == 1.5
    assert out["tflops"] == pytest.approx(40.0) and out["speedup"] == pytest.approx(1.2)
    assert out["speedup_vs_fastest"] == pytest.approx(0.8)
    failed = {"error": "x", "baselines": {}}
    assert bench_conv._timed_again(dict(failed)) == failed


def test_depthwise_cases_make_depthwise_problems():
    cases = [c for c in bench_conv._cases(False, {"depthwise"})]
    assert len(cases) == len(bench_conv.DEPTHWISE) + len(bench_conv.DEPTHWISE_ODD) + 1
    problems = {bench_conv._depthwise_problem(c) for c in cases}
    assert len(problems) == len(cases) and all(p.family == "conv2d_depthwise" and p["k"] == p["c"] for p in problems)
    assert {c["dtype"] for c in cases} == {"bfloat16", "float16", "float32"}
