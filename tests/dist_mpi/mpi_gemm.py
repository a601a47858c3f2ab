"""Each distributed GEMM algorithm with odd, non-divisible shapes and every supported dtype,
against NumPy on the gathered result; alpha, beta and C; the result's layout; A @ B."""

from __future__ import annotations

import numpy as np
import pytest
from common import close, everywhere, random

import kgen.dist as kd
from kgen.dist.layout import resolve
from kgen.errors import InputError

SHAPES = [(1, 1, 1), (2, 1, 3), (7, 5, 3), (13, 9, 11), (5, 17, 2)]     # m, n, k
INPUTS = [("rows", "cols"), ("cols", "rows"), (kd.block2d(), kd.block2d()),
          ("replicated", kd.cyclic2d((2, 3)))]


@pytest.mark.parametrize("algorithm", kd.ALGORITHMS)
@pytest.mark.parametrize("dtype", kd.supported_dtypes())
def test_algorithm_matches_numpy(algorithm, dtype, rng):
    for (m, n, k), (la, lb) in zip(SHAPES, INPUTS * 2):
        a, b = random(rng, (m, k), dtype), random(rng, (k, n), dtype)
        C = kd.gemm(kd.from_global(a, la), kd.from_global(b, lb), algorithm=algorithm)
        want = a.astype(np.float64) @ b.astype(np.float64)
        assert C.dtype == a.dtype and C.shape == (m, n)
        assert close(C.to_global(), want, dtype), (algorithm, dtype, (m, n, k), la, lb)


@pytest.mark.parametrize("algorithm", kd.ALGORITHMS)
def test_alpha_beta_c_and_the_result_layout(algorithm, rng):
    m, n, k = 9, 7, 5
    a, b, c = random(rng, (m, k), "float64"), random(rng, (k, n), "float64"), random(rng, (m, n), "float64")
    A, B = kd.from_global(a, "rows"), kd.from_global(b, "rows")
    C = kd.from_global(c, kd.cyclic2d((2, 2)))
    out = kd.gemm(A, B, C, alpha=-0.5, beta=2.0, algorithm=algorithm)
    assert out.layout == C.layout
    assert close(out.to_global(), -0.5 * a @ b + 2.0 * c, "float64")
    out = kd.gemm(A, B, alpha=3.0, algorithm=algorithm, layout="replicated")
    everywhere(out.layout.replicated and np.allclose(out.local, 3.0 * a @ b))


def test_matmul_runs_the_modelled_choice(rng):
    world = kd.world_size()
    a, b = random(rng, (64, 48), "float32"), random(rng, (48, 40), "float32")
    A, B = kd.from_global(a, "replicated"), kd.from_global(b, "cols")
    costs = {e.algorithm: e for e in kd.gemm_costs(A, B)}
    assert costs["allgather"].bytes == 0
    before = kd.traffic().snapshot()
    C = A @ B
    everywhere(kd.traffic().received == before.received)   # A already gathered, B already in columns
    assert C.layout == resolve("cols", world) and close(C.to_global(), a @ b, "float32")


def test_model_bytes_match_the_traffic(rng):
    world = kd.world_size()
    a, b = random(rng, (13, 11), "float32"), random(rng, (11, 9), "float32")
    for algorithm, (la, lb) in [("allgather", ("rows", "cols")), ("reduce_scatter", ("cols", "rows")),
                                ("summa", (kd.block2d(), kd.block2d()))]:
        A, B = kd.from_global(a, la), kd.from_global(b, lb)
        predicted = {e.algorithm: e.bytes for e in kd.gemm_costs(A, B)}[algorithm]
        before = kd.traffic().snapshot()
        kd.gemm(A, B, algorithm=algorithm)
        received = kd.traffic().received - before.received
        assert max(kd.context().comm.allgather_object(received)) == predicted, algorithm


def test_summa_on_every_grid_and_transposed_operands(rng):
    world = kd.world_size()
    a, b = random(rng, (11, 6), "float64"), random(rng, (6, 7), "float64")
    for p in [p for p in range(1, world + 1) if world % p == 0]:
        grid = kd.block2d((p, world // p))
        A, B = kd.from_global(a, grid), kd.from_global(b, grid)
        C = kd.gemm(A, B, algorithm="summa")
        assert C.layout == resolve(grid, world) and close(C.to_global(), a @ b, "float64"), grid
        At = kd.from_global(a.T.copy(), grid).T            # col-ordered: SUMMA moves it to its grid first
        for algorithm in kd.ALGORITHMS:
            assert close(kd.gemm(At, B.T.T, algorithm=algorithm).to_global(), a @ b, "float64"), (grid, algorithm)


@pytest.mark.parametrize("algorithm", ["allgather", "reduce_scatter"])
@pytest.mark.parametrize("chunks", [2, 3, 8])
def test_overlapped_pieces_give_the_product_and_move_the_same_bytes(algorithm, chunks, rng):
    """All-gather and reduce-scatter in pieces (each begun before the neighbouring GEMM runs):
    odd shapes (fewer rows than pieces on some ranks), alpha, beta and C, every dtype; the
    received bytes equal one piece's, the collectives are ``chunks`` times as many."""
    la, lb = ("rows", "cols") if algorithm == "allgather" else ("cols", "rows")
    for dtype in kd.supported_dtypes():
        for m, n, k in [(13, 9, 11), (3, 5, 7), (1, 4, 2)]:
            a, b = random(rng, (m, k), dtype), random(rng, (k, n), dtype)
            c = random(rng, (m, n), dtype)
            A, B, C = kd.from_global(a, la), kd.from_global(b, lb), kd.from_global(c, "rows")
            out = kd.gemm(A, B, C, alpha=-0.5, beta=2.0, algorithm=algorithm, chunks=chunks)
            want = -0.5 * (a.astype(np.float64) @ b.astype(np.float64)) + 2.0 * c.astype(np.float64)
            assert close(out.to_global(), want, dtype), (algorithm, chunks, dtype, (m, n, k))
    a, b = random(rng, (29, 11), "float32"), random(rng, (11, 9), "float32")
    A, B = kd.from_global(a, la), kd.from_global(b, lb)
    moved = {}
    for pieces in (1, chunks):
        before = kd.traffic().snapshot()
        kd.gemm(A, B, algorithm=algorithm, chunks=pieces)
        moved[pieces] = (kd.traffic().received - before.received, kd.traffic().messages - before.messages)
    assert moved[chunks][0] == moved[1][0]
    if kd.world_size() > 1:
        assert moved[chunks][1] == chunks * moved[1][1]


def test_pieces_must_be_a_whole_number():
    a = kd.from_global(np.ones((4, 4)), "rows")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InputError):
            kd.gemm(a, a, chunks=bad)
