"""K-grouped GEMM on the GPU: sampled configs on uneven, empty and odd-sized groups against the
float64 products (NaN-poisoned outputs); ``kgen.gemm_kgrouped`` on PyTorch tensors with device
ends against a loop of ``torch.matmul`` in float64, on the caller's stream (empty groups zero);
host ends from CuPy; ends that fall or pass the rows clamped, never read past A or B; the
grouped GEMM's weight gradient through autograd against PyTorch's."""

from __future__ import annotations

import pytest

from kgen.kernels.gemm.kgrouped import GemmKGrouped, kgrouped_problem

from memory_gpu import check_sampled

pytestmark = pytest.mark.gpu

SPEC = GemmKGrouped()
CASES = [   # groups, m, n, k (rows in all), dtype, out_dtype
    (8, 256, 136, 1000, "bfloat16", None),
    (64, 64, 200, 300, "float16", None),            # about 5 rows a group, some groups empty
    (3, 33, 17, 7, "bfloat16", "float32"),          # odd sizes everywhere, fewer rows than tiles of k
    (16, 512, 384, 8192, "bfloat16", None),
    (4, 96, 40, 130, "float32", None),              # tf32
    (1, 40, 24, 777, "float16", "float32"),
]


@pytest.mark.parametrize("case", CASES)
def test_sampled_configs_are_correct(case):
    groups, m, n, k, dtype, out = case
    check_sampled(SPEC, kgrouped_problem(groups, m, n, k, dtype, out), 3, seed=groups)


def test_torch_device_ends_on_the_callers_stream():
    torch = pytest.importorskip("torch")
    import kgen

    gen = torch.Generator(device="cuda").manual_seed(0)
    rows, k, n, groups = 3000, 256, 384, 16
    x = torch.rand((rows, k), device="cuda", generator=gen).to(torch.bfloat16) - 0.5
    dy = torch.rand((rows, n), device="cuda", generator=gen).to(torch.bfloat16) - 0.5
    counts = torch.randint(0, rows // groups, (groups,), generator=gen, device="cuda")
    counts[3] = 0                                                        # an expert no token chose
    ends = torch.cumsum(counts, 0).to(torch.int32)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        dw = kgen.gemm_kgrouped(x, dy, ends)
        mine = torch.full_like(dw, 7.0)
        kgen.gemm_kgrouped(x, dy, ends, mine)
    side.synchronize()
    begin, want = 0, torch.zeros((groups, k, n), dtype=torch.float64, device="cuda")
    for g, end in enumerate(ends.tolist()):
        want[g] = x[begin:end].double().T @ dy[begin:end].double()
        begin = end
    assert dw.shape == (groups, k, n) and dw.dtype == torch.bfloat16
    err = (dw.double() - want).abs().max() / want.abs().max()
    assert float(err) < 1e-2 and torch.equal(mine, dw)
    assert bool((dw[3] == 0).all())


def test_cupy_host_ends_and_clamped_device_ends():
    import cupy

    import kgen

    rng = cupy.random.default_rng(1)
    a = (rng.random((100, 40), dtype=cupy.float32) - 0.5).astype(cupy.float16)
    b = (rng.random((100, 24), dtype=cupy.float32) - 0.5).astype(cupy.float16)
    a64, b64 = a.astype(cupy.float64), b.astype(cupy.float64)
    c = kgen.gemm_kgrouped(a, b, [10, 10, 100], out_dtype="float32")
    want = cupy.stack([a64[:10].T @ b64[:10], cupy.zeros((40, 24)), a64[10:].T @ b64[10:]])
    assert isinstance(c, cupy.ndarray) and c.dtype == cupy.float32
    assert float(cupy.abs(c - want).max()) < 1e-3 * float(cupy.abs(want).max())
    # ends that fall, and pass the rows: read as [50, 50, 100] (no row outside a or b)
    c = kgen.gemm_kgrouped(a[:100], b[:100], cupy.asarray([50, 30, 2000], dtype=cupy.int32))
    want = cupy.stack([a64[:50].T @ b64[:50], cupy.zeros((40, 24)), a64[50:].T @ b64[50:]])
    assert float(cupy.abs(c.astype(cupy.float64) - want).max()) < 2e-3 * float(cupy.abs(want).max())


def test_grouped_weight_gradient_through_autograd():
    torch = pytest.importorskip("torch")
    import kgen
    import kgen.torch  # noqa: F401  (registers the operators)

    gen = torch.Generator(device="cuda").manual_seed(2)
    rows, k, n, groups = 1000, 128, 96, 8
    x = (torch.rand((rows, k), device="cuda", generator=gen) - 0.5).to(torch.bfloat16)
    w = ((torch.rand((groups, k, n), device="cuda", generator=gen) - 0.5) / 8).to(torch.bfloat16).requires_grad_()
    ends = torch.tensor([100, 100, 250, 400, 600, 700, 950, 1000], dtype=torch.int32, device="cuda")
    kgen.gemm_grouped(x, w, ends).float().square().sum().backward()
    ref = w.detach().double().requires_grad_()
    begin, out = 0, []
    for g, end in enumerate(ends.tolist()):
        out.append(x[begin:end].double() @ ref[g])
        begin = end
    torch.cat(out).square().sum().backward()
    err = (w.grad.double() - ref.grad).abs().max() / ref.grad.abs().max()
    assert float(err) < 2e-2 and bool((w.grad[1] == 0).all())
