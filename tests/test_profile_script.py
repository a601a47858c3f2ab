"""scripts/profile_gemm.py: what each argument names, resolved with no GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kgen.problem import Target  # noqa: E402
from scripts.profile_gemm import resolve  # noqa: E402

WGRAD = ("conv2d_wgmma|c=64|dh=1|dtype=bfloat16|dw=1|epilogue=none|h=56|k=64|n=64|out_dtype=bfloat16|ph=1|pw=1|"
         "r=56|s=56|sh=1|sw=1|w=56")


def test_a_gemm_shape_with_a_config_or_a_family_and_any_family_by_its_problem_key():
    target = Target.h200()
    spec, problem, _, config = resolve("float16:NN:8192x8192x16:gemm_wgmma_f16_nn_128x256x64_s4_c2_g1_ts", target)
    assert (spec.family, problem["k"], config.name) == ("gemm_wgmma", 16, "gemm_wgmma_f16_nn_128x256x64_s4_c2_g1_ts")
    spec, problem, _, config = resolve("bfloat16:TT:2x3834x1621:gemm_skinny", target)
    assert spec.family == "gemm_skinny" and config == spec.default_config(problem, target)
    spec, problem, _, config = resolve(f"{WGRAD}@conv2d_wgmma", target)
    assert problem.key == WGRAD and config == spec.default_config(problem, target)
    assert resolve(f"{WGRAD}@{config.name}", target)[3] == config


def test_a_config_outside_the_space_stops_with_its_name():
    with pytest.raises(SystemExit, match="not a valid config"):
        resolve("float16:NN:64x64x64:gemm_wgmma_f16_nn_256x256x64_s4_c2_g1_ts", Target.h200())
