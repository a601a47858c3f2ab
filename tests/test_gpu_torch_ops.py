"""kgen.torch on the GPU: torch.compile(fullgraph=True) of functions calling kgen's operations
(the compiled result equal to the eager call's), gradients against PyTorch's autograd in
float64, torch.library.opcheck of each operator, and a CUDA graph capture replayed on new
inputs."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

import kgen  # noqa: E402
import kgen.torch  # noqa: E402,F401

pytestmark = pytest.mark.gpu


def _rand(*shape, dtype=torch.bfloat16, seed=0, requires_grad=False):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = (torch.rand(shape, device="cuda", generator=gen, dtype=torch.float32) * 2 - 1).to(dtype)
    return x.requires_grad_(requires_grad)


def _relerr(got, want) -> float:
    got, want = got.double(), want.double()
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def test_compiled_gemm_is_the_eager_call():
    a, b, bias = _rand(300, 200), _rand(200, 136, seed=1), _rand(136, seed=2)
    compiled = torch.compile(lambda a, b, bias: kgen.gemm(a, b, bias=bias, activation="relu") * 2, fullgraph=True)
    got = compiled(a, b, bias)
    assert torch.equal(got, kgen.gemm(a, b, bias=bias, activation="relu") * 2)
    assert _relerr(got, torch.relu(a.double() @ b.double() + bias.double()) * 2) < 1e-2


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("activation", [None, "gelu"])
def test_gemm_gradients_match_autograd(dtype, tol, activation):
    a, b = _rand(96, 80, dtype=dtype, requires_grad=True), _rand(80, 72, dtype=dtype, seed=1, requires_grad=True)
    bias = _rand(72, dtype=dtype, seed=2, requires_grad=True)
    if dtype == torch.float32 and activation is not None:
        pytest.skip("a float32 epilogue runs as tf32 only (precision='tf32')")
    grad = _rand(96, 72, dtype=torch.float64, seed=3)
    out = kgen.torch.gemm(a, b, bias=bias if activation else None, activation=activation)
    out.backward(grad.to(dtype))
    ref = [x.detach().double().requires_grad_() for x in (a, b, bias)]
    z = ref[0] @ ref[1]
    if activation:
        z = torch.nn.functional.gelu(z + ref[2])
    z.backward(grad)
    for got, want in zip((a.grad, b.grad) + ((bias.grad,) if activation else ()), (r.grad for r in ref)):
        assert got.dtype == dtype and _relerr(got, want) < tol


def test_batched_gemm_gradients_with_a_shared_weight():
    x = _rand(4, 64, 96, requires_grad=True)
    w = _rand(96, 40, seed=1, requires_grad=True)
    out = torch.compile(lambda x, w: kgen.gemm(x, w), fullgraph=True)(x, w)
    grad = _rand(4, 64, 40, seed=2)
    out.backward(grad)
    assert _relerr(x.grad, grad.double() @ w.double().T) < 2e-2
    assert _relerr(w.grad, (x.double().transpose(1, 2) @ grad.double()).sum(0)) < 2e-2


@pytest.mark.parametrize("window, stride, padding", [(3, 2, 1), (3, 1, 1), (1, 1, 0), (1, 2, 0)])
def test_conv2d_compiled_and_its_gradients(window, stride, padding):
    x = _rand(2, 64, 15, 15).to(memory_format=torch.channels_last).requires_grad_()
    w = _rand(32, 64, window, window, seed=1).to(memory_format=torch.channels_last).requires_grad_()
    bias = _rand(32, seed=2, requires_grad=True)
    step = torch.compile(lambda x, w, b: kgen.conv2d(x, w, b, stride=stride, padding=padding, activation="relu"),
                         fullgraph=True)
    y = step(x, w, bias)
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, bias))
    pre = torch.nn.functional.conv2d(xd, wd, bd, stride, padding)
    assert _relerr(y, torch.relu(pre)) < 2e-2
    grad = _rand(*y.shape, seed=3)
    y.backward(grad)
    pre.backward(grad.double() * (y > 0).double())      # through the kernel's own relu mask
    for got, ref in ((x.grad, xd.grad), (w.grad, wd.grad), (bias.grad, bd.grad)):
        assert _relerr(got, ref) < 3e-2
    by_kgen, x.grad = x.grad.clone(), None
    os.environ["KGEN_CONV_GRADIENTS"] = "torch"       # eager (a compiled backward keeps what it traced):
    try:                                              # PyTorch's gradients, the same within rounding
        kgen.conv2d(x, w, bias, stride=stride, padding=padding, activation="relu").backward(grad)
    finally:
        del os.environ["KGEN_CONV_GRADIENTS"]
    assert _relerr(by_kgen, x.grad) < 3e-2


@pytest.mark.parametrize("batch, stride, padding, dilation", [(64, 1, 1, 1), (64, 2, 1, 1), (3, 2, 0, 2)])
def test_weight_gradient_of_a_window_is_the_swapped_convolution(batch, stride, padding, dilation):
    """kgen.torch.weight_gradient of a 3x3 window (conv2d_wgmma at batch 64, conv2d at batch 3)
    against cuDNN's, both against float64."""
    x = _rand(batch, 64, 14, 13).to(memory_format=torch.channels_last)
    w = _rand(48, 64, 3, 3, seed=1)
    y = torch.nn.functional.conv2d(x.double(), w.double(), None, stride, padding, dilation)
    dy = _rand(*y.shape, seed=2).to(memory_format=torch.channels_last)
    want = torch.nn.grad.conv2d_weight(x.double(), w.shape, dy.double(), stride, padding, dilation)
    got = kgen.torch.weight_gradient(x, w, dy, stride, padding, dilation)
    assert got.shape == w.shape and got.dtype == w.dtype
    cudnn = torch.nn.grad.conv2d_weight(x, w.shape, dy, stride, padding, dilation)
    assert _relerr(got, want) < 2e-2 and _relerr(cudnn, want) < 2e-2


