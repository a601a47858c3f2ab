"""NcclCommunicator's collectives on 1 to 4 thread ranks with no GPU (tests/fake_gpu_ranks.py:
arrays carrying a ``.data.ptr``, a byte-copying NCCL stand-in). What is checked is the
communicator's own bookkeeping — offsets, counts, each rank's own piece, padding of unequal
blocks, the traffic counts — against NumPy; the real NCCL runs in tests/test_gpu_dist.py."""

from __future__ import annotations

import numpy as np
import pytest

import fake_gpu_ranks
from fake_gpu_ranks import device_array, plain


@pytest.fixture
def ranks(monkeypatch):
    return fake_gpu_ranks.rank_runner(monkeypatch)


def _piece(r: int, n: int, dtype=np.float32):
    return device_array(np.arange(n, dtype=dtype) + 100 * r)


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_allgatherv_and_gatherv_with_unequal_and_empty_pieces(ranks, size):
    counts = [(3 * r + 1) % 5 for r in range(size)]            # 1, 4, 2, 0 ...
    want = np.concatenate([np.arange(c, dtype=np.float32) + 100 * r for r, c in enumerate(counts)])

    def body(ctx, rank, size):
        mine = _piece(rank, counts[rank])
        every = ctx.comm.allgatherv(mine, counts)
        at_root = ctx.comm.gatherv(mine, counts, root=size - 1)
        return plain(every), plain(at_root) if at_root is not None else None, ctx.comm.traffic.snapshot()

    for r, (every, at_root, traffic) in enumerate(ranks(size, body)):
        assert np.array_equal(every, want)
        assert (at_root is None) == (r != size - 1) and (at_root is None or np.array_equal(at_root, want))
        assert traffic.received == (sum(counts) - counts[r]) * 4 * (1 + (r == size - 1))


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_alltoallv_moves_each_block_to_its_rank(ranks, size):
    def counts_from(s):
        return [(s + d) % 3 for d in range(size)]         # rank s sends (s + d) % 3 elements to rank d

    def body(ctx, rank, size):
        send_counts = counts_from(rank)
        send = device_array(np.concatenate([np.full(c, 10 * rank + d, np.float64) for d, c in enumerate(send_counts)]))
        return plain(ctx.comm.alltoallv(send, send_counts, [counts_from(s)[rank] for s in range(size)]))

    for r, got in enumerate(ranks(size, body)):
        want = np.concatenate([np.full(counts_from(s)[r], 10 * s + r, np.float64) for s in range(size)])
        assert np.array_equal(got, want)


@pytest.mark.parametrize("size", [1, 2, 3])
def test_bcast_allreduce_and_reduce_scatter(ranks, size):
    counts = [r + 2 for r in range(size)]                    # unequal blocks: padded to the largest

    def body(ctx, rank, size):
        comm = ctx.comm
        buf = device_array(np.arange(5, dtype=np.float32) * 7 if rank == 1 % size else np.zeros(5, np.float32))
        got_b = comm.bcast(buf, root=1 % size)
        summed = comm.allreduce(device_array((np.arange(sum(counts)) + rank).astype(np.float16)), "sum")
        biggest = comm.allreduce(device_array(np.array([rank, -rank], np.float64)), "max")
        block = comm.reduce_scatter(device_array(np.arange(sum(counts), dtype=np.float32) * (rank + 1)), counts)
        return plain(got_b), plain(summed), plain(biggest), plain(block)

    total = sum(range(1, size + 1))
    base = np.arange(sum(counts), dtype=np.float32)
    for r, (got_b, summed, biggest, block) in enumerate(ranks(size, body)):
        assert np.array_equal(got_b, np.arange(5, dtype=np.float32) * 7)
        assert summed.dtype == np.float16
        assert np.array_equal(summed, sum((np.arange(sum(counts)) + q) for q in range(size)).astype(np.float16))
        assert np.array_equal(biggest, [size - 1, 0])
        start = sum(counts[:r])
        assert np.array_equal(block, base[start:start + counts[r]] * total)
