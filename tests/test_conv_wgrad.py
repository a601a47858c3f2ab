"""The conv2d weight-gradient family with no GPU: its problems and what it supports, the space
(gemm_wgmma's on the weight gradient's GEMM, layout TN), the front door's fields, arguments (dy's
tiled map, the image's im2col map of 64 pixels x 64 channels), the export recipe, sampled
configs of both 16-bit dtypes compiled for sm_90a with HGMMA and im2col loads in their SASS, and
the eager call's checks before any launch."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kgen.errors import DtypeError, InputError, ShapeError
from kgen.kernels.conv.conv2d_wgrad_wgmma import Conv2dWgradWgmma, wgrad_gemm_view, wgrad_problem
from kgen.kernels.conv.problem import geometry
from kgen.problem import Target
from kgen.registry import get_spec
from kgen.render import render

from compiling import compile_cases, compile_failures, sass_or_skip
from fakes import BASE, FakeArray

SPEC = Conv2dWgradWgmma()
# (n, h, w, c, k, r, s, stride, padding, dilation): ResNet layers and odd ones
SHAPES = [
    (64, 56, 56, 64, 64, 3, 3, 1, 1, 1),
    (64, 56, 56, 128, 128, 3, 3, 2, 1, 1),
    (3, 17, 19, 64, 72, 3, 3, 1, 1, 1),
    (2, 20, 23, 64, 64, 3, 5, (1, 2), (2, 1), (2, 1)),
    (7, 1, 1, 128, 256, 1, 1, 1, 0, 1),
    (4, 14, 14, 256, 512, 1, 1, 2, 0, 1),
]


@pytest.fixture(scope="module")
def target():
    return Target.h200()


def problem_of(shape, dtype="bfloat16", **kw):
    n, h, w, c, k, r, s, stride, padding, dilation = shape
    return wgrad_problem(n, h, w, c, k, r, s, stride=stride, padding=padding, dilation=dilation, dtype=dtype, **kw)


def test_the_gemm_reduces_over_the_output_pixels():
    problem = problem_of(SHAPES[1])
    view = wgrad_gemm_view(problem)
    assert (view["m"], view["n"], view["k"], view["layout"]) == (128, 9 * 128, 64 * 28 * 28, "TN")
    assert problem.family == "conv2d_wgrad_wgmma" and problem["out_dtype"] == "bfloat16"
    assert problem_of(SHAPES[0], out_dtype="float32")["out_dtype"] == "float32"
    assert SPEC.flops(problem) == 2.0 * 128 * 9 * 128 * 64 * 28 * 28


def test_supports_16_bit_channels_in_whole_chunks_on_hopper(target):
    assert all(SPEC.supports(problem_of(s), target) for s in SHAPES)
    assert SPEC.supports(problem_of(SHAPES[0], "float16"), target)
    assert not SPEC.supports(problem_of((2, 8, 8, 96, 64, 3, 3, 1, 1, 1)), target)        # C not a multiple of 64
    assert not SPEC.supports(problem_of((2, 8, 8, 64, 68, 3, 3, 1, 1, 1)), target)        # dy's rows: 136 bytes
    assert not SPEC.supports(problem_of(SHAPES[0], "float32"), target)                     # tf32 B is K-major only
    assert not SPEC.supports(problem_of((2, 8, 8, 64, 64, 3, 3, 9, 1, 1)), target)        # a stride TMA cannot walk
    ampere = Target("A100", (8, 0), 108, 48 * 1024, 163 * 1024, 164 * 1024, 65536)
    assert not SPEC.supports(problem_of(SHAPES[0]), ampere)


def test_request_from_command_line_fields(target):
    from kgen.fields import parse_args

    spec = get_spec("conv2d_wgrad_wgmma")
    values = parse_args(spec.fields(), ["--n", "8", "--h", "14", "--w", "14", "--c", "64", "--k", "128",
                                        "--padding", "1", "--stride", "2"], "conv2d_wgrad_wgmma")
    chosen, problem = spec.request(target, **values)
    assert chosen is spec and problem == problem_of((8, 14, 14, 64, 128, 3, 3, 2, 1, 1))
    with pytest.raises(InputError):
        spec.request(target, **dict(values, epilogue="relu"))


@pytest.mark.parametrize("shape", SHAPES)
def test_space_and_picks_are_the_gemms(target, shape):
    problem = problem_of(shape)
    space = SPEC.space(problem, target)
    gemm = get_spec("gemm_wgmma").space(wgrad_gemm_view(problem), target)
    for config in space.sample(20, seed=2):
        assert config.name.startswith("conv2d_wgrad_wgmma_bf16_tn_") and gemm.is_valid(config.as_dict())
    picks = SPEC.model_picks(problem, target, 3)
    assert picks and all(space.is_valid(c.as_dict()) for c in picks) and len(set(picks)) == len(picks)
    assert SPEC.default_config(problem, target) == picks[0]
    assert SPEC.launch(problem, picks[0]) == get_spec("gemm_wgmma").launch(wgrad_gemm_view(problem), picks[0])


def test_long_reductions_into_few_tiles_are_split(target):
    """The 56x56 layer's gradient is 9 tiles of 64 x 64 over 200,704 pixels: the pick splits k."""
    pick = SPEC.default_config(problem_of(SHAPES[0]), target)
    assert pick["SPLITK"] > 1, pick.name


