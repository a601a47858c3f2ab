"""kgen.gemm on shapes nobody tuned, on the GPU: the cost model's picks at odd, unaligned and
TT shapes against a float64 reference per dtype, and the vendor candidate's result against
cuBLAS's own. Marked ``gpu``; scripts/gpu_check.sh runs them."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

# odd, unaligned (rows not a multiple of 16 bytes), decode-like and TT shapes
SHAPES = [(37, 1001, 333, "TT"), (1, 4095, 257, "NN"), (523, 77, 2049, "TN"), (1000, 1000, 1000, "NT"),
          (3, 5, 7, "TT"), (2048, 64, 4099, "NN")]
TOLERANCE = {"bfloat16": 2e-2, "float16": 5e-3, "tf32": 5e-3, "float32": 1e-4, "float64": 1e-12}


def _operands(m, n, k, layout, dtype, seed):
    import cupy

    from kgen.kernels.gemm.tc import as_float64, to_bf16

    rng = cupy.random.default_rng(seed)
    store = "float32" if dtype in ("tf32", "bfloat16") else dtype

    def stored(rows, cols, transposed):
        x = rng.random((cols, rows) if transposed else (rows, cols), dtype=cupy.float64) * 2 - 1
        x = x.astype(store)
        return to_bf16(x) if dtype == "bfloat16" else x

    a_s, b_s = stored(m, k, layout[0] == "T"), stored(k, n, layout[1] == "T")
    a = a_s.T if layout[0] == "T" else a_s
    b = b_s.T if layout[1] == "T" else b_s
    real = "bfloat16" if dtype == "bfloat16" else store
    ref = as_float64(a, real) @ as_float64(b, real)
    kwargs = {"precision": "tf32"} if dtype == "tf32" else {}
    if dtype == "bfloat16":
        kwargs["dtype"] = "bfloat16"
    return a, b, ref, kwargs, real


def _relerr(c, ref, real) -> float:
    import cupy

    from kgen.kernels.gemm.tc import as_float64

    return float(cupy.abs(as_float64(c, real) - ref).max() / max(float(cupy.abs(ref).max()), 1e-300))


@pytest.fixture
def generated_only(monkeypatch):
    """kgen.gemm with no vendor candidate and no shipped record: every kernel the cost model's pick."""
    import kgen

    monkeypatch.setenv("KGEN_VENDOR", "0")
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    kgen.refresh()
    yield
    kgen.refresh()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "tf32", "float32", "float64"])
def test_untuned_model_picks_are_correct_on_odd_shapes(dtype, generated_only):
    import cupy

    import kgen

    failures = []
    for i, (m, n, k, layout) in enumerate(SHAPES):
        a, b, ref, kwargs, real = _operands(m, n, k, layout, dtype, seed=i)
        choice = kgen.gemm_choice(a, b, **kwargs)
        c = cupy.full((m, n), 0x7FC0 if real == "bfloat16" else float("nan"),
                      dtype=cupy.uint16 if real == "bfloat16" else real)
        kgen.gemm(a, b, c, **kwargs)
        err = _relerr(c, ref, real)
        if not err <= TOLERANCE[dtype]:
            failures.append(f"{m}x{n}x{k} {layout} {choice.config} ({choice.how}): error {err:.2e}")
        assert choice.how in ("model", "default") and choice.config != "cublas"
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_vendor_choice_gives_cublas_result(dtype, monkeypatch):
    import cupy
    import torch

    import kgen
    from kgen.kernels.gemm.tc import torch_view

    monkeypatch.setenv("KGEN_VENDOR", "1")
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    kgen.refresh()
    m, n, k, layout = 523, 77, 2049, "TN"
    a, b, ref, kwargs, real = _operands(m, n, k, layout, dtype, seed=7)
    assert kgen.gemm_choice(a, b, **kwargs).config == "cublas"
    c = kgen.gemm(a, b, **kwargs)
    expected = torch.matmul(torch_view(a, real) if real == "bfloat16" else torch.from_dlpack(a),
                            torch_view(b, real) if real == "bfloat16" else torch.from_dlpack(b))
    got = torch_view(c, real) if real == "bfloat16" else torch.from_dlpack(c)
    assert torch.equal(got, expected)           # the library's own result, bit for bit
    assert _relerr(c, ref, real) <= TOLERANCE[dtype]
    cupy.cuda.get_current_stream().synchronize()
    kgen.refresh()


