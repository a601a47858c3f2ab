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


@pytest.mark.parametrize("case", [
    dict(stride=1, padding=1, dilation=1, activation=None, r=3, dtype="float32"),        # dx by kgen
    dict(stride=1, padding=4, dilation=2, activation="gelu", r=5, dtype="float32"),      # dx by kgen, dilated
    dict(stride=2, padding=1, dilation=1, activation="relu", r=3, dtype="float32"),      # dx by PyTorch
    dict(stride=1, padding=2, dilation=1, activation="relu", r=5, dtype="bfloat16"),
], ids=["s1", "s1-dil2-gelu", "s2-relu", "bf16"])
def test_depthwise_under_autograd_matches_pytorch_gradients(case):
    """``kgen.conv2d(..., groups=C)`` where autograd records it (the custom operator
    ``kgen::conv2d_depthwise``): output, dx, dW and dbias against PyTorch's in float64."""
    torch = pytest.importorskip("torch")
    import kgen
    import kgen.torch  # noqa: F401  (registers the operators)

    gen = torch.Generator(device="cuda").manual_seed(1)
    dt = getattr(torch, case["dtype"])
    c, r = 40, case["r"]
    x0 = (torch.rand((3, c, 13, 11), device="cuda", generator=gen) * 2 - 1).to(dt)
    w0 = ((torch.rand((c, 1, r, r), device="cuda", generator=gen) * 2 - 1) / r).to(dt)
    b0 = (torch.rand((c,), device="cuda", generator=gen) - 0.5).to(dt)
    kw = dict(stride=case["stride"], padding=case["padding"], dilation=case["dilation"])
    x = x0.to(memory_format=torch.channels_last).requires_grad_()
    w, b = w0.clone().requires_grad_(), b0.clone().requires_grad_()
    y = kgen.conv2d(x, w, b, activation=case["activation"], groups=c, **kw)
    dy = torch.rand(y.shape, device="cuda", generator=gen).to(dt)
    y.backward(dy)
    xd, wd, bd = (t.double().requires_grad_() for t in (x0, w0, b0))
    z = torch.nn.functional.conv2d(xd, wd, bd, groups=c, **kw)
    z = {"relu": torch.relu, "gelu": torch.nn.functional.gelu}.get(case["activation"], lambda t: t)(z)
    z.backward(dy.double())
    tol = 1e-4 if case["dtype"] == "float32" else 3e-2
    for name, got, want in [("y", y, z), ("dx", x.grad, xd.grad), ("dw", w.grad, wd.grad), ("db", b.grad, bd.grad)]:
        err = float((got.double() - want).abs().max() / want.abs().max())
        assert err < tol, (name, err)
