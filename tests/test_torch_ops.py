"""kgen.torch with no GPU: the custom operators' fake implementations (shapes, strides, dtypes),
a torch.compile(fullgraph=True) trace of kgen's functions on meta tensors (no graph break),
and each backward checked by torch.autograd.gradcheck in float64 on the CPU, the kernels
replaced by PyTorch's own ops (the GPU tests compare the kernels themselves)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import kgen  # noqa: E402
import kgen.torch as kt  # noqa: E402
from kgen.errors import InputError, ShapeError  # noqa: E402
from kgen.ops import caller  # noqa: E402

META = dict(device="meta", dtype=torch.bfloat16)


def _channels_last(*shape, **kw):
    return torch.randn(*shape, **kw).to(memory_format=torch.channels_last)


def _act(z, activation):
    if activation == "relu":
        return torch.relu(z)
    if activation == "gelu":
        return torch.nn.functional.gelu(z)
    return z


@pytest.fixture
def cpu_kernels(monkeypatch):
    """The eager functions the operators call, replaced by PyTorch on the CPU."""
    import kgen.ops.conv
    import kgen.ops.gemm
    import kgen.ops.gemm_grouped
    import kgen.ops.gemm_kgrouped
    import kgen.ops.rownorm

    def gemm(a, b, c=None, alpha=1.0, beta=0.0, *, bias=None, activation=None, precision=None, dtype=None,
             out_dtype=None):
        z = alpha * torch.matmul(a, b)
        if bias is not None:
            z = z + bias
        return _act(z, activation).to(getattr(torch, out_dtype) if out_dtype else a.dtype)

    def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, activation=None, *, out=None, out_dtype=None,
               precision=None, dtype=None):
        z = torch.nn.functional.conv2d(x, w, bias, stride, padding, dilation)
        return _act(z, activation).contiguous(memory_format=torch.channels_last)

    def rmsnorm(x, weight, eps=1e-6, *, out=None, dtype=None):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    def gemm_grouped(a, b, ends, out=None, *, activation=None, precision=None, dtype=None, out_dtype=None):
        result = out if out is not None else a.new_zeros((a.shape[0], b.shape[-1]))
        start = 0
        for i, end in enumerate(ends.tolist()):
            result[start:end] = _act(a[start:end] @ b[i], activation).to(result.dtype)
            start = end
        return result

    def gemm_kgrouped(a, b, ends, out=None, *, precision=None, dtype=None, out_dtype=None):
        result = a.new_zeros((len(ends), a.shape[1], b.shape[1]))
        start = 0
        for i, end in enumerate(ends.tolist()):
            result[i] = a[start:end].T @ b[start:end]
            start = end
        return result

    monkeypatch.setattr(kgen.ops.gemm, "gemm", gemm)
    monkeypatch.setattr(kgen.ops.gemm_grouped, "gemm_grouped", gemm_grouped)
    monkeypatch.setattr(kgen.ops.gemm_kgrouped, "gemm_kgrouped", gemm_kgrouped)
    monkeypatch.setattr(kgen.ops.conv, "conv2d", conv2d)
    monkeypatch.setattr(kgen.ops.rownorm, "softmax", lambda x, axis=-1, *, out=None, dtype=None: torch.softmax(x, -1))
    monkeypatch.setattr(kgen.ops.rownorm, "rmsnorm", rmsnorm)


def test_operators_are_registered():
    for name in ("gemm", "conv2d", "softmax", "rmsnorm", "permute"):
        assert hasattr(torch.ops.kgen, name)


@pytest.mark.parametrize("channels_last", [True, False])
def test_the_weight_gradient_swaps_batch_and_channels_into_channels_last_memory(channels_last):
    t = torch.randn(3, 5, 4, 6)
    t = t.to(memory_format=torch.channels_last) if channels_last else t
    got = kt._batch_and_channels_swapped(t)
    assert torch.equal(got, t.transpose(0, 1))
    assert got.is_contiguous(memory_format=torch.channels_last)
    fake = kt._batch_and_channels_swapped(torch.empty(3, 5, 4, 6, **META).to(memory_format=torch.channels_last))
    assert fake.shape == (5, 3, 4, 6) and fake.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("shapes, expected", [
    (((64, 32), (32, 48)), (64, 48)),
    (((4, 64, 32), (32, 48)), (4, 64, 48)),
    (((64, 32), (4, 32, 48)), (4, 64, 48)),
    (((1, 64, 32), (4, 32, 48)), (4, 64, 48)),
    (((4, 64, 32), (4, 32, 48)), (4, 64, 48)),
])
def test_gemm_fake_shape(shapes, expected):
    a, b = (torch.empty(s, **META) for s in shapes)
    out = torch.ops.kgen.gemm(a, b)
    assert tuple(out.shape) == expected and out.dtype == torch.bfloat16 and out.is_contiguous()
    assert torch.ops.kgen.gemm(a, b, out_dtype=torch.float32).dtype == torch.float32


def test_gemm_fake_refuses_mismatched_inner_dimensions():
    with pytest.raises(RuntimeError, match="inner dimensions"):
        torch.ops.kgen.gemm(torch.empty(8, 4, **META), torch.empty(5, 8, **META))


@pytest.mark.parametrize("stride, padding, dilation", [(1, 0, 1), (2, 1, 1), ((1, 2), (3, 0), (2, 1))])
def test_conv2d_fake_matches_pytorch_geometry(stride, padding, dilation):
    x, w = _channels_last(2, 16, 13, 11, **META), _channels_last(8, 16, 3, 3, **META)
    out = kt.conv2d(x, w, stride=stride, padding=padding, dilation=dilation)
    want = torch.nn.functional.conv2d(x, w, None, stride, padding, dilation)
    assert out.shape == want.shape
    assert out.is_contiguous(memory_format=torch.channels_last)     # NHWC memory, as kgen.conv2d returns


def test_compiled_function_has_no_graph_break():
    """kgen's functions traced by torch.compile(fullgraph=True): each is one custom operator."""
    def step(a, b, bias, x, w, h, g):
        return (kgen.gemm(a, b, bias=bias, activation="gelu"),
                kgen.conv2d(x, w, stride=2, padding=1, activation="relu"),
                kgen.softmax(h), kgen.rmsnorm(h, g, 1e-5))

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    args = (torch.randn(64, 32, **META), torch.randn(32, 48, **META), torch.randn(48, **META),
            _channels_last(2, 16, 9, 9, **META), _channels_last(8, 16, 3, 3, **META),
            torch.randn(4, 5, 64, **META), torch.randn(64, **META))
    outs = torch.compile(step, fullgraph=True, backend=backend)(*args)
    assert [tuple(o.shape) for o in outs] == [(64, 48), (2, 8, 5, 5), (4, 5, 64), (4, 5, 64)]
    assert len(graphs) == 1
    called = {str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"}
    assert {"kgen.gemm.default", "kgen.conv2d.default", "kgen.softmax.default", "kgen.rmsnorm.default"} <= called


def test_backward_shapes_on_meta_tensors():
    a = torch.randn(3, 16, 8, **META, requires_grad=True)
    b = torch.randn(8, 12, **META, requires_grad=True)
    bias = torch.randn(12, **META, requires_grad=True)
    torch.ops.kgen.gemm(a, b, bias, "relu").float().sum().backward()
    assert a.grad.shape == a.shape and b.grad.shape == b.shape and bias.grad.shape == bias.shape


def test_autograd_or_a_compile_sends_a_call_to_the_operators():
    plain, tracked = torch.empty(4, 4, **META), torch.empty(4, 4, **META, requires_grad=True)
    assert not caller.torch_graph_call(plain, None, object())
    assert caller.torch_graph_call(plain, tracked)
    with torch.no_grad():
        assert not caller.torch_graph_call(tracked)
    out = kgen.gemm(tracked, plain, activation="relu")      # eager, recorded by autograd
    assert out.grad_fn is not None and out.shape == (4, 4)
    out.float().sum().backward()
    assert tracked.grad.shape == (4, 4)
    assert kgen.softmax(tracked).grad_fn is not None and kgen.rmsnorm(plain, tracked[0], 1e-5).grad_fn is not None
    with pytest.raises(InputError, match="autograd"):
        kgen.gemm(tracked, plain, torch.empty(4, 4, **META), beta=1.0)


def test_traced_forms_refuse_what_a_graph_cannot_hold():
    a, b = torch.empty(8, 8, **META), torch.empty(8, 8, **META)
    with pytest.raises(InputError, match="new tensor"):
        kt.gemm(a, b, torch.empty(8, 8, **META), beta=1.0)
    with pytest.raises(InputError, match="last axis"):
        kt.softmax(a, axis=0)
    with pytest.raises(InputError):
        kt.rmsnorm(a, torch.empty(8, **META), out=a)


def test_missing_provider_says_what_to_import(monkeypatch):
    monkeypatch.setattr(caller, "_custom_ops_provider", None)
    with pytest.raises(InputError, match="import kgen.torch"):
        caller.custom_op("gemm")


F64 = dict(dtype=torch.float64)


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("shapes", [((5, 7), (7, 3)), ((2, 5, 7), (7, 3)), ((5, 7), (2, 7, 3)),
                                    ((1, 5, 7), (2, 7, 3)), ((2, 5, 7), (2, 7, 3))])
def test_gemm_backward(cpu_kernels, activation, shapes):
    a = torch.randn(*shapes[0], **F64, requires_grad=True)
    b = torch.randn(*shapes[1], **F64, requires_grad=True)
    bias = torch.randn(shapes[1][-1], **F64, requires_grad=True)
    if activation == "relu":            # keep the pre-activation away from the kink
        with torch.no_grad():
            b += 0.05 * torch.sign(b)
    assert torch.autograd.gradcheck(lambda a, b, bias: torch.ops.kgen.gemm(a, b, bias, activation, None, None, 0.5),
                                    (a, b, bias))


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
@pytest.mark.parametrize("transposed", [False, True])
def test_gemm_grouped_backward(cpu_kernels, activation, transposed):
    """Groups of 2, 0 and 5 rows of 9 (the last two rows in no group), b as (G, K, N) or as the
    transposed view of nn.Linear-like (G, N, K) weights."""
    a = torch.randn(9, 5, **F64, requires_grad=True)
    weights = torch.randn(3, 4, 5, **F64) if transposed else torch.randn(3, 5, 4, **F64)
    if activation == "relu":            # keep the pre-activation away from the kink
        weights += 0.05 * torch.sign(weights)
    weights.requires_grad_()
    ends = torch.tensor([2, 2, 7], dtype=torch.int32)

    def grouped(a, weights):
        b = weights.transpose(1, 2) if transposed else weights
        return kgen.gemm_grouped(a, b, ends, activation=activation)       # recorded: the operator

    out = grouped(a, weights)
    assert out.grad_fn is not None and out.shape == (9, 4) and not out[7:].any()
    assert torch.autograd.gradcheck(grouped, (a, weights))


def test_gemm_grouped_operator_on_meta_tensors():
    a = torch.randn(40, 16, **META, requires_grad=True)
    b = torch.randn(4, 16, 24, **META, requires_grad=True)
    out = kt.gemm_grouped(a, b, torch.empty(4, device="meta", dtype=torch.int32), activation="relu")
    assert out.shape == (40, 24) and out.dtype == torch.bfloat16
    with pytest.raises(InputError, match="new tensor"):
        kt.gemm_grouped(a, b, [10, 20, 30, 40], out=torch.empty(40, 24, **META))
    assert kt.gemm_grouped(a, b, [10, 20, 30, 40]).shape == (40, 24)
    with pytest.raises(ShapeError, match="rise"):        # a host list checked as the eager call checks it
        kt.gemm_grouped(a, b, [10, 5, 30, 40])


CONV_CASES = [  # window, stride, padding, dilation, kgen convolutions in the data gradient, gradients by GEMM
    ((3, 2), (2, 1), 1, (1, 2), 2, False),
    ((3, 2), 1, 1, (1, 2), 1, False),
    ((3, 3), 1, (0, 2), (2, 1), 1, False),
    ((3, 3), 1, 3, 1, 1, False),                # more padding than the window reaches: cropped
    ((3, 3), 2, 1, 1, 4, False),
    ((1, 1), 1, 0, 1, 0, True),                 # 1x1, no padding: data and weight gradients are GEMMs
    ((1, 1), 2, 0, 1, 0, True),                 # the pixels the stride skips: zeros
    ((1, 1), (2, 3), 0, 1, 0, True),
    ((1, 1), 1, 1, 1, 1, False),
]

@pytest.mark.parametrize("activation", [None, "gelu"])
@pytest.mark.parametrize("window, stride, padding, dilation, data_convs, weight_gemm", CONV_CASES)
def test_conv2d_backward(cpu_kernels, monkeypatch, activation, window, stride, padding, dilation, data_convs,
                         weight_gemm):
    import kgen.ops.conv
    import kgen.ops.gemm

    calls = {"conv": 0, "gemm": 0}
    for module, name, label in ((kgen.ops.conv, "conv2d", "conv"), (kgen.ops.gemm, "gemm", "gemm")):
        eager = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _f=eager, _l=label, **k: calls.__setitem__(_l, calls[_l] + 1)
                            or _f(*a, **k))
    x = torch.randn(2, 3, 7, 6, **F64).to(memory_format=torch.channels_last).requires_grad_()
    w = torch.randn(4, 3, *window, **F64).requires_grad_()
    bias = torch.randn(4, **F64, requires_grad=True)

    def step(x, w, bias):
        return kt.conv2d(x, w, bias, stride=stride, padding=padding, dilation=dilation, activation=activation)

    assert torch.autograd.gradcheck(step, (x, w, bias))
    calls.update(conv=0, gemm=0)
    step(x, w, bias).sum().backward()
    forward_convs = 1 + (activation == "gelu")              # gelu's backward recomputes the pre-activation
    weight_conv = int(not weight_gemm)                      # else the convolution with batch and channels swapped
    assert (calls["conv"] - forward_convs, calls["gemm"]) == (data_convs + weight_conv, 2 * int(weight_gemm))
    monkeypatch.setenv("KGEN_CONV_GRADIENTS", "torch")
    calls.update(conv=0, gemm=0)
    step(x, w, bias).sum().backward()
    assert (calls["conv"], calls["gemm"]) == (forward_convs, 0)


def test_softmax_and_rmsnorm_backward(cpu_kernels):
    x = torch.randn(3, 4, 9, **F64, requires_grad=True)
    g = torch.randn(9, **F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: torch.ops.kgen.softmax(x), (x,))
    assert torch.autograd.gradcheck(lambda x, g: torch.ops.kgen.rmsnorm(x, g, 1e-3), (x, g))
