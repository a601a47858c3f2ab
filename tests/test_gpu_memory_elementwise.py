"""The elementwise and cast families on the GPU: random configs at odd sizes against float64,
NaN and Inf carried, 64-bit indexing, and ``kgen.elementwise`` / ``kgen.cast`` on CuPy,
PyTorch and JAX arrays (the caller's type back, the caller's stream, in place, broadcasts).
Marked ``gpu``; scripts/gpu_check.sh runs them."""

from __future__ import annotations

import random

import pytest

import kgen
from kgen.errors import LayoutError
from kgen.kernels.memory.cast import Cast, cast_problem
from kgen.kernels.memory.elementwise import Elementwise, elementwise_problem

from memory_gpu import check_config, target

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1), (1, 31), (7, 4097), (1, 1000003), (3000, 1)]
CASES = [
    ("a * x + y", {"a": "scalar", "x": "full", "y": "full"}, "float32", "float32"),
    ("2 * x + y", {"x": "full", "y": "full"}, "float16", "float16"),
    ("gelu(x) * y + z", {"x": "full", "y": "row", "z": "col"}, "bfloat16", "bfloat16"),
    ("exp(x) / (1 + maximum(x, y))", {"x": "full", "y": "full"}, "float16", "float32"),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_random_configs_are_correct_at_odd_sizes(case):
    expr, kinds, dtype, out_dtype = CASES[case]
    spec, rng = Elementwise(), random.Random(case)
    for rows, cols in SHAPES:
        problem = elementwise_problem(expr, kinds, rows, cols, dtype, out_dtype)
        space = spec.space(problem, target())
        for config in space.sample(3, seed=rng.randrange(1 << 30)) + [spec.default_config(problem, target())]:
            check, _ = check_config(spec, problem, config, seed=rng.randrange(1000))
            assert check.ok, f"{config.name} on {rows}x{cols}: {check.detail}"


@pytest.mark.parametrize("dtype,out_dtype", [("float32", "bfloat16"), ("float32", "float16"),
                                             ("bfloat16", "float32"), ("float16", "bfloat16")])
def test_cast_configs_are_correct_scaled_or_not(dtype, out_dtype):
    spec = Cast()
    for scaled in (False, True):
        problem = cast_problem(5, 1001, dtype, out_dtype, scaled)
        for config in spec.space(problem, target()).sample(3, seed=7) + [spec.default_config(problem, target())]:
            check, _ = check_config(spec, problem, config)
            assert check.ok, f"{config.name}: {check.detail}"


def test_cast_rounds_to_nearest_even_and_keeps_nan_and_inf_as_torch_does():
    import torch

    x = torch.randn(1 << 16, device="cuda") * 1e3
    x[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 7e4, -7e4, 1e-40])
    x[6:10] = torch.tensor([1.00390625, 1.01171875, 65520.0, 3.0517578125e-05])   # ties and edges
    for dtype in (torch.bfloat16, torch.float16):
        got = kgen.cast(x, str(dtype).removeprefix("torch."))
        assert isinstance(got, torch.Tensor) and got.dtype == dtype
        want = x.to(dtype)
        assert torch.equal(got.view(torch.int16)[1:], want.view(torch.int16)[1:]), dtype
        assert torch.isnan(got[0])
    back = kgen.cast(x.to(torch.bfloat16), "float32")
    assert torch.equal(back[1:], x.to(torch.bfloat16).float()[1:])


def test_nan_and_inf_propagate():
    import cupy

    x = cupy.random.default_rng(1).uniform(-1, 1, 4099).astype(cupy.float32)
    x[[0, 5, 4098]] = cupy.array([cupy.nan, cupy.inf, -cupy.inf], dtype=cupy.float32)
    y = cupy.ones_like(x)
    got = kgen.elementwise("x * 2 + y", x=x, y=y)
    want = x * 2 + y
    assert cupy.array_equal(cupy.isnan(got), cupy.isnan(want))
    finite = cupy.isfinite(want)
    assert bool((got[~finite & ~cupy.isnan(want)] == want[~finite & ~cupy.isnan(want)]).all())
    cupy.testing.assert_allclose(got[finite], want[finite], rtol=1e-6)


