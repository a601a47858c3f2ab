"""kgen.dist's layout math and redistribution plans, with no MPI: which rank holds each
element, transposes, and every layout pair's plan run through an in-memory exchange and
checked against brute force (the result, and that each rank receives exactly the elements
it lacks)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kgen.dist.layout import (Layout, block2d, block_start, cyclic2d, default_grid, local_shape, owned, owners,
                              part_indices, received_elements, resolve)
from kgen.dist.plan import plan
from kgen.errors import DistLayoutError

SHAPES = [(0, 3), (1, 1), (2, 9), (7, 5), (13, 11)]


def layouts(world: int) -> list[Layout]:
    """A spread of every kind for ``world`` ranks (every grid of block2d, two cyclic blocks,
    and the col-ordered transposes)."""
    out = [resolve(name, world) for name in ("replicated", "rows", "cols")]
    grids = [(p, world // p) for p in range(1, world + 1) if world % p == 0]
    out += [resolve(block2d(g), world) for g in grids]
    out += [resolve(cyclic2d((1, 1)), world), resolve(cyclic2d((2, 3)), world)]
    out += [lay.T for lay in out if lay.kind in ("block2d", "cyclic2d") and lay.grid[0] != lay.grid[1]][:1]
    return out


def test_resolve_names_and_default_grids():
    assert resolve("rows", 3).grid == (3, 1) and resolve("cols", 3).grid == (1, 3)
    assert resolve("replicated", 5).grid == (1, 1)
    assert [default_grid(p) for p in (1, 2, 3, 4, 6, 7, 8, 9)] == [(1, 1), (1, 2), (1, 3), (2, 2), (2, 3),
                                                                     (1, 7), (2, 4), (3, 3)]
    assert resolve(block2d((4, 1)), 4).grid == (4, 1)
    lay = resolve(cyclic2d((2, 3)), 6)
    assert (lay.grid, lay.block, str(lay)) == ((2, 3), (2, 3), "cyclic2d(2x3, block 2x3)")


@pytest.mark.parametrize("spec, world, needle", [
    ("diagonal", 2, "unknown layout"),
    (block2d((2, 3)), 4, "does not fit 4 ranks"),
    (block2d((0, 4)), 4, "does not fit"),
    ("rows", 0, "1 or more ranks"),
    (Layout("rows", (2, 2)), 4, "grid 4x1"),
    (cyclic2d((0, 2)), 4, "at least 1x1"),
    (block2d((1.5, 2)), 3, "whole numbers"),
    (block2d(order="diagonal"), 4, "rank order"),
    (42, 4, "a layout is a name"),
])
def test_bad_layouts_raise_with_a_remedy(spec, world, needle):
    with pytest.raises(DistLayoutError, match=needle) as info:
        resolve(spec, world)
    assert info.value.remedy


def test_balanced_and_cyclic_parts():
    assert [block_start(10, 4, i) for i in range(5)] == [0, 3, 6, 8, 10]
    assert part_indices(10, 3, 2, block=2).tolist() == [4, 5]
    assert part_indices(11, 3, 0, block=2).tolist() == [0, 1, 6, 7]
    for n, parts, block in itertools.product((0, 1, 5, 17), (1, 2, 3, 4), (None, 1, 2, 5)):
        got = np.sort(np.concatenate([part_indices(n, parts, i, block) for i in range(parts)]))
        assert got.tolist() == list(range(n))


@pytest.mark.parametrize("world", [1, 2, 3, 4, 6])
def test_every_element_has_one_owner_and_shards_match_owners(world):
    for lay, shape in itertools.product(layouts(world), SHAPES):
        own = owners(lay, shape)
        count = np.zeros(shape, dtype=int)
        for r in range(world):
            rows, cols = owned(lay, shape, r)
            assert np.all(np.diff(rows) > 0) and np.all(np.diff(cols) > 0)
            assert local_shape(lay, shape, r) == (len(rows), len(cols))
            count[np.ix_(rows, cols)] += 1
            if not lay.replicated:
                assert np.all(own[np.ix_(rows, cols)] == r)
        assert np.all(count == (world if lay.replicated else 1)), (lay, shape)


@pytest.mark.parametrize("world", [1, 2, 4, 6])
def test_transpose_keeps_every_element_on_its_rank(world):
    for lay, (m, n) in itertools.product(layouts(world), SHAPES):
        assert np.array_equal(owners(lay.T, (n, m)), owners(lay, (m, n)).T), lay
        assert lay.T.T == lay


def simulate(src: Layout, dst: Layout, x: np.ndarray, world: int):
    """Every rank's plan, exchanged in memory: (new shards, elements each rank received)."""
    shape = x.shape
    old = [x[np.ix_(*owned(src, shape, r))] for r in range(world)]
    plans = [plan(src, dst, shape, world, r) for r in range(world)]
    new = [np.full(local_shape(dst, shape, r), np.nan) for r in range(world)]
    for r, p in enumerate(plans):
        new[r][np.ix_(*p.keep_dst)] = old[r][np.ix_(*p.keep_src)]
    mail = {(r, piece.peer): old[r][np.ix_(piece.rows, piece.cols)] for r, p in enumerate(plans) for piece in p.sends}
    received = [0] * world
    for r, p in enumerate(plans):
        for piece in p.recvs:
            block = mail.pop((piece.peer, r))
            new[r][np.ix_(piece.rows, piece.cols)] = block
            received[r] += block.size
    assert not mail, "sent but not received"
    return new, received


def lacking(src: Layout, dst: Layout, shape, world: int, rank: int) -> int:
    """Brute force: elements ``rank`` holds in dst and not in src."""
    def mask(lay):
        m = np.zeros(shape, dtype=bool)
        m[np.ix_(*owned(lay, shape, rank))] = True
        return m
    return int(np.sum(mask(dst) & ~mask(src)))


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_every_layout_pair_moves_exactly_the_elements_whose_owner_changes(world):
    for shape in [(1, 1), (7, 5), (13, 11)]:
        x = np.arange(shape[0] * shape[1], dtype=float).reshape(shape)
        for src, dst in itertools.product(layouts(world), repeat=2):
            new, received = simulate(src, dst, x, world)
            for r in range(world):
                assert np.array_equal(new[r], x[np.ix_(*owned(dst, shape, r))]), (src, dst, r)
                assert received[r] == lacking(src, dst, shape, world, r) == received_elements(src, dst, shape, r)


def test_a_plan_counts_what_it_sends_and_receives():
    p = plan(resolve("rows", 2), resolve("cols", 2), (5, 4), world=2, rank=0)
    assert p.counts(2) == ([0, 6], [0, 4])      # rank 0 holds rows 0-2, keeps their columns 0-1
