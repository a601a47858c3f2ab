"""conv2d_wgrad_wgmma on the GPU: the model's pick, split-K and sampled configs on odd shapes
(pixels not a multiple of the k-block, K not of the tile, a 1x1 image, stride 2, dilation and
asymmetric pairs) against the float64 weight gradient, NaN-poisoned outputs; the eager call on
CuPy arrays (bf16 and a float32 dW) against the same."""

from __future__ import annotations

import pytest

from kgen.kernels.conv.conv2d_wgrad_wgmma import Conv2dWgradWgmma, wgrad_problem

from memory_gpu import check_config, target

pytestmark = pytest.mark.gpu

SPEC = Conv2dWgradWgmma()
SHAPES = [
    (3, 17, 19, 64, 72, 3, 3, 1, 1, 1),                      # 969 pixels, K = 72: partial tiles both ways
    (2, 28, 28, 128, 128, 3, 3, 2, 1, 1),                    # stride 2
    (2, 20, 23, 64, 64, 3, 5, (1, 2), (2, 1), (2, 1)),       # every pair asymmetric
    (7, 1, 1, 128, 256, 1, 1, 1, 0, 1),                      # 1x1 image: 7 pixels in all
    (4, 14, 14, 256, 512, 1, 1, 2, 0, 1),                    # 1x1 stride 2
    (16, 14, 14, 64, 64, 3, 3, 1, 1, 1),                     # a long reduction for few tiles: split-K
]


def _problem(shape, dtype="bfloat16", out_dtype=None):
    n, h, w, c, k, r, s, stride, padding, dilation = shape
    return wgrad_problem(n, h, w, c, k, r, s, stride=stride, padding=padding, dilation=dilation, dtype=dtype,
                         out_dtype=out_dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("index", range(len(SHAPES)))
def test_model_split_and_sampled_configs_are_correct(dtype, index):
    problem = _problem(SHAPES[index], dtype)
    assert SPEC.supports(problem, target())
    space = SPEC.space(problem, target())
    configs = SPEC.model_picks(problem, target(), 2) + space.sample(3, seed=index)
    split = [c for c in space.sample(200, seed=7) if c["SPLITK"] > 1]
    configs += split[:2]
    for seed, config in enumerate(configs):
        check, _ = check_config(SPEC, problem, config, seed=seed)
        assert check.ok, f"{config.name} on {problem.key}: {check.detail}"


def test_a_float32_weight_gradient_of_bf16_inputs():
    problem = _problem(SHAPES[1], out_dtype="float32")
    check, _ = check_config(SPEC, problem, SPEC.default_config(problem, target()))
    assert check.ok, check.detail


def test_the_eager_call_on_cupy_arrays():
    import cupy

    import kgen

    problem = _problem(SHAPES[0], "float16")
    operands = SPEC.inputs(problem, seed=3)
    want = SPEC.reference(problem, operands)["dw"]
    got = kgen.conv2d_weight_gradient(operands["x"], operands["dy"], (3, 3), stride=1, padding=1)
    assert got.shape == (72, 3, 3, 64) and got.dtype == cupy.float16
    err = float(cupy.abs(got.astype(cupy.float64) - want).max() / cupy.abs(want).max())
    assert err < 1e-2, err
    out = cupy.full((72, 3, 3, 64), cupy.nan, dtype=cupy.float32)
    again = kgen.conv2d_weight_gradient(operands["x"], operands["dy"], 3, padding=1, out=out, out_dtype="float32")
    assert again is out and float(cupy.abs(out - want).max() / cupy.abs(want).max()) < 1e-3
    with pytest.raises(kgen.ShapeError):
        kgen.conv2d_weight_gradient(operands["x"], operands["dy"], (3, 3), stride=2, padding=1)
