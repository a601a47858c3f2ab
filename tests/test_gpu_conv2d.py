"""conv2d on the GPU: sampled configs of every dtype on odd shapes (C not a multiple of 8, a 1x1
image, 7x7 stride 2, dilation 2, rectangular strides and windows) against the float64
convolution, NaN-poisoned outputs; ``kgen.conv2d`` on channels-last PyTorch tensors (against
PyTorch's convolution in float64, on the caller's stream), on CuPy arrays with ``out=``, and
its refusal of NCHW memory."""

from __future__ import annotations

import pytest

from kgen.kernels.conv.conv2d import Conv2d
from kgen.kernels.conv.conv2d_wgmma import Conv2dWgmma
from kgen.kernels.conv.problem import conv2d_problem

from memory_gpu import check_config, target

pytestmark = pytest.mark.gpu

SPEC = Conv2d()
WGMMA = Conv2dWgmma()
ODD = [
    (3, 17, 19, 20, 24, 3, 3, 1, 2, 2),          # dilation 2, C = 20
    (2, 45, 45, 3, 64, 7, 7, 2, 3, 1),           # the stem: C = 3, 7x7 stride 2
    (5, 1, 1, 72, 40, 1, 1, 1, 0, 1),            # 1x1 image
    (1, 9, 7, 12, 9, 3, 5, (2, 1), (0, 2), 1),   # rectangular window and strides, K = 9
    (2, 14, 14, 256, 136, 3, 3, 2, 1, 1),        # C and K multiples of 8, stride 2
]
EPILOGUES = ("none", "bias_relu", "bias_gelu", "relu", "bias")


# shapes the wgmma family runs (C a multiple of 64), as odd as its im2col loads allow
TMA_SHAPES = [
    (3, 17, 19, 64, 72, 3, 3, 1, 1, 1),                      # M = 969: the last tile runs past the batch
    (2, 28, 28, 128, 128, 3, 3, 2, 1, 1),                    # stride 2
    (2, 20, 23, 64, 64, 3, 5, (1, 2), (2, 1), (2, 1)),       # every pair asymmetric
    (7, 1, 1, 128, 256, 1, 1, 1, 0, 1),                      # 1x1 image
    (1, 14, 14, 256, 512, 1, 1, 2, 0, 1),                    # 1x1 stride 2
]


def _problem(shape, dtype, epilogue="none", out_dtype=None, family="conv2d"):
    n, h, w, c, k, r, s, stride, padding, dilation = shape
    return conv2d_problem(n, h, w, c, k, r, s, stride=stride, padding=padding, dilation=dilation, dtype=dtype,
                          out_dtype=out_dtype, epilogue=epilogue, family=family)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("index", range(len(ODD)))
def test_sampled_configs_are_correct(dtype, index):
    problem = _problem(ODD[index], dtype, EPILOGUES[index])
    space = SPEC.space(problem, target())
    configs = [SPEC.default_config(problem, target())] + space.sample(3, seed=index)
    for seed, config in enumerate(configs):
        check, _ = check_config(SPEC, problem, config, seed=seed)
        assert check.ok, f"{config.name} on {problem.key}: {check.detail}"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("index", range(len(TMA_SHAPES)))
def test_wgmma_im2col_configs_are_correct(dtype, index):
    problem = _problem(TMA_SHAPES[index], dtype, EPILOGUES[index], family="conv2d_wgmma")
    assert WGMMA.supports(problem, target())
    space = WGMMA.space(problem, target())
    configs = [WGMMA.default_config(problem, target())] + space.sample(3, seed=index)
    for seed, config in enumerate(configs):
        check, _ = check_config(WGMMA, problem, config, seed=seed)
        assert check.ok, f"{config.name} on {problem.key}: {check.detail}"


def test_float32_output_of_bf16_inputs():
    problem = _problem(ODD[0], "bfloat16", "bias", out_dtype="float32")
    check, _ = check_config(SPEC, problem, SPEC.default_config(problem, target()))
    assert check.ok, check.detail


