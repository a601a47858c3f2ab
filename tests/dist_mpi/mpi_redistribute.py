"""Every layout pair through redistribute on this many ranks: the result, and the bytes each
rank received equal to the elements it lacked times the itemsize (the minimum); every dtype;
from_global / to_global with and without a root; from_local."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from common import everywhere, layouts, random

import kgen.dist as kd
from kgen.dist.layout import owned, resolve


def lacking(src, dst, shape, rank) -> int:
    """Brute force: elements ``rank`` holds in dst and not in src."""
    def mask(lay):
        m = np.zeros(shape, dtype=bool)
        m[np.ix_(*owned(lay, shape, rank))] = True
        return m
    return int(np.sum(mask(dst) & ~mask(src)))


@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (13, 11)])
def test_every_layout_pair_moves_the_minimum(shape, rng):
    world, me = kd.world_size(), kd.rank()
    x = random(rng, shape, "float32")
    for src, dst in itertools.product(layouts(world), repeat=2):
        a = kd.from_global(x, src)
        before = kd.traffic().received
        b = a.redistribute(dst)
        received = kd.traffic().received - before
        lay_s, lay_d = resolve(src, world), resolve(dst, world)
        everywhere(received == lacking(lay_s, lay_d, shape, me) * 4
                   and np.array_equal(b.local, x[np.ix_(*owned(lay_d, shape, me))]), (src, dst))
        assert np.array_equal(b.to_global(), x), (src, dst)


@pytest.mark.parametrize("dtype", kd.supported_dtypes())
def test_every_dtype_travels_unchanged(dtype, rng):
    x = random(rng, (9, 7), dtype)
    for src, dst in [("rows", "cols"), (kd.block2d(), kd.cyclic2d((2, 2))), ("cols", "replicated")]:
        b = kd.from_global(x, src).redistribute(dst)
        assert b.dtype == x.dtype
        assert np.array_equal(b.to_global().view(np.uint8), x.view(np.uint8))


def test_sent_and_received_bytes_balance_across_ranks(rng):
    x = random(rng, (11, 6), "float64")
    a = kd.from_global(x, kd.cyclic2d((2, 2)))
    before = kd.traffic().snapshot()
    a.redistribute("rows")
    t = kd.traffic()
    sent, received = t.sent - before.sent, t.received - before.received
    totals = kd.context().comm.allgather_object((sent, received))
    assert sum(s for s, _ in totals) == sum(r for _, r in totals)


@pytest.mark.parametrize("layout", ["replicated", "rows", kd.block2d(), kd.cyclic2d((3, 2))])
def test_root_scatter_and_gather(layout, rng):
    world, me = kd.world_size(), kd.rank()
    x = random(rng, (7, 5), "float32")
    root = world - 1
    a = kd.from_global(x if me == root else None, layout, root=root)
    assert np.array_equal(a.to_global(), x)
    got = a.to_global(root=0)
    everywhere(got is None if me != 0 else np.array_equal(got, x))


def test_from_local_and_astype(rng):
    world, me = kd.world_size(), kd.rank()
    x = random(rng, (10, 3), "float64")
    lay = resolve(kd.cyclic2d((3, 1)), world)
    a = kd.from_local(x[np.ix_(*owned(lay, x.shape, me))], lay, x.shape)
    assert np.array_equal(a.to_global(), x)
    h = a.astype("float16")
    assert h.dtype == np.float16 and np.array_equal(h.to_global(), x.astype(np.float16))
    assert a.redistribute(lay) is a
