"""The Winograd F(2x2, 3x3) conv2d family (conv2d_winograd) with no GPU: which requests reach it
(exact float32, 3x3, stride 1, dilation 1) beside the implicit GEMM, and a tune's rivals; its
space (threads, a thread's sums, shared memory, the epilogue's passes); the picks; rendering
(copy width from C, the fused tail); launch geometry and arguments; sampled configs compiled
for sm_90 (FFMA, cp.async copies) and picks with no local memory."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from kgen.kernels.conv.conv2d_winograd import MAX_SUMS, Conv2dWinograd, epilogue_width, smem_floats, threads, tiles
from kgen.kernels.conv.family import route
from kgen.kernels.conv.problem import conv2d_problem
from kgen.problem import Target
from kgen.registry import get_spec
from kgen.render import render

from compiling import compile_cases, compile_failures, per_case, sass_or_skip

SPEC = Conv2dWinograd()
# (n, h, w, c, k, padding)
SHAPES = [
    (2, 56, 56, 64, 64, 1),
    (3, 17, 19, 20, 24, 2),
    (1, 9, 7, 6, 9, 0),
    (5, 1, 1, 72, 40, 1),
    (2, 14, 13, 129, 136, 1),
]


def problem_of(shape, epilogue="none"):
    n, h, w, c, k, padding = shape
    return conv2d_problem(n, h, w, c, k, 3, 3, padding=padding, dtype="float32", epilogue=epilogue,
                          family="conv2d_winograd")


@pytest.fixture(scope="module")
def target():
    return Target.h200()


def test_only_exact_3x3_stride_1_requests_reach_it_beside_the_implicit_gemm(target):
    conv = get_spec("conv2d")
    spec, problem = conv.request(target, n=2, h=14, w=14, c=64, k=64, r=3, s=3, padding=1, dtype="float32")
    assert spec.family == "conv2d_simt"                           # the ranking's first; a race or a tune decides
    assert [s.family for s, _ in route(target, problem)] == ["conv2d_simt", "conv2d_winograd"]
    assert [s.family for s, p in conv.rivals(target, n=2, h=14, w=14, c=64, k=64, r=3, s=3, padding=1,
                                             dtype="float32")] == ["conv2d_winograd"]
    for other in (dict(stride=2), dict(dilation=2), dict(r=5, s=5), dict(r=1, s=1), dict(precision="tf32"),
                  dict(dtype="bfloat16")):
        args = dict(n=2, h=14, w=14, c=64, k=64, r=3, s=3, padding=1, dtype="float32") | other
        _, p = conv.request(target, **args)
        assert "conv2d_winograd" not in [s.family for s, _ in route(target, p)], other
    assert not SPEC.supports(problem_of(SHAPES[0]).replace(dtype="bfloat16", out_dtype="bfloat16"), target)
    assert not SPEC.supports(problem_of(SHAPES[0]), dataclasses.replace(Target.h200(), cc=(7, 5)))


@pytest.mark.parametrize("shape", SHAPES)
def test_space_keeps_threads_sums_and_shared_memory_within_bounds(shape, target):
    problem = problem_of(shape)
    configs = SPEC.space(problem, target).sample(200, seed=5)
    assert configs
    for c in configs:
        assert 64 <= threads(c) <= 512 and c["XG"] * c["TM"] * c["TN"] <= MAX_SUMS
        assert threads(c) * (c["XG"] * c["TM"] * c["TN"] + 40) <= 65536      # no spills under the launch bound
        assert 4 * smem_floats(c) + 24 * c["BM"] <= target.smem_per_block_optin
        ew = epilogue_width(c)
        assert c["BN"] % ew == 0 and ew % c["TN"] == 0 and 16 * c["BM"] * ew <= smem_floats(c)
        assert re.fullmatch(r"conv2d_winograd_m\d+_n\d+_c\d+_x\d+_t\d+x\d+(_il)?", c.name)
        assert c.name.endswith("_il") == bool(c["IL"]) and (not c["IL"] or max(c["TM"], c["TN"]) >= 8)


def test_picks_are_valid_deterministic_and_cut_to_small_problems(target):
    big, small = problem_of(SHAPES[0]), problem_of(SHAPES[3])
    picks = SPEC.model_picks(big, target, 4)
    assert len(picks) == 4 and picks == SPEC.model_picks(problem_of(SHAPES[0]), target, 4)
    assert SPEC.default_config(big, target) == picks[0]
    assert SPEC.model_choice(big, target) is None                 # no cost model: a race or a tune measures it
    first = SPEC.default_config(small, target)                    # 5 tiles, 40 channels
    assert first["BM"] <= 8 and first["BN"] <= 64


def test_rendering_takes_the_copy_width_from_c_and_fuses_the_tail(target):
    for shape, width in ((SHAPES[1], 4), (SHAPES[2], 2), (SHAPES[4], 1)):
        problem = problem_of(shape, "bias_gelu")
        code = render(SPEC, problem, SPEC.default_config(problem, target), target).code
        assert f"constexpr int VC = {width}," in code
        assert "Activation::gelu" in code and "HAS_BIAS = true" in code
    plain = problem_of(SHAPES[0])
    code = render(SPEC, plain, SPEC.default_config(plain, target), target).code
    assert "Activation::none" in code and "HAS_BIAS = false" in code
    assert "constexpr int H = 56, W = 56, C = 64, K = 64;" in code


def test_interleaved_thread_tiles_render_only_where_asked_and_keep_to_registers(target):
    """IL spreads a thread's rows and columns over the block in chunks of 4 (conflict-free vector
    loads of V and U); without it the kernel is the contiguous one, byte for byte."""
    from kgen.compile import compile_source

    problem = problem_of(SHAPES[0])
    space = SPEC.space(problem, target)
    base = dict(BM=32, BN=64, BC=8, XG=2, TM=8, TN=8)
    plain, spread = (render(SPEC, problem, space.make(dict(base, IL=il)), target, space).code for il in (0, 1))
    assert "load_chunk" in spread and "SLN = GN * CWN" in spread
    assert "load_chunk" not in plain and "CWN" not in plain
    assert not space.is_valid(dict(base, TM=4, TN=4, XG=8, IL=1))          # one chunk a side: nothing to spread
    sass = sass_or_skip(compile_source(render(SPEC, problem, space.make(dict(base, IL=1)), target, space)).binary.cubin)
    assert not re.search(r"\b(LDL|STL)\b", sass) and re.search(r"\bLDS\.128\b", sass)


def test_launch_covers_every_tile_and_channel(target):
    problem = problem_of(SHAPES[1], "bias")
    config = SPEC.default_config(problem, target)
    launch = SPEC.launch(problem, config)
    assert tiles(problem) == 3 * 10 * 11                          # 19 x 21 outputs in 2x2 tiles
    assert launch.grid == (-(-tiles(problem) // config["BM"]), -(-24 // config["BN"]), 1)
    assert launch.block == (threads(config), 1, 1) and launch.shared_mem == 4 * smem_floats(config)
    args = SPEC.args(problem, config, {"x": np.uint64(1), "w": np.uint64(2), "y": np.uint64(3), "bias": np.uint64(4)})
    assert [int(a) for a in args] == [1, 2, 3, 4, 3]
    assert int(SPEC.args(problem_of(SHAPES[1]), config, {"x": 1, "w": 2, "y": 3, "bias": None})[3]) == 0


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    target = Target.h200()
    count = per_case(17, 20)

    def jobs():
        for i, shape in enumerate(SHAPES[1:4]):
            problem = problem_of(shape, ("none", "bias_relu", "bias_gelu")[i])
            space = SPEC.space(problem, target)
            for config in space.sample(count, seed=3 + i):
                yield "float32", problem, config, render(SPEC, problem, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), "conv2d_winograd")


def test_sampled_configs_compile_to_ffma_and_async_copies(compiled):
    rows = compiled["float32"]
    assert len(rows) >= 50
    assert compile_failures(rows) == []
    for _, config, _, result in rows[:: max(1, len(rows) // 8)]:
        sass = sass_or_skip(result.binary.cubin)
        assert re.search(r"\bFFMA\b", sass) and re.search(r"\bLDGSTS\b", sass), config.name


@pytest.mark.parametrize("shape", SHAPES[:3])
def test_the_picks_keep_to_registers(shape, target):
    from kgen.compile import compile_source

    problem = problem_of(shape, "bias_relu")
    for config in SPEC.model_picks(problem, target, 3):
        sass = sass_or_skip(compile_source(render(SPEC, problem, config, target)).binary.cubin)
        assert not re.search(r"\b(LDL|STL)\b", sass), f"{config.name} spills to local memory"


def test_export_replays_the_launch_with_nothing_zeroed(target):
    from kgen.export import launch_recipe

    problem = problem_of(SHAPES[1], "bias_relu")
    config = SPEC.default_config(problem, target)
    recipe = launch_recipe(SPEC, problem, config)
    assert [a.get("pointer") for a in recipe["args"][:4]] == ["x", "w", "y", "bias"]
    assert tuple(recipe["grid"]) == SPEC.launch(problem, config).grid and "zero" not in recipe
    assert recipe["shared_mem"] == SPEC.launch(problem, config).shared_mem