def _torch_operands(torch, shape, dtype, seed=0):
    n, h, w, c, k, r, s = shape[:7]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.rand((n, c, h, w), device="cuda", generator=gen) * 2 - 1).to(dtype)
    wt = (torch.rand((k, c, r, s), device="cuda", generator=gen) * 2 - 1).to(dtype)
    bias = (torch.rand((k,), device="cuda", generator=gen) - 0.5).to(dtype)
    cl = torch.channels_last
    return x.to(memory_format=cl), wt.to(memory_format=cl), bias


def test_torch_channels_last_on_the_callers_stream():
    torch = pytest.importorskip("torch")
    import kgen

    shape = ODD[4]
    x, w, bias = _torch_operands(torch, shape, torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = kgen.conv2d(x, w, bias, stride=2, padding=1, activation="relu")
        again = kgen.conv2d(x, w, bias, stride=2, padding=1, activation="relu", out=torch.empty_like(y))
    side.synchronize()
    want = torch.relu(torch.nn.functional.conv2d(x.double(), w.double(), bias.double(), 2, 1))
    assert y.shape == want.shape and y.dtype == torch.bfloat16
    assert y.is_contiguous(memory_format=torch.channels_last)
    err = float((y.double() - want).abs().max() / want.abs().max())
    assert err < 1e-2, err
    assert torch.equal(y, again)
    from kgen.dispatch import default_dispatcher

    assert any(p["c"] == 256 for p, _ in default_dispatcher().loaded("conv2d_wgmma"))    # C = 256: TMA im2col


def test_nchw_memory_is_refused():
    torch = pytest.importorskip("torch")
    import kgen
    from kgen.errors import LayoutError

    x, w, _ = _torch_operands(torch, ODD[0], torch.float16)
    with pytest.raises(LayoutError) as info:
        kgen.conv2d(x.contiguous(), w, padding=2, dilation=2)
    assert "channels_last" in info.value.remedy


def test_cupy_nhwc_with_out_and_tf32():
    import cupy

    import kgen

    rng = cupy.random.default_rng(3)
    x = rng.random((2, 11, 13, 8), dtype=cupy.float32) - 0.5
    w = rng.random((16, 3, 3, 8), dtype=cupy.float32) - 0.5
    out = cupy.full((2, 11, 13, 16), cupy.nan, dtype=cupy.float32)
    got = kgen.conv2d(x, w, padding=1, precision="tf32", out=out)
    assert got is out
    problem = conv2d_problem(2, 11, 13, 8, 16, 3, 3, padding=1, dtype="float32")
    want = SPEC.reference(problem, {"x": x, "w": w})["y"]
    err = float(cupy.abs(out.astype(cupy.float64) - want).max() / cupy.abs(want).max())
    assert err < 1e-3, err


def test_an_untuned_conv_races_both_families_and_is_right(monkeypatch):
    """With no record, the first call times both families' picks into a scratch output and keeps
    the faster (how "raced", with its time); the caller's NaN-poisoned ``out`` holds the right
    result once the call returns."""
    torch = pytest.importorskip("torch")
    import kgen
    from kgen.dispatch import default_dispatcher

    monkeypatch.setenv("KGEN_RACE", "1")
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    kgen.refresh()
    shape = (3, 17, 19, 64, 72, 3, 3, 1, 1, 1)              # both families run it (C = 64)
    x, w, bias = _torch_operands(torch, shape, torch.bfloat16, seed=5)
    out = torch.full((3, 72, 17, 19), float("nan"), dtype=torch.bfloat16, device="cuda").to(
        memory_format=torch.channels_last)
    y = kgen.conv2d(x, w, bias, padding=1, activation="relu", out=out)
    torch.cuda.synchronize()
    want = torch.relu(torch.nn.functional.conv2d(x.double(), w.double(), bias.double(), 1, 1))
    err = float((y.double() - want).abs().max() / want.abs().max())
    assert y is out and err < 1e-2, err
    raced = [choice for family in ("conv2d", "conv2d_wgmma") for p, choice in default_dispatcher().loaded(family)
             if p["c"] == 64 and p["k"] == 72 and choice.how == "raced"]
    assert len(raced) == 1 and 0 < raced[0].time_ms < 100
    kgen.refresh()
