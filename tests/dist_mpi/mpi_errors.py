"""Failures: ranks that disagree all raise the same MismatchError (none hangs); bad layouts,
grids and arguments raise before any communication, even on one rank alone."""

from __future__ import annotations

import numpy as np
import pytest
from common import everywhere

import kgen.dist as kd
from kgen.errors import DistLayoutError, DtypeError, MismatchError, ShapeError


def one_message(err) -> str:
    """Every rank's message; they must all be equal."""
    messages = kd.context().comm.allgather_object(str(err))
    assert len(set(messages)) == 1, messages
    return messages[0]


def test_shards_of_the_wrong_shape_raise_on_every_rank():
    world, me = kd.world_size(), kd.rank()
    rows = 3 if me == world - 1 else 2                 # the last rank's shard is one row too many
    with pytest.raises(MismatchError) as info:
        kd.from_local(np.zeros((rows, 4)), "rows", (2 * world, 4))
    assert f"rank {world - 1}: its shard is 3x4" in one_message(info.value)


@pytest.mark.skipif("kd.world_size() < 2", reason="needs two ranks to disagree")
def test_ranks_disagreeing_on_shape_dtype_layout_or_operation_all_raise():
    me = kd.rank()
    with pytest.raises(MismatchError, match="ranks disagree on from_global") as info:
        kd.from_global(np.zeros((4, 4 + (me == 1))), "rows")
    assert "rank 1 has" in one_message(info.value)
    with pytest.raises(MismatchError, match="ranks disagree on from_local"):
        kd.from_local(np.zeros((2, 2), np.float32 if me else np.float64), "replicated", (2, 2))
    a = kd.from_global(np.ones((4, 4)), "rows")
    b = kd.from_global(np.ones((4, 4)), "cols")
    with pytest.raises(MismatchError, match="ranks disagree on gemm") as info:
        kd.gemm(a, b, algorithm="summa" if me == 0 else "allgather")
    one_message(info.value)
    with pytest.raises(MismatchError, match="ranks disagree on redistribute"):
        a.redistribute("cols" if me == 0 else "replicated")
    with pytest.raises(MismatchError):
        (a if me else b).sum(axis=0)
    assert np.array_equal((a @ b).to_global(), np.full((4, 4), 4.0))     # and the ranks still work


def test_bad_layouts_and_arguments_raise_before_any_communication():
    x = np.ones((4, 4))
    a = kd.from_global(x, "rows")
    wide = kd.from_global(np.ones((3, 4)), "rows")
    before = kd.traffic().snapshot()
    if kd.rank() == 0:                                 # alone: a collective would hang
        with pytest.raises(DistLayoutError, match="does not fit"):
            kd.from_global(x, kd.block2d((3, 5)))
        with pytest.raises(DistLayoutError, match="unknown layout"):
            kd.from_global(x, "diagonal")
        with pytest.raises(DistLayoutError, match="at least 1x1"):
            a.redistribute(kd.cyclic2d((0, 1)))
        with pytest.raises(DistLayoutError):
            kd.gemm(a, a, layout=kd.block2d((kd.world_size() + 1, 1)))
        with pytest.raises(ShapeError, match="inner dimensions"):
            kd.gemm(a, wide, algorithm="summa")
        with pytest.raises(DtypeError):
            kd.gemm(a, a.astype("float32"))
        with pytest.raises(DtypeError):
            a + a.astype("float32")
        with pytest.raises(ShapeError):
            a + wide
        with pytest.raises(DistLayoutError, match="redistribute"):
            a + a.T
    everywhere(kd.traffic().received == before.received)
