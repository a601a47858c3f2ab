"""kgen.dist's GPU-rank code paths at 1 to 4 ranks with no GPU (tests/fake_gpu_ranks.py):
shards that refuse NumPy's functions, moved by NcclCommunicator over a byte-copying NCCL
stand-in (sub-communicators included). Every layout pair, the three GEMM algorithms and the
reductions against NumPy — the multi-GPU paths one GPU cannot run."""

from __future__ import annotations

import numpy as np
import pytest

from kgen.dist.cost import ALGORITHMS
from kgen.dist.gemm import gemm
from kgen.dist.layout import cyclic2d, owned, resolve
from kgen.dist.matrix import DistMatrix

import fake_gpu_ranks
from fake_gpu_ranks import Device, device_array, plain

LAYOUTS = ["replicated", "rows", "cols", "block2d", cyclic2d(block=(2, 3))]


@pytest.fixture
def ranks(monkeypatch):
    return fake_gpu_ranks.rank_runner(monkeypatch)


def _matrix(ctx, x, layout, rank, size):
    lay = resolve(layout, size)
    shard = device_array(np.ascontiguousarray(x[np.ix_(*owned(lay, x.shape, rank))]))
    return DistMatrix(ctx, lay, x.shape, x.dtype, shard)


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_every_layout_pair_on_device_threads(ranks, size):
    x = np.random.default_rng(size).standard_normal((13, 11)).astype(np.float32)

    def body(ctx, rank, size):
        bad = []
        for src in LAYOUTS:
            a = _matrix(ctx, x, src, rank, size)
            for dst in LAYOUTS:
                b = a.redistribute(dst)
                if not isinstance(b.local, Device) or not np.array_equal(plain(b.to_global()), x):
                    bad.append((src, dst))
        return bad, ctx.comm.traffic.received

    for bad, received in ranks(size, body):
        assert bad == [] and (received > 0) == (size > 1)       # the data went through the NCCL stand-in


@pytest.mark.parametrize("size", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype, tol", [("float32", 1e-5), ("float16", 2e-2), ("float64", 1e-12)])
def test_gemm_algorithms_and_reductions_on_device_threads(ranks, size, dtype, tol):
    rng = np.random.default_rng(7)
    a, b, c = (rng.standard_normal(s).astype(dtype) for s in ((9, 14), (14, 10), (9, 10)))
    want = 0.5 * a.astype(np.float64) @ b.astype(np.float64) + 2.0 * c.astype(np.float64)

    def body(ctx, rank, size):
        A, B, C = _matrix(ctx, a, "rows", rank, size), _matrix(ctx, b, "cols", rank, size), \
            _matrix(ctx, c, "block2d", rank, size)
        errors = {}
        for algorithm in ALGORITHMS:
            out = gemm(A, B, C, alpha=0.5, beta=2.0, algorithm=algorithm, panel=4)
            got = plain(out.to_global()).astype(np.float64)
            errors[algorithm] = float(np.abs(got - want).max() / np.abs(want).max())
        total = float(A.sum())
        columns = plain(A.max(axis=0).to_global())
        return errors, total, columns, A.norm()

    for errors, total, columns, norm in ranks(size, body):
        assert max(errors.values()) < tol, errors
        assert np.isclose(total, a.astype(np.float64).sum(), rtol=1e-3, atol=1e-2)
        assert np.array_equal(columns, a.max(axis=0, keepdims=True))
        assert np.isclose(norm, np.linalg.norm(a.astype(np.float64)), rtol=1e-6)


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_pieces_begun_on_the_communicators_stream_on_device_threads(ranks, size):
    """All-gather and reduce-scatter in pieces and SUMMA's begun broadcasts on GPU ranks: each
    collective issued on the communicator's own stream (a stand-in that makes it current while
    it issues), the caller's stream told to wait on it; the product against NumPy."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((11, 7)), rng.standard_normal((7, 5))
    want = a @ b

    def body(ctx, rank, size):
        from fake_gpu_ranks import _Stream

        errors = {}
        for algorithm, la, lb in (("allgather", "rows", "cols"), ("reduce_scatter", "cols", "rows"),
                                  ("summa", "block2d", "block2d")):
            A, B = _matrix(ctx, a, la, rank, size), _matrix(ctx, b, lb, rank, size)
            waits = len(_Stream.current().waited)
            out = gemm(A, B, algorithm=algorithm, chunks=3, panel=2)
            errors[algorithm] = (float(np.abs(plain(out.to_global()) - want).max()),
                                 len(_Stream.current().waited) - waits)
        return errors

    for errors in ranks(size, body):
        for algorithm, (error, waits) in errors.items():
            assert error < 1e-12 and waits >= 3, (algorithm, error, waits)    # 3 pieces, or 4 panels x 2