@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_a_first_call_race_keeps_a_candidate_and_never_writes_the_callers_output(kind, monkeypatch):
    """With the vendor library a candidate and no record, the first call times cuBLAS against
    the generated picks on a scratch output: the caller's NaN-poisoned c is untouched until the
    call itself, which is then right; the kept choice carries the race's time."""
    import cupy
    import torch

    import kgen
    from kgen.dispatch import default_dispatcher
    from kgen.kernels.gemm.tc import torch_view

    monkeypatch.setenv("KGEN_VENDOR", "1")
    monkeypatch.setenv("KGEN_RACE", "1")
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    kgen.refresh()
    for dtype, (m, n, k, layout) in [("bfloat16", (37, 1001, 333, "TT")), ("float32", (523, 77, 2049, "TN")),
                                     ("float16", (8, 24, 296, "NN")), ("tf32", (1000, 1000, 1000, "NT")),
                                     ("float32", (5, 300, 700, "NN")), ("bfloat16", (28, 1, 4099, "NT"))]:
        a, b, ref, kwargs, real = _operands(m, n, k, layout, dtype, seed=13)
        c = cupy.full((m, n), 0x7FC0 if real == "bfloat16" else float("nan"),
                      dtype=cupy.uint16 if real == "bfloat16" else real)
        if kind == "torch":
            a, b, c = (torch_view(x, real) if real == "bfloat16" else torch.from_dlpack(x) for x in (a, b, c))
            kwargs.pop("dtype", None)
        choice = kgen.gemm_choice(a, b, c, **kwargs)
        torch.cuda.synchronize()
        assert choice.how == "raced", (dtype, choice)
        poisoned = cupy.from_dlpack(c.view(torch.uint16) if kind == "torch" and real == "bfloat16" else c)
        assert bool(cupy.isnan(poisoned).all() if real != "bfloat16" else (poisoned == 0x7FC0).all())
        kgen.gemm(a, b, c, **kwargs)
        torch.cuda.synchronize()
        err = _relerr(poisoned, ref, real)
        assert err <= TOLERANCE[dtype], f"{dtype} {m}x{n}x{k} {layout} {choice}: error {err:.2e}"
        kept = [ch for _, ch in default_dispatcher().loaded(choice.family) if ch.how == "raced"]
        assert kept and all(0 < ch.time_ms < 100 for ch in kept)
    kgen.refresh()


@pytest.mark.parametrize("m, n, k, layout", [(4, 256, 176, "TT"), (2, 152, 2024, "NN"), (300, 8, 999, "TN")])
def test_the_first_call_of_an_exact_float32_small_side_is_exact(m, n, k, layout, monkeypatch):
    """The first call itself (its plan races cuBLAS against gemm_skinny) computes float32 exactly,
    whichever wins: never cuBLAS with tf32, which gemm_skinny's own problem would call (an error
    of about 1e-3 where float32 gives 1e-6)."""
    import cupy

    import kgen

    monkeypatch.setenv("KGEN_VENDOR", "1")
    monkeypatch.setenv("KGEN_RACE", "1")
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    kgen.refresh()
    a, b, ref, kwargs, real = _operands(m, n, k, layout, "float32", seed=21)
    for _ in range(2):
        c = kgen.gemm(a, b, **kwargs)
        cupy.cuda.get_current_stream().synchronize()
        assert _relerr(c, ref, real) <= 1e-5, kgen.gemm_choice(a, b, **kwargs)
    kgen.refresh()