@pytest.mark.parametrize("batch, window, stride, padding, dilation", [(64, 3, 2, 1, 1), (3, 3, 3, 1, 1), (4, 5, 2, 2, 2)])
def test_strided_data_gradient_on_side_streams(monkeypatch, batch, window, stride, padding, dilation):
    """The phase convolutions of a strided data gradient on KGEN_CONV_PHASE_STREAMS side streams
    give the bits they give one after another, within rounding of float64, in the order of the
    caller's (non-default) stream: dy written on it just before the call is what they read."""
    x = _rand(batch, 64, 15, 14).to(memory_format=torch.channels_last)
    w = _rand(48, 64, window, window, seed=1)
    shape = torch.nn.functional.conv2d(x[:1].double(), w.double(), None, stride, padding, dilation).shape[2:]
    dy = _rand(batch, 48, *shape, seed=2).to(memory_format=torch.channels_last)
    want = torch.nn.grad.conv2d_input(x.shape, w.double(), dy.double(), stride, padding, dilation)
    got = {}
    for streams in (0, 4):
        monkeypatch.setenv("KGEN_CONV_PHASE_STREAMS", str(streams))
        caller = torch.cuda.Stream()
        with torch.cuda.stream(caller):
            late = torch.zeros_like(dy)
            torch.cuda._sleep(2_000_000)     # the caller's stream busy: a side stream not waiting for it reads zeros
            late.copy_(dy)
            got[streams] = kgen.torch.data_gradient(x, w, late, stride, padding, dilation).clone()
        caller.synchronize()
    assert _relerr(got[4], want) < 2e-2
    assert torch.equal(got[0], got[4])


@pytest.mark.parametrize("activation", [None, "gelu"])
def test_grouped_gemm_compiled_with_gradients(activation):
    """Experts' nn.Linear-like weights (G, N, K) read transposed, an empty group and rows past
    the last group (zeros, no gradient), against float64 autograd of one matmul a group."""
    starts, stops = [0, 50, 50, 170], [50, 50, 170, 290]
    a, w = _rand(300, 128, requires_grad=True), _rand(4, 72, 128, seed=1, requires_grad=True)
    ends = torch.tensor(stops, dtype=torch.int32, device="cuda")
    step = torch.compile(lambda a, w: kgen.gemm_grouped(a, w.transpose(1, 2), ends, activation=activation),
                         fullgraph=True)
    out = step(a, w)
    ad, wd = (t.detach().double().requires_grad_() for t in (a, w))
    z = torch.cat([ad[s:e] @ wd[i].T for i, (s, e) in enumerate(zip(starts, stops))] + [ad.new_zeros(10, 72)])
    want = torch.nn.functional.gelu(z) if activation else z
    assert _relerr(out, want) < 2e-2 and not out[290:].any()
    grad = _rand(300, 72, seed=2)
    out.backward(grad)
    want.backward(grad.double())
    assert a.grad.dtype == w.grad.dtype == torch.bfloat16 and not a.grad[290:].any()
    assert _relerr(a.grad, ad.grad) < 2e-2 and _relerr(w.grad, wd.grad) < 2e-2


def test_softmax_and_rmsnorm_compiled_with_gradients():
    x = _rand(8, 3, 1000, dtype=torch.float32, requires_grad=True)
    g = _rand(1000, dtype=torch.float32, seed=1, requires_grad=True)
    step = torch.compile(lambda x, g: kgen.softmax(x) * 3 + kgen.rmsnorm(x, g, 1e-5), fullgraph=True)
    out = step(x, g)
    xd, gd = (t.detach().double().requires_grad_() for t in (x, g))
    want = torch.softmax(xd, -1) * 3 + xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-5) * gd
    assert _relerr(out, want) < 1e-5
    grad = _rand(*out.shape, dtype=torch.float32, seed=2)
    out.backward(grad)
    want.backward(grad.double())
    assert _relerr(x.grad, xd.grad) < 1e-4 and _relerr(g.grad, gd.grad) < 1e-4


@pytest.mark.parametrize("op, args", [
    ("gemm", lambda: (_rand(64, 48), _rand(48, 40, seed=1))),
    ("gemm_grouped", lambda: (_rand(64, 48), _rand(3, 48, 40, seed=1),
                              torch.tensor([10, 30, 60], dtype=torch.int32, device="cuda"))),
    ("softmax", lambda: (_rand(16, 100, dtype=torch.float32),)),
    ("rmsnorm", lambda: (_rand(16, 100, dtype=torch.float32), _rand(100, dtype=torch.float32, seed=1), 1e-5)),
])
def test_opcheck(op, args):
    torch.library.opcheck(getattr(torch.ops.kgen, op).default, args())


def test_cuda_graph_capture_replays_on_new_inputs():
    a, b = _rand(256, 128), _rand(128, 192, seed=1)
    kgen.gemm(a, b)                    # outside the capture: the plan chosen and the kernel loaded
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        c = kgen.gemm(a, b)
    a.copy_(_rand(256, 128, seed=5))
    b.copy_(_rand(128, 192, seed=6))
    graph.replay()
    torch.cuda.synchronize()
    assert _relerr(c, a.double() @ b.double()) < 1e-2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_eager_gemm_returns_a_tensor_of_every_dtype(dtype):
    a, b = _rand(70, 50, dtype=dtype), _rand(50, 30, dtype=dtype, seed=1)
    c = kgen.gemm(a, b)
    assert isinstance(c, torch.Tensor) and c.dtype == dtype and c.device == a.device
    assert _relerr(c, a.double() @ b.double()) < (2e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-5)
