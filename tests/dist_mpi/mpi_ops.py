"""Elementwise + - * / with scalars, matching layouts and broadcast vectors; transpose;
sum / max over an axis; the Frobenius norm; apply."""

from __future__ import annotations

import numpy as np
import pytest
from common import close, everywhere, layouts, random

import kgen.dist as kd


@pytest.mark.parametrize("dtype", kd.supported_dtypes())
def test_elementwise_with_scalars_and_matching_layouts(dtype, rng):
    x, y = random(rng, (7, 5), dtype), random(rng, (7, 5), dtype)
    f = lambda v: v.astype(np.float64)
    for lay in layouts(kd.world_size()):
        X, Y = kd.from_global(x, lay), kd.from_global(y, lay)
        mine = np.ix_(*X.owned())
        ok = True                                      # each rank checks its shard; one agreement per layout
        for got, want in [(X + Y, f(x) + f(y)), (X - Y, f(x) - f(y)), (X * Y, f(x) * f(y)),
                          (2 * X, 2 * f(x)), (X - 1.5, f(x) - 1.5), (1.5 - X, 1.5 - f(x)),
                          (X / 4, f(x) / 4), (-X, -f(x)), (np.float32(3) * X, 3 * f(x))]:
            ok &= got.dtype == x.dtype and got.layout == X.layout and close(got.local, want[mine], dtype)
        everywhere(ok, lay)
    assert close((X + Y).to_global(), f(x) + f(y), dtype)


def test_broadcast_vectors_and_apply(rng):
    x = random(rng, (6, 5), "float64")
    row, col = random(rng, (1, 5), "float64"), random(rng, (6, 1), "float64")
    R, Cv = kd.from_global(row, "replicated"), kd.from_global(col, "replicated")
    for lay in layouts(kd.world_size()):
        X = kd.from_global(x, lay)
        assert np.array_equal((X + R).to_global(), x + row)
        assert np.array_equal((Cv * X).to_global(), col * x)
        assert np.array_equal(X.apply(lambda v: np.maximum(v, 0)).to_global(), np.maximum(x, 0))


def test_transpose_moves_nothing(rng):
    x = random(rng, (7, 4), "float32")
    for lay in layouts(kd.world_size()):
        X = kd.from_global(x, lay)
        before = kd.traffic().snapshot()
        T = X.T
        everywhere(kd.traffic().received == before.received)
        assert T.shape == (4, 7) and np.array_equal(T.to_global(), x.T)
        assert np.array_equal(T.redistribute("rows").to_global(), x.T)


@pytest.mark.parametrize("dtype", kd.supported_dtypes())
def test_sum_max_and_norm(dtype, rng):
    x = random(rng, (9, 6), dtype)
    f = x.astype(np.float64)
    for lay in layouts(kd.world_size()):
        X = kd.from_global(x, lay)
        assert close(np.asarray(X.sum()), np.asarray(f.sum()), dtype)
        assert close(X.sum(axis=0).to_global(), f.sum(axis=0, keepdims=True), dtype)
        assert close(X.sum(axis=1).to_global(), f.sum(axis=1, keepdims=True), dtype)
        assert X.max(axis=0).layout.replicated and X.max(axis=1).shape == (9, 1)
        assert np.array_equal(X.max(axis=0).to_global(), x.max(axis=0, keepdims=True))
        assert np.array_equal(X.max(axis=1).to_global(), x.max(axis=1, keepdims=True))
        assert X.max() == x.max()
        assert abs(kd.norm(X) - np.linalg.norm(f)) <= 1e-12 * np.linalg.norm(f)


def test_reductions_of_an_empty_block_on_some_ranks(rng):
    x = random(rng, (1, 2), "float32")                # on 3 or 4 ranks, some hold nothing
    for lay in layouts(kd.world_size()):
        X = kd.from_global(x, lay)
        assert close(np.asarray(X.sum()), np.asarray(x.sum()), "float32")
        assert X.max() == x.max()
        assert np.array_equal(X.sum(axis=0).to_global(), x)


def test_memory_stats_count_each_shard_buffer_once(rng):
    import gc

    gc.collect()
    kd.reset_peak()
    base = kd.memory_stats()["shard_bytes"]
    x = random(rng, (40, 30), "float64")
    X = kd.from_global(x, "rows")
    mine = X.local.nbytes
    T = X.T                                           # a view of the same buffer: not counted again
    now = kd.memory_stats()
    assert now["shard_bytes"] - base == mine and now["shard_peak_bytes"] >= now["shard_bytes"]
    Y = X.redistribute("cols")
    assert kd.memory_stats()["shard_bytes"] - base == mine + Y.local.nbytes
    del X, T, Y
    gc.collect()
    after = kd.memory_stats()
    assert after["shard_bytes"] == base and after["shard_peak_bytes"] >= base + mine
    every = kd.memory_stats(all_ranks=True)
    assert len(every) == kd.world_size() and every[kd.rank()]["shard_bytes"] == base
