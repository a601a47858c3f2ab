"""Depthwise conv2d on the GPU: the default and sampled configs of odd shapes (C not a multiple of
8, a 1x1 image, 7x7 at stride 2 with dilation 2, rectangular windows) in every dtype against a
float64 reference (NaN-poisoned outputs), an input whose pointer is not aligned for the vectors,
and ``kgen.conv2d(..., groups=C)`` on channels-last PyTorch tensors against PyTorch's."""

from __future__ import annotations

import pytest

from kgen.kernels.conv.depthwise import DepthwiseConv2d, depthwise_problem

from memory_gpu import check_config, check_sampled, target

pytestmark = pytest.mark.gpu

SPEC = DepthwiseConv2d()
CASES = [   # n, h, w, c, r, s, keywords
    (8, 56, 56, 144, 3, 3, dict(padding=1)),
    (2, 17, 9, 35, 7, 7, dict(stride=2, padding=3, dilation=2, dtype="float16", epilogue="bias_relu")),
    (4, 14, 14, 240, 5, 5, dict(stride=2, padding=2, epilogue="gelu")),
    (3, 1, 1, 16, 3, 3, dict(padding=1, dtype="float32", epilogue="bias")),
    (2, 28, 30, 96, 3, 5, dict(stride=(1, 2), padding=(1, 2), dtype="float32")),
    (5, 9, 11, 40, 1, 1, dict(dtype="float16", out_dtype="float32")),
]


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_sampled_configs_are_correct(case):
    n, h, w, c, r, s, kw = case
    check_sampled(SPEC, depthwise_problem(n, h, w, c, r, s, **kw), 4, seed=c)


def test_vectors_not_aligned_are_read_an_element_at_a_time():
    import cupy

    p = depthwise_problem(2, 10, 10, 64, 3, 3, padding=1, dtype="float16")
    config = SPEC.default_config(p, target())
    assert config["VEC"] == 8
    operands = SPEC.inputs(p, seed=3)
    shifted = cupy.empty(operands["x"].size + 1, dtype=operands["x"].dtype)[1:].reshape(operands["x"].shape)
    shifted[...] = operands["x"]
    operands["x"] = shifted                                         # 2 bytes past a 16-byte boundary
    check, _ = check_config(SPEC, p, config, operands=operands)
    assert check.ok, check.detail


def test_kgen_conv2d_groups_c_on_torch_tensors():
    torch = pytest.importorskip("torch")
    import kgen

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.rand((4, 96, 30, 30), device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
    x = x.to(memory_format=torch.channels_last)
    w = ((torch.rand((96, 1, 3, 3), device="cuda", generator=gen) * 2 - 1) / 9).to(torch.bfloat16)
    bias = (torch.rand((96,), device="cuda", generator=gen) - 0.5).to(torch.bfloat16)
    with torch.no_grad():
        y = kgen.conv2d(x, w, bias, stride=2, padding=1, activation="relu", groups=96)
    want = torch.relu(torch.nn.functional.conv2d(x.double(), w.double(), bias.double(), stride=2, padding=1,
                                                 groups=96))
    assert y.shape == want.shape and y.dtype == torch.bfloat16 and y.is_contiguous(memory_format=torch.channels_last)
    assert float((y.double() - want).abs().max() / want.abs().max()) < 1e-2