def test_64_bit_indexing_past_2_to_the_31_elements():
    import cupy

    n = (1 << 31) + 37
    x = cupy.empty(n, dtype=cupy.float16)
    x[:] = 1
    tail = cupy.random.default_rng(2).uniform(-2, 2, 4096).astype(cupy.float16)
    x[-4096:] = tail
    out = kgen.elementwise("x * 2", x=x)
    assert out.shape == (n,) and out.dtype == cupy.float16
    assert bool((out[-4096:] == tail * 2).all())
    idx = cupy.random.default_rng(3).integers(0, n - 4096, 10000)
    assert bool((out[idx] == 2).all())
    del x, out


def test_callers_get_their_own_array_type_back_with_broadcasts_and_in_place():
    import cupy
    import torch

    rng = cupy.random.default_rng(4)
    x = rng.standard_normal((37, 1001), dtype=cupy.float32)
    row, col = rng.standard_normal(1001, dtype=cupy.float32), rng.standard_normal((37, 1), dtype=cupy.float32)
    got = kgen.elementwise("a * x + r * c", x=x, r=row, c=col, a=0.5)
    assert isinstance(got, cupy.ndarray) and got.shape == x.shape
    cupy.testing.assert_allclose(got, 0.5 * x + row * col, rtol=1e-5, atol=1e-6)

    t = torch.randn(64, 129, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(129, device="cuda", dtype=torch.bfloat16)
    got = kgen.elementwise("silu(t) * w", t=t, w=w)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16 and got.shape == t.shape
    want = (torch.nn.functional.silu(t.float()) * w.float())
    assert torch.allclose(got.float(), want, rtol=2e-2, atol=2e-2)

    before = t.clone()
    same = kgen.elementwise("t * 3", t=t, out=t)
    assert same is t and torch.allclose(t.float(), (before.float() * 3).bfloat16().float())

    xb = cupy.asarray(torch.randn(1000, device="cuda", dtype=torch.bfloat16).view(torch.int16).cpu().numpy()
                      ).view(cupy.uint16)
    got = kgen.elementwise("x + 1", x=xb, dtype="bfloat16")
    assert got.dtype == cupy.uint16 and got.shape == (1000,)


def test_jax_arrays_in_and_out():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x = jnp.arange(1, 1001, dtype=jnp.float32)
    got = kgen.elementwise("x * x", x=x)
    assert isinstance(got, jax.Array)
    assert bool(jnp.allclose(got, x * x))
    xb = x.astype(jnp.bfloat16)
    gb = kgen.cast(xb, "float32")
    assert gb.dtype == jnp.float32 and bool(jnp.array_equal(gb, xb.astype(jnp.float32)))


def test_the_callers_torch_stream_is_used_and_capturable_in_a_cuda_graph():
    import torch

    x = torch.randn(1 << 20, device="cuda")
    y = torch.randn(1 << 20, device="cuda")
    out = torch.empty_like(x)
    kgen.elementwise("2 * x + y", x=x, y=y, out=out)          # chosen and loaded before capture
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        kgen.elementwise("2 * x + y", x=y, y=x, out=out)
    side.synchronize()
    assert torch.allclose(out, 2 * y + x)
    # a launch on any stream but the capturing one fails the capture (or is missing from the replay)
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        with torch.cuda.graph(graph):
            kgen.elementwise("2 * x + y", x=x, y=y, out=out)
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.allclose(out, 2 * x + y)


def test_empty_arrays_and_strided_views():
    import cupy

    e = cupy.empty((0, 5), dtype=cupy.float32)
    assert kgen.elementwise("x + 1", x=e).shape == (0, 5)
    x = cupy.ones((8, 8), dtype=cupy.float32)
    with pytest.raises(LayoutError, match="contiguous copy"):
        kgen.elementwise("x + 1", x=x.T)