@pytest.mark.parametrize("dtype", ["tf32", "float32"])
@pytest.mark.parametrize("m, n, k, layout", [(40, 53, 14440, "TN"), (26, 500, 4099, "NN")])
def test_long_k_small_problems_split_k_up_to_64_and_race_the_exact_family_for_tf32(m, n, k, layout, dtype,
                                                                                    monkeypatch):
    """Long K and a few tiles: the CUDA-core family's model pick splits K 32 or 64 ways (partial
    sums added atomically into beta * C; float32 runs that pick, unraced), and a tf32 request's
    first call races that exact pick beside the tensor-core picks; whichever wins, both calls
    and a beta call are right."""
    import cupy

    import kgen

    monkeypatch.setenv("KGEN_VENDOR", "0")
    monkeypatch.setenv("KGEN_RACE", "1" if dtype == "tf32" else "0")
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    kgen.refresh()
    a, b, ref, kwargs, real = _operands(m, n, k, layout, dtype, seed=13)
    for _ in range(2):
        c = kgen.gemm(a, b, **kwargs)
        cupy.cuda.get_current_stream().synchronize()
        choice = kgen.gemm_choice(a, b, **kwargs)
        assert _relerr(c, ref, real) <= TOLERANCE[dtype], choice
    if dtype == "float32":
        assert "_sk32_" in choice.config or "_sk64_" in choice.config, choice
    kgen.gemm(a, b, c, 1.0, 1.0, **kwargs)              # C = A B + C
    cupy.cuda.get_current_stream().synchronize()
    assert _relerr(c, 2 * ref, real) <= TOLERANCE[dtype], choice
    kgen.refresh()


@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_staged_operands_run_the_hopper_family_and_are_correct(kind, generated_only):
    """Rows of an odd length are copied into padded rows for TMA; on PyTorch tensors, on the
    caller's (side) stream."""
    import cupy
    import torch

    import kgen
    from kgen.kernels.gemm.tc import torch_view

    for dtype, (m, n, k, layout) in [("bfloat16", (1000, 1000, 1001, "NN")), ("float16", (4096, 512, 4095, "TT"))]:
        a, b, ref, kwargs, real = _operands(m, n, k, layout, dtype, seed=3)
        choice = kgen.gemm_choice(a, b, **kwargs)
        assert choice.family == "gemm_wgmma" and choice.staged, choice
        if kind == "torch":
            ta, tb = torch_view(a, real), torch_view(b, real)
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                out = kgen.gemm(ta, tb)
                out = kgen.gemm(ta, tb)            # the plan's buffer for this stream, reused
            side.synchronize()
            c = cupy.from_dlpack(out.view(torch.uint16) if real == "bfloat16" else out)
        else:
            kgen.gemm(a, b, **kwargs)
            c = kgen.gemm(a, b, **kwargs)
        err = _relerr(c, ref, real)
        assert err <= TOLERANCE[dtype], f"{dtype} {m}x{n}x{k} {layout} {choice.config}: error {err:.2e}"


