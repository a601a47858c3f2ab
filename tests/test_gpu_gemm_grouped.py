"""Grouped GEMM on the GPU: sampled configs of both families (mma.sync; wgmma with its groups'
table) on uneven, empty and odd-sized groups against the float64 product (NaN-poisoned outputs); ``kgen.gemm_grouped`` on PyTorch tensors with device ends against
a loop of ``torch.matmul`` in float64, on the caller's stream; host ends from CuPy; rows past the
last end left as they were; ends that fall or pass the rows clamped, never read past A or
written past C."""

from __future__ import annotations

import pytest

from kgen.kernels.gemm.grouped import GemmGrouped, grouped_problem
from kgen.kernels.gemm.grouped_wgmma import GemmGroupedWgmma

from memory_gpu import check_sampled

pytestmark = pytest.mark.gpu

SPEC = GemmGrouped()
CASES = [
    (8, 1000, 136, 72, "bfloat16", "NN", "none"),
    (64, 300, 64, 200, "float16", "NT", "relu"),       # about 5 rows a group, some groups empty
    (3, 7, 33, 17, "bfloat16", "NN", "gelu"),           # odd sizes everywhere
    (128, 8192, 512, 256, "bfloat16", "NT", "none"),
    (4, 96, 96, 128, "float32", "NN", "none"),          # tf32
]


# wgmma: sizes TMA can read; groups of a few rows (tiles reaching into the next group's rows),
# empty groups, one group, many groups, K past the last whole k-block
WGMMA = GemmGroupedWgmma()
WGMMA_CASES = [
    (8, 1000, 136, 72, "bfloat16", "NN", "none"),
    (64, 300, 64, 200, "float16", "NT", "relu"),
    (3, 40, 24, 16, "float16", "NN", "gelu"),
    (1, 777, 256, 64, "bfloat16", "NT", "none"),
    (1000, 5000, 64, 64, "bfloat16", "NT", "none"),
    (16, 64, 512, 520, "bfloat16", "NT", "none"),
]


def _problem(case, family):
    groups, m, n, k, dtype, layout, epilogue = case
    return grouped_problem(groups, m, n, k, dtype, layout, family=family, epilogue=epilogue)


@pytest.mark.parametrize("case", CASES)
def test_sampled_configs_are_correct(case):
    check_sampled(SPEC, _problem(case, "gemm_grouped"), 3, seed=case[0])


@pytest.mark.parametrize("case", WGMMA_CASES)
def test_wgmma_sampled_configs_are_correct(case):
    check_sampled(WGMMA, _problem(case, "gemm_grouped_wgmma"), 4, seed=case[0])


def _loop_reference(torch, a, b, ends):
    """float64 product of each group's rows with its matrix; rows past the last end NaN."""
    want = torch.full((a.shape[0], b.shape[-1]), float("nan"), dtype=torch.float64, device=a.device)
    begin = 0
    for g, end in enumerate(ends):
        want[begin:end] = a[begin:end].double() @ b[g].double()
        begin = end
    return want


def test_torch_device_ends_on_the_callers_stream():
    torch = pytest.importorskip("torch")
    import kgen
    from kgen.dispatch import default_dispatcher

    gen = torch.Generator(device="cuda").manual_seed(0)
    rows, k, n, groups = 3000, 256, 384, 16
    a = torch.rand((rows, k), device="cuda", generator=gen).to(torch.bfloat16) - 0.5
    w = torch.rand((groups, n, k), device="cuda", generator=gen).to(torch.bfloat16) - 0.5   # nn.Linear weights
    counts = torch.randint(0, rows // groups, (groups,), generator=gen, device="cuda")    # in all, fewer than rows
    counts[3] = 0                                                        # an expert no token chose
    ends = torch.cumsum(counts, 0).to(torch.int32)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        c = kgen.gemm_grouped(a, w.transpose(1, 2), ends, activation="relu")
        mine = torch.full_like(c, 7.0)
        kgen.gemm_grouped(a, w.transpose(1, 2), ends, mine, activation="relu")
    side.synchronize()
    host_ends = ends.tolist()
    want = _loop_reference(torch, a, w.transpose(1, 2), host_ends).clamp(min=0)
    last = host_ends[-1]
    assert c.shape == (rows, n) and c.dtype == torch.bfloat16 and last < rows
    err = (c[:last].double() - want[:last]).abs().max() / want[:last].abs().max()
    assert float(err) < 1e-2
    assert torch.equal(mine[:last], c[:last]) and bool((mine[last:] == 7.0).all())      # past the last end: untouched
    hopper = torch.cuda.get_device_capability() == (9, 0)
    family = "gemm_grouped_wgmma" if hopper else "gemm_grouped"
    assert any(p["groups"] == groups for p, _ in default_dispatcher().loaded(family))


def test_cupy_host_ends_and_clamped_device_ends():
    import cupy

    import kgen

    rng = cupy.random.default_rng(1)
    a = (rng.random((100, 40), dtype=cupy.float32) - 0.5).astype(cupy.float16)
    b = (rng.random((3, 40, 24), dtype=cupy.float32) - 0.5).astype(cupy.float16)
    a64, b64 = a.astype(cupy.float64), b.astype(cupy.float64)
    c = kgen.gemm_grouped(a, b, [10, 10, 100])
    want = cupy.concatenate([a64[:10] @ b64[0], a64[10:] @ b64[2]])
    assert isinstance(c, cupy.ndarray) and float(cupy.abs(c.astype(cupy.float64) - want).max()) < 2e-3 * float(
        cupy.abs(want).max())
    # ends that fall, and pass the rows: read as [50, 50, 100] (no row outside a or c)
    guard = cupy.full((102, 24), 5.0, dtype=cupy.float16)
    kgen.gemm_grouped(a, b, cupy.asarray([50, 30, 2000], dtype=cupy.int32), guard[1:101])
    cupy.cuda.get_current_stream().synchronize()
    want = cupy.concatenate([a64[:50] @ b64[0], a64[50:] @ b64[2]])
    assert float(cupy.abs(guard[1:101].astype(cupy.float64) - want).max()) < 2e-3 * float(cupy.abs(want).max())
    assert bool((guard[0] == 5.0).all()) and bool((guard[101] == 5.0).all())


def test_an_untuned_grouped_problem_races_both_families_and_is_right(monkeypatch):
    """With no record, the first call times both families' picks into a scratch output; the kept
    one carries the race's time and the caller's output is right."""
    torch = pytest.importorskip("torch")
    import kgen
    from kgen.dispatch import default_dispatcher

    monkeypatch.setenv("KGEN_RACE", "1")
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    kgen.refresh()
    gen = torch.Generator(device="cuda").manual_seed(11)
    groups, rows, n, k = 8, 1000, 136, 72
    a = (torch.rand((rows, k), device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
    b = (torch.rand((groups, k, n), device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
    ends = torch.tensor([100, 250, 260, 500, 640, 700, 950, 1000], dtype=torch.int32, device="cuda")
    got = kgen.gemm_grouped(a, b, ends)
    torch.cuda.synchronize()
    want = _loop_reference(torch, a, b, ends.tolist())
    err = float((got.double() - want).abs().max() / want.abs().max())
    assert err < 2e-2, err
    raced = [choice for family in ("gemm_grouped", "gemm_grouped_wgmma")
             for _, choice in default_dispatcher().loaded(family) if choice.how == "raced"]
    assert len(raced) == 1 and 0 < raced[0].time_ms < 100
    kgen.refresh()
