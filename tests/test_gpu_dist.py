"""kgen.dist's nccl backend at world size 1 on one GPU: shards stay CuPy arrays on the device
through every operation, each against CuPy on the same numbers; the communicator's collectives
at one rank; the GEMM algorithms' local products through kgen.gemm."""

from __future__ import annotations

import numpy as np
import pytest

import kgen.dist as kd

pytestmark = pytest.mark.gpu
LAYOUTS = ["replicated", "rows", "cols", "block2d", kd.cyclic2d(block=(3, 5))]


@pytest.fixture()
def nccl():
    import cupy

    from kgen.dist.runtime import gpu_backend_missing

    missing = gpu_backend_missing()
    if missing:
        pytest.skip(f"no nccl backend here: {missing}")
    ctx = kd.init("nccl")
    yield cupy, ctx
    kd.finalize()


def _rand(cupy, *shape, dtype="float32", seed=0):
    return cupy.asarray(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def test_init_takes_the_gpu_and_auto_picks_nccl(nccl):
    cupy, ctx = nccl
    assert (ctx.backend, kd.rank(), kd.world_size(), ctx.compute.name) == ("nccl", 0, 1, "kgen")
    assert kd.init() is ctx                              # auto: nccl where a GPU is seen


@pytest.mark.parametrize("src", LAYOUTS)
def test_shards_stay_on_the_device_through_redistribution(nccl, src):
    cupy, _ = nccl
    x = _rand(cupy, 37, 29)
    a = kd.from_global(x, src)
    assert isinstance(a.local, cupy.ndarray)
    for dst in LAYOUTS:
        b = a.redistribute(dst)
        assert isinstance(b.local, cupy.ndarray)
        whole = b.to_global()
        assert isinstance(whole, cupy.ndarray) and bool((whole == x).all())
    host = kd.from_global(cupy.asnumpy(x), src, root=0)      # a host matrix: scattered from the root
    assert bool((host.to_global(root=0) == x).all())


@pytest.mark.parametrize("algorithm", kd.ALGORITHMS)
@pytest.mark.parametrize("dtype, tol", [("float32", 1e-4), ("float16", 2e-2), ("float64", 1e-10)])
def test_gemm_algorithms_against_cupy(nccl, algorithm, dtype, tol):
    cupy, _ = nccl
    a, b, c = _rand(cupy, 67, 45, dtype=dtype), _rand(cupy, 45, 38, dtype=dtype, seed=1), \
        _rand(cupy, 67, 38, dtype=dtype, seed=2)
    A, B, C = kd.from_global(a, "rows"), kd.from_global(b, "cols"), kd.from_global(c, "block2d")
    out = kd.gemm(A, B, C, alpha=0.5, beta=2.0, algorithm=algorithm)
    got = out.to_global().astype(cupy.float64)
    want = 0.5 * a.astype(cupy.float64) @ b.astype(cupy.float64) + 2.0 * c.astype(cupy.float64)
    assert out.dtype == np.dtype(dtype) and isinstance(out.local, cupy.ndarray)
    assert float(cupy.abs(got - want).max() / cupy.abs(want).max()) < tol


@pytest.mark.parametrize("algorithm", ["allgather", "reduce_scatter", "summa"])
def test_pieces_overlapped_on_a_second_stream_give_the_product(nccl, algorithm):
    """Each piece's collective on the communicator's own stream, its GEMM on the caller's
    (a stream of its own here, so nothing is ordered by the legacy default stream): the
    product in pieces against float64."""
    cupy, _ = nccl
    a, b, c = _rand(cupy, 67, 45), _rand(cupy, 45, 38, seed=1), _rand(cupy, 67, 38, seed=2)
    want = 0.5 * a.astype(cupy.float64) @ b.astype(cupy.float64) + 2.0 * c.astype(cupy.float64)
    la, lb = {"allgather": ("rows", "cols"), "reduce_scatter": ("cols", "rows")}.get(algorithm, ("block2d",) * 2)
    with cupy.cuda.Stream(non_blocking=True) as stream:
        A, B, C = kd.from_global(a, la), kd.from_global(b, lb), kd.from_global(c, "rows")
        for chunks in (2, 5):                           # SUMMA: panels of 16 (3 of them), chunks not used
            got = kd.gemm(A, B, C, alpha=0.5, beta=2.0, algorithm=algorithm, chunks=chunks, panel=16).to_global()
            assert float(cupy.abs(got.astype(cupy.float64) - want).max() / cupy.abs(want).max()) < 1e-4, chunks
        stream.synchronize()


def test_elementwise_reductions_and_norm(nccl):
    cupy, _ = nccl
    x, y = _rand(cupy, 33, 20), _rand(cupy, 33, 20, seed=1)
    X, Y = kd.from_global(x, "rows"), kd.from_global(y, "rows")
    z = (2 * X + Y - X * Y).apply(lambda v: np.maximum(v, 0))
    assert bool(cupy.allclose(z.to_global(), cupy.maximum(2 * x + y - x * y, 0)))
    assert np.isclose(float(X.sum()), float(x.sum()), rtol=1e-5)
    assert bool(cupy.allclose(X.sum(axis=0).to_global(), x.sum(axis=0, keepdims=True), rtol=1e-5))
    assert bool(cupy.allclose(X.max(axis=1).to_global(), x.max(axis=1, keepdims=True)))
    assert np.isclose(X.norm(), float(cupy.linalg.norm(x.astype(cupy.float64))))


def test_the_communicator_at_one_rank(nccl):
    cupy, ctx = nccl
    comm = ctx.comm
    x = cupy.arange(10, dtype=cupy.float32)
    assert bool((comm.alltoallv(x, [10], [10]) == x).all())
    assert bool((comm.allgatherv(x, [10]) == x).all()) and bool((comm.gatherv(x, [10], 0) == x).all())
    assert bool((comm.bcast(x, 0) == x).all())
    half = x.astype(cupy.float16)
    assert comm.allreduce(half).dtype == cupy.float16 and bool((comm.allreduce(x, "max") == x).all())
    assert bool((comm.reduce_scatter(x, [10]) == x).all())
    row, col = ctx.grid_comms(kd.from_global(cupy.ones((4, 4)), "block2d").layout)
    assert (row.size, col.size) == (1, 1)
    assert kd.traffic().sent == 0                          # one rank sends nothing


def test_memory_stats_show_the_shards_and_the_pool(nccl):
    cupy, _ = nccl
    a = kd.from_global(_rand(cupy, 300, 200), "rows")
    stats = kd.memory_stats()
    assert stats["shard_bytes"] >= a.local.nbytes and stats["pool_used_bytes"] >= stats["shard_bytes"]
    assert stats["pool_held_bytes"] >= stats["pool_used_bytes"] and stats["shard_peak_bytes"] >= stats["shard_bytes"]