@pytest.mark.parametrize("itemsize", [2, 4])
def test_stage_rows_copies_odd_rows_at_any_offset_into_aligned_rows(itemsize):
    """The staging copy: rows of odd length that start at odd element offsets, more rows than
    the grid's y holds, the tail of each padded row zeroed and nothing past it written."""
    import cupy

    from kgen.kernels.gemm.staging import padded_ld, stage_rows, unstage_rows

    dtype = cupy.uint16 if itemsize == 2 else cupy.uint32
    rng = cupy.random.default_rng(11)
    for rows, cols, offset in [(3, 5, 1), (257, 1001, 3), (70001, 3, 1), (9, 4099, 0)]:
        ld = cols + 7                                    # a source row stride that is not the row length
        base = rng.integers(1, 2 ** (8 * itemsize) - 1, size=rows * ld + offset, dtype=cupy.uint64).astype(dtype)
        src = base[offset:offset + (rows - 1) * ld + cols]
        dst_ld = padded_ld(cols, "float16" if itemsize == 2 else "float32")
        dst = cupy.full((rows + 1, dst_ld), 0xAB, dtype=dtype)          # one more row: must stay untouched
        stage_rows(src.data.ptr, ld, dst.data.ptr, dst_ld, rows, cols, itemsize)
        cupy.cuda.get_current_stream().synchronize()
        want = cupy.lib.stride_tricks.as_strided(src, (rows, cols), (ld * itemsize, itemsize))
        assert bool((dst[:rows, :cols] == want).all()), (rows, cols, offset)
        per = 16 // itemsize
        tail = dst[:rows, cols:min(dst_ld, -(-cols // per) * per)]
        assert tail.size == 0 or int(tail.max()) == 0                      # the last vector's padding: zeros
        assert bool((dst[rows] == 0xAB).all())
        back = cupy.full(rows * ld + offset + 5, 0xCD, dtype=dtype)         # and the way back
        unstage_rows(dst.data.ptr, dst_ld, back[offset:].data.ptr, ld, rows, cols, itemsize)
        cupy.cuda.get_current_stream().synchronize()
        got = cupy.lib.stride_tricks.as_strided(back[offset:], (rows, cols), (ld * itemsize, itemsize))
        assert bool((got == want).all()), (rows, cols, offset)
        gaps = cupy.lib.stride_tricks.as_strided(back[offset + cols:], (rows, ld - cols), (ld * itemsize, itemsize))
        assert bool((gaps == 0xCD).all()) and bool((back[:offset] == 0xCD).all())   # nothing else written


@pytest.mark.parametrize("kind", ["cupy", "torch"])
def test_an_unaligned_output_is_written_by_the_kernel_or_through_padded_rows_and_is_correct(kind, generated_only):
    """An output whose rows TMA cannot store, large enough to matter: where N itself makes them
    so (N = 1001 half values), a TMA-store config writes them a row at a time and nothing is
    staged; where only the caller's C does (N = 1000, C a view of rows 1001 wide), C goes
    through padded rows. A new output, and beta * C read from the caller's C; PyTorch on a side
    stream."""
    import cupy
    import torch

    import kgen
    from kgen.kernels.gemm.tc import as_float64, to_bf16, torch_view

    cases = [("float16", (4096, 1001, 16, "NN"), 0), ("bfloat16", (3001, 1003, 40, "TN"), 0),
             ("float16", (4096, 1000, 16, "NN"), 1)]
    for dtype, (m, n, k, layout), pad in cases:
        a, b, ref, kwargs, real = _operands(m, n, k, layout, dtype, seed=5)
        rng = cupy.random.default_rng(9)
        c0 = (rng.random((m, n + pad), dtype=cupy.float64) * 2 - 1).astype(cupy.float32)
        c0 = c0.astype(cupy.float16) if real == "float16" else c0
        c0 = to_bf16(c0) if real == "bfloat16" else c0
        view = c0[:, :n]
        choice = kgen.gemm_choice(a, b, view, **kwargs)
        assert choice.family == "gemm_wgmma", choice
        by_tma = "_ts" in choice.config                            # a config storing by TMA
        assert ("c" in choice.staged) == (by_tma and pad == 1), (choice, pad)
        want = 0.5 * ref + 2.0 * as_float64(view, real)
        if kind == "torch":
            ta, tb = torch_view(a, real), torch_view(b, real)
            whole = torch_view(c0.copy(), real)
            tc = whole[:, :n]
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                out = kgen.gemm(ta, tb)
                out = kgen.gemm(ta, tb)                               # the plan's buffer, reused
                kgen.gemm(ta, tb, tc, alpha=0.5, beta=2.0)
            side.synchronize()
            new = cupy.from_dlpack(out.view(torch.uint16) if real == "bfloat16" else out)
            acc = cupy.from_dlpack(tc.view(torch.uint16) if real == "bfloat16" else tc)
            after = cupy.from_dlpack(whole.view(torch.uint16) if real == "bfloat16" else whole)
        else:
            new = kgen.gemm(a, b, **kwargs)
            after = c0.copy()
            acc = after[:, :n]
            kgen.gemm(a, b, acc, alpha=0.5, beta=2.0, **kwargs)
        assert _relerr(new, ref, real) <= TOLERANCE[dtype], f"{dtype} {m}x{n}x{k}: new output"
        err = float(cupy.abs(as_float64(acc, real) - want).max()) / float(cupy.abs(want).max())
        assert err <= 2 * TOLERANCE[dtype], f"{dtype} {m}x{n}x{k}: beta, error {err:.2e}"
        if pad:                                                      # the column past the view is untouched
            assert bool((after[:, n:].view(cupy.uint16) == c0[:, n:].view(cupy.uint16)).all())