def test_arguments_carry_dys_map_and_the_im2col_map(target, monkeypatch):
    from kgen import tma

    problem = problem_of(SHAPES[3])
    config = SPEC.default_config(problem, target)
    seen = {}
    monkeypatch.setattr(tma, "encode_im2col", lambda *a: seen.setdefault("im2col", a) and "MAP_X")
    monkeypatch.setattr(tma, "encode_tiled", lambda *a: seen.setdefault("tiled", a) and "MAP_DY")
    args = SPEC.args(problem, config, {"x": np.uint64(BASE), "dy": np.uint64(BASE + 4096),
                                       "dw": np.uint64(BASE + 8192)})
    view = wgrad_gemm_view(problem)
    m, n, k = view["m"], view["n"], view["k"]
    assert args[:2] == ["MAP_DY", "MAP_X"]
    assert [int(a) for a in args[3:13]] == [BASE + 4096, BASE, 64, 64, BASE + 8192, 0, m, n, k, n]
    assert seen["tiled"][1:5] == ("bfloat16", (64, k), 128, (64, 64))
    assert seen["im2col"] == (BASE, "bfloat16", (2, 20, 23, 64), (3, 5), (1, 2), (2, 1), (2, 1), 64, 64, 128)


def test_export_recipe_names_the_operands(target):
    problem = problem_of(SHAPES[0])
    config = SPEC.default_config(problem, target)
    recipe = SPEC.arg_recipe(problem, config)
    assert recipe[0]["map"]["array"] == "dy" and recipe[1]["im2col"]["array"] == "x"
    assert {"pointer": "dw"} in recipe and recipe[1]["im2col"]["pixels"] == 64
    kinds = [next(iter(item)) for item in recipe]
    assert kinds[-2:] == (["workspace", "workspace"] if config["SPLITK"] > 1 else ["value", "value"])


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    target = Target.h200()

    def jobs():
        for dtype in ("bfloat16", "float16"):
            for i, shape in enumerate(SHAPES[1:]):
                problem = problem_of(shape, dtype, out_dtype="float32" if i == 2 else None)
                space = SPEC.space(problem, target)
                for config in space.sample(11, seed=5 + i):
                    yield dtype, problem, config, render(SPEC, problem, config, target, space)

    return compile_cases(tmp_path_factory, jobs(), "conv2d_wgrad_wgmma")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sampled_configs_compile_with_hgmma_and_im2col_loads(compiled, dtype):
    rows = compiled[dtype]
    assert len(rows) >= 50
    assert compile_failures(rows) == []
    for problem, config, source, result in rows[:: max(1, len(rows) // 6)]:
        assert source.arch == "sm_90a"
        sass = sass_or_skip(result.binary.cubin)
        assert re.search(r"\bHGMMA\.", sass), config.name
        assert re.search(r"UTMALDG\.4D\.IM2COL", sass), config.name
        assert not re.search(r"\b(LDL|STL)\b", sass), f"{config.name} spills to local memory"


@pytest.mark.parametrize("kw, error", [
    (dict(x=FakeArray((2, 8, 8, 64), "float16"), dy=FakeArray((2, 8, 8, 64), "float32")), DtypeError),
    (dict(x=FakeArray((2, 8, 8, 64), "float16"), dy=FakeArray((2, 8, 8), "float16")), ShapeError),
    (dict(x=FakeArray((2, 8, 8, 64), "float16"), dy=FakeArray((2, 7, 8, 64), "float16")), ShapeError),
    (dict(x=FakeArray((2, 8, 8, 64), "float16"), dy=FakeArray((2, 8, 8, 64), "float16"), out_dtype="bfloat16"),
     DtypeError),
])
def test_call_checks_before_any_launch(kw, error):
    import kgen

    x, dy = kw.pop("x"), kw.pop("dy")
    with pytest.raises(error):
        kgen.conv2d_weight_gradient(x, dy, (3, 3), padding=1, **kw)
