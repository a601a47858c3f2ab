"""The exact float32 conv2d family (conv2d_simt) with no GPU: how a request reaches it, its space
(gemm's on the implicit GEMM, A's vectors of a thread in one k column, no split-K with a fused
tail), the untuned picks, rendering over gemm/simt.cu.j2 (whose plain GEMM source the hooks
leave alone), sampled configs compiled for sm_90 with 128-bit loads, untuned picks with no
local memory, launch arguments and the reference (float64, no tf32 rounding)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kgen.kernels.conv.conv2d_simt import Conv2dSimt
from kgen.kernels.conv.family import route
from kgen.kernels.conv.problem import conv2d_problem, geometry
from kgen.kernels.gemm.problem import gemm_problem
from kgen.problem import Target
from kgen.registry import get_spec
from kgen.render import render

from compiling import compile_cases, compile_failures, per_case, sass_or_skip

SPEC = Conv2dSimt()
# (n, h, w, c, k, r, s, stride, padding, dilation): ResNet layers and odd ones
SHAPES = [
    (2, 56, 56, 64, 64, 3, 3, 1, 1, 1),
    (2, 224, 224, 3, 64, 7, 7, 2, 3, 1),
    (3, 17, 19, 20, 24, 3, 3, 1, 2, 2),
    (5, 1, 1, 72, 40, 1, 1, 1, 0, 1),
    (1, 9, 7, 6, 9, 3, 5, (2, 1), (0, 2), 1),
]


def problem_of(shape, epilogue="none"):
    n, h, w, c, k, r, s, stride, padding, dilation = shape
    return conv2d_problem(n, h, w, c, k, r, s, stride=stride, padding=padding, dilation=dilation, dtype="float32",
                          epilogue=epilogue, family="conv2d_simt")


@pytest.fixture(scope="module")
def target():
    return Target.h200()


def test_an_exact_float32_request_reaches_only_the_cuda_core_families(target):
    assert isinstance(get_spec("conv2d_simt"), Conv2dSimt)
    spec, problem = get_spec("conv2d").request(target, n=2, h=14, w=14, c=64, k=64, r=3, s=3, padding=1,
                                               dtype="float32")
    assert spec.family == problem.family == "conv2d_simt"
    assert [s.family for s, _ in route(target, problem)] == ["conv2d_simt", "conv2d_winograd"]
    _, strided = get_spec("conv2d").request(target, n=2, h=14, w=14, c=64, k=64, r=3, s=3, stride=2, padding=1,
                                            dtype="float32")
    assert [s.family for s, _ in route(target, strided)] == ["conv2d_simt"]
    spec, problem = get_spec("conv2d").request(target, n=2, h=14, w=14, c=64, k=64, r=3, s=3, padding=1,
                                               dtype="float32", precision="tf32")
    assert spec.family != "conv2d_simt" and "conv2d_simt" not in [s.family for s, _ in route(target, problem)]
    assert not SPEC.supports(problem_of(SHAPES[0]).replace(dtype="bfloat16", out_dtype="bfloat16"), target)


@pytest.mark.parametrize("shape", SHAPES)
def test_space_is_the_gemms_with_one_k_column_a_thread(shape, target):
    problem = problem_of(shape)
    view = SPEC.implicit_gemm(problem)
    m, n, k = geometry(problem).gemm
    assert view == gemm_problem(m, n, k, "float32", "NT", align_a=view["align_a"], align_b=view["align_b"])
    assert shape[3] % view["align_a"] == 0                    # a vector of A is channels of one pixel
    space = SPEC.space(problem, target)
    configs = space.sample(40, seed=3)
    assert configs
    for config in configs:
        assert config.name.startswith("conv2d_simt_f32_nt_")
        threads = (config["BM"] // config["TM"]) * (config["BN"] // config["TN"])
        assert threads % (config["BK"] // config["VA"]) == 0
        assert config["VA"] <= view["align_a"]


def test_a_fused_tail_rules_out_split_k_and_the_pick_keeps_its_tile(target):
    plain, fused = problem_of(SHAPES[0]), problem_of(SHAPES[0], "bias_relu")
    assert any(c["SK"] > 1 for c in SPEC.space(plain, target).sample(200, seed=1))
    assert all(c["SK"] == 1 for c in SPEC.space(fused, target).sample(200, seed=1))
    split = SPEC.default_config(plain, target)
    kept = SPEC.default_config(fused, target)
    assert kept["SK"] == 1
    if split["SK"] > 1:                                       # the GEMM's pick, unsplit
        assert (kept["BM"], kept["BN"], kept["TM"], kept["TN"]) == (split["BM"], split["BN"], split["TM"], split["TN"])


def test_the_untuned_pick_is_quick_and_deterministic(target):
    import time

    problem = problem_of(SHAPES[2], "bias_gelu")
    first = SPEC.default_config(problem, target)
    start = time.perf_counter()
    again = SPEC.default_config(problem_of(SHAPES[2], "bias_gelu"), target)
    assert again == first and time.perf_counter() - start < 0.5


def test_the_plain_gemm_renders_none_of_the_hooks(target):
    spec = get_spec("gemm")
    problem = gemm_problem(1000, 777, 333, "float32", "NT")
    space = spec.space(problem, target)
    code = render(spec, problem, space.sample(1, seed=7)[0], target, space).code
    assert "im2col_a" not in code and "fused_tail" not in code and "bias" not in code


def test_rendering_gathers_a_and_fuses_the_tail(target):
    problem = problem_of(SHAPES[2], "bias_gelu")
    config = SPEC.default_config(problem, target)
    code = render(SPEC, problem, config, target).code
    assert "im2col_a.load(A, k0, A_reg);" in code
    assert "r = fused_tail(r, col + j, bias);" in code
    assert "Activation::gelu" in code and "HAS_BIAS = true" in code
    assert "constexpr int CONV_H = 17, CONV_W = 19, CONV_C = 20;" in code


def test_arguments_and_reference_are_exact(target):
    problem = problem_of(SHAPES[2], "bias")
    config = SPEC.default_config(problem, target)
    args = SPEC.args(problem, config, {"x": np.uint64(1 << 20), "w": np.uint64(2 << 20), "y": np.uint64(3 << 20),
                                       "bias": np.uint64(4 << 20)})
    m, n, k = geometry(problem).gemm
    assert [int(a) for a in args[3:10]] == [4 << 20, m, n, k, 20, k, n]
    assert SPEC.tf32_rounding is None and SPEC.tolerance(problem) == 1e-4
    assert get_spec("conv2d").tolerance(problem) == 1e-3           # tf32


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    target = Target.h200()
    count = per_case(17, 40)

    def jobs():
        for i, shape in enumerate((SHAPES[0], SHAPES[1], SHAPES[2])):
            problem = problem_of(shape, ("none", "bias_relu", "bias_gelu")[i])
            space = SPEC.space(problem, target)
            for config in space.sample(count, seed=11 + i):
                yield "float32", problem, config, render(SPEC, problem, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), "conv2d_simt")


def test_sampled_configs_compile_with_wide_loads(compiled):
    """Every sampled config compiles; a sample's SASS has FFMA and, with 4-wide A vectors, 128-bit
    loads. (Some sampled configs spill, as gemm's own do with 1-wide vectors: the register
    estimate is a bound the tuner's measurements refine, not a promise.)"""
    rows = compiled["float32"]
    assert len(rows) >= 50
    assert compile_failures(rows) == []
    for _, config, _, result in rows[:: max(1, len(rows) // 10)]:
        sass = sass_or_skip(result.binary.cubin)
        assert re.search(r"\bFFMA\b", sass), config.name
        if config["VA"] == 4:
            assert re.search(r"\bLDG\.E\.128\b", sass), config.name


@pytest.mark.parametrize("shape", SHAPES)
def test_the_untuned_picks_keep_to_registers(shape, target):
    from kgen.compile import compile_source

    for epilogue in ("none", "bias_relu"):
        problem = problem_of(shape, epilogue)
        config = SPEC.default_config(problem, target)
        sass = sass_or_skip(compile_source(render(SPEC, problem, config, target)).binary.cubin)
        assert not re.search(r"\b(LDL|STL)\b", sass), f"{config.name} spills to local memory"


def test_export_replays_the_launch_and_zeroes_what_split_k_adds_into(target):
    from kgen.export import launch_recipe

    problem = problem_of(SHAPES[0])
    space = SPEC.space(problem, target)
    split = next(c for c in space.sample(200, seed=2) if c["SK"] > 1)
    whole = next(c for c in space.sample(200, seed=2) if c["SK"] == 1)
    m, _, _ = geometry(problem).gemm
    recipe = launch_recipe(SPEC, problem, split)
    assert [a.get("pointer") for a in recipe["args"][:3]] == ["x", "w", "y"]
    assert recipe["zero"] == {"y": 4 * m * problem["k"]} and recipe["grid"][1] == split["SK"]
    assert "zero" not in launch_recipe(SPEC, problem, whole)
