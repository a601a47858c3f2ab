"""Batched GEMM on the GPU: sampled configs of both families (mma.sync; wgmma with 3-D tensor
maps) at every layout, broadcast and odd size against the float64 product (NaN-poisoned
outputs); ``kgen.gemm`` on 3-D PyTorch tensors against ``torch.matmul`` in float64, on the
caller's stream, with beta; a broadcast weight going to the 2-D path."""

from __future__ import annotations

import pytest

from kgen.kernels.gemm.batched import GemmBatched, batched_problem
from kgen.kernels.gemm.batched_wgmma import GemmBatchedWgmma

from memory_gpu import check_sampled

pytestmark = pytest.mark.gpu

SPEC = GemmBatched()
CASES = [
    (8, 128, 128, 64, "bfloat16", "NN", "none", "none"),
    (5, 33, 70, 17, "float16", "TT", "none", "bias_relu"),
    (16, 100, 64, 40, "bfloat16", "NT", "a", "bias"),
    (3, 64, 200, 96, "float16", "TN", "b", "gelu"),
    (64, 1, 8, 8, "bfloat16", "NN", "none", "none"),
    (4, 96, 96, 128, "float32", "NN", "none", "none"),
]


# wgmma: sizes TMA can read (16-byte rows), K past the last whole k-block and M, N past the last
# whole tile in each matrix (the 3-D maps clip per matrix: no row of the next one leaks in)
WGMMA = GemmBatchedWgmma()
WGMMA_CASES = [
    (8, 128, 128, 64, "bfloat16", "NN", "none", "none"),
    (5, 37, 72, 40, "float16", "NT", "none", "bias_relu"),
    (16, 100, 64, 40, "bfloat16", "NT", "a", "bias"),
    (3, 64, 200, 96, "float16", "TN", "b", "gelu"),
    (64, 1, 8, 8, "bfloat16", "NN", "none", "none"),
    (7, 136, 24, 200, "bfloat16", "NN", "none", "none"),
    (3, 64, 64, 72, "bfloat16", "TT", "none", "none"),
    (4, 200, 136, 1000, "float16", "NT", "none", "none"),
]


def _problem(case, family):
    batch, m, n, k, dtype, layout, broadcast, epilogue = case
    return batched_problem(batch, m, n, k, dtype, layout, broadcast, family=family, epilogue=epilogue)


@pytest.mark.parametrize("case", CASES)
def test_sampled_configs_are_correct(case):
    check_sampled(SPEC, _problem(case, "gemm_batched"), 3, seed=case[0])


@pytest.mark.parametrize("case", WGMMA_CASES)
def test_wgmma_sampled_configs_are_correct(case):
    check_sampled(WGMMA, _problem(case, "gemm_batched_wgmma"), 4, seed=case[0])


def test_kgen_gemm_on_3d_torch_tensors():
    torch = pytest.importorskip("torch")
    import kgen
    from kgen.dispatch import default_dispatcher

    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.rand((32, 256, 64), device="cuda", generator=gen).to(torch.bfloat16) - 0.5
    b = torch.rand((32, 256, 64), device="cuda", generator=gen).to(torch.bfloat16).transpose(1, 2) - 0.5
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        c = kgen.gemm(a, b)                      # (32, 256, 256): attention scores, K^T as a view
        again = kgen.gemm(a, b, torch.empty_like(c))
        before = torch.rand(c.shape, device="cuda", generator=gen).to(torch.bfloat16)
        scaled = kgen.gemm(a, b, before.clone(), 0.5, 2.0)
    side.synchronize()
    want = a.double() @ b.double()
    assert c.shape == (32, 256, 256) and c.dtype == torch.bfloat16
    assert float((c.double() - want).abs().max() / want.abs().max()) < 1e-2
    assert torch.equal(c, again)
    with_beta = 0.5 * want + 2.0 * before.double()
    assert float((scaled.double() - with_beta).abs().max() / with_beta.abs().max()) < 1e-2
    hopper = torch.cuda.get_device_capability() == (9, 0)
    family = "gemm_batched_wgmma" if hopper else "gemm_batched"
    assert any(p["batch"] == 32 for p, _ in default_dispatcher().loaded(family))
    w = torch.rand((64, 48), device="cuda", generator=gen).to(torch.bfloat16)
    h = kgen.gemm(a, w)                            # one weight for every batch: one GEMM of 32 * 256 rows
    assert h.shape == (32, 256, 48)
    assert float((h.double() - a.double() @ w.double()).abs().max()) < 0.05


def test_cupy_broadcast_a():
    import cupy

    import kgen

    rng = cupy.random.default_rng(1)
    a = (rng.random((40, 24), dtype=cupy.float32) - 0.5).astype(cupy.float16)
    b = (rng.random((6, 24, 56), dtype=cupy.float32) - 0.5).astype(cupy.float16)
    c = kgen.gemm(a, b)
    want = a.astype(cupy.float64) @ b.astype(cupy.float64)
    assert c.shape == (6, 40, 56)
    assert float(cupy.abs(c.astype(cupy.float64) - want).max() / cupy.abs(want).max()) < 2e-3


def test_an_untuned_batch_races_cublas_and_both_families(monkeypatch):
    """With cuBLAS a candidate and no record, the first call times it against both families'
    picks on a scratch output; the kept choice carries the race's time and the result is right
    (beta reads the caller's c, which the race never wrote)."""
    torch = pytest.importorskip("torch")
    import kgen
    from kgen.dispatch import default_dispatcher

    monkeypatch.setenv("KGEN_VENDOR", "1")
    monkeypatch.setenv("KGEN_RACE", "1")
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    kgen.refresh()
    g = torch.Generator(device="cuda").manual_seed(3)
    for batch, m, n, k in [(24, 200, 136, 96), (64, 64, 64, 64)]:
        a = torch.rand(batch, m, k, device="cuda", dtype=torch.bfloat16, generator=g) - 0.5
        b = torch.rand(batch, n, k, device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2) - 0.5
        c = torch.rand(batch, m, n, device="cuda", dtype=torch.bfloat16, generator=g)
        want = 0.5 * torch.matmul(a.double(), b.double()) + 2.0 * c.double()
        kgen.gemm(a, b, c, 0.5, 2.0)
        torch.cuda.synchronize()
        err = float((c.double() - want).abs().max() / want.abs().max())
        assert err < 2e-2, (batch, m, n, k, err)
        raced = [ch for family in ("gemm_batched", "gemm_batched_wgmma")
                 for p, ch in default_dispatcher().loaded(family) if p["batch"] == batch and ch.how == "raced"]
        assert raced and 0 < raced[0].time_ms < 100
    kgen.refresh()
