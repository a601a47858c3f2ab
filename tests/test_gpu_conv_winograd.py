"""Winograd F(2x2, 3x3) conv2d in exact float32 (conv2d_winograd) on the GPU: model picks and
sampled configs on odd shapes (odd output sizes: tiles cut by the edge; C not a multiple of 4:
narrower copies; C over several steps; K not a multiple of the block's channels; padding 0
to 2; a 1x1 image) against the float64 convolution at float32's tolerance, NaN-poisoned
outputs; ``kgen.conv2d`` on a 3x3 stride-1 float32 layer (both exact families raced) is right."""

from __future__ import annotations

import pytest

from kgen.kernels.conv.conv2d_winograd import Conv2dWinograd
from kgen.kernels.conv.problem import conv2d_problem

from memory_gpu import check_config, target

pytestmark = pytest.mark.gpu

SPEC = Conv2dWinograd()
ODD = [
    (3, 17, 19, 20, 24, 2),          # P, Q odd (19 x 21), C = 20 (4-wide copies), K = 24
    (2, 28, 28, 64, 64, 1),          # a ResNet layer's shape at a small batch
    (1, 9, 7, 6, 9, 0),              # no padding, C = 6 (2-wide copies), K = 9
    (5, 1, 1, 72, 40, 1),            # a 1x1 image: one output, eight of the patch's nine taps padding
    (2, 14, 13, 129, 136, 1),        # C = 129 (1-wide copies, many steps), K over several blocks
]
EPILOGUES = ("bias_relu", "none", "bias_gelu", "relu", "bias")


def _problem(shape, epilogue="none"):
    n, h, w, c, k, padding = shape
    return conv2d_problem(n, h, w, c, k, 3, 3, padding=padding, dtype="float32", epilogue=epilogue,
                          family="conv2d_winograd")


@pytest.mark.parametrize("index", range(len(ODD)))
def test_picks_and_sampled_configs_are_exact(index):
    problem = _problem(ODD[index], EPILOGUES[index])
    space = SPEC.space(problem, target())
    picks = SPEC.model_picks(problem, target(), 3)
    flipped = [dict(c.as_dict(), IL=1 - c["IL"]) for c in picks]         # each pick's other thread layout
    configs = picks + [space.make(v) for v in flipped if space.is_valid(v)] + space.sample(5, seed=index)
    for seed, config in enumerate(dict.fromkeys(configs)):
        check, _ = check_config(SPEC, problem, config, seed=seed)
        assert check.ok, f"{config.name} on {problem.key}: {check.detail}"


def test_kgen_conv2d_on_a_3x3_stride_1_float32_layer_is_exact():
    import cupy

    import kgen

    rng = cupy.random.default_rng(11)
    x = rng.random((4, 14, 14, 32), dtype=cupy.float32) - 0.5
    w = rng.random((48, 3, 3, 32), dtype=cupy.float32) - 0.5
    bias = rng.random((48,), dtype=cupy.float32) - 0.5
    y = kgen.conv2d(x, w, bias, padding=1, activation="relu")
    problem = _problem((4, 14, 14, 32, 48, 1), "bias_relu")
    want = SPEC.reference(problem, {"x": x, "w": w, "bias": bias})["y"]
    err = float(cupy.abs(y.astype(cupy.float64) - want).max() / cupy.abs(want).max())
    assert y.shape == (4, 14, 14, 48) and err < 1e-5, err
