"""A two-layer MLP, tensor parallel on DistMatrix: forward and backward, checked against NumPy.

    mpiexec -n 2 python examples/mlp_tensor_parallel.py

Megatron's split: W1 by columns and W2 by rows, so each rank holds some hidden units and
the matching rows of W2. The batch X is on every rank.

    H  = relu(X @ W1)     X replicated, W1 cols: H cols, nothing moves
    Y  = H @ W2           H cols, W2 rows (the hidden units split alike): partial products,
                          reduce-scattered: Y rows (each rank its part of the batch)
    dY = (Y - T) / batch  the loss 0.5 * |Y - T|^2 / batch
    dW2 = H.T @ dY        in W2's layout
    dH = dY @ W2.T        in H's layout
    dZ = dH * (H > 0)
    dW1 = X.T @ dZ        X.T replicated, dZ cols: nothing moves
    dX = dZ @ W1.T        reduce-scattered, like Y

kgen.dist picks each product's algorithm with its cost model; the example prints them.
"""

from __future__ import annotations

import numpy as np

import kgen.dist as kd

BATCH, D_IN, HIDDEN, D_OUT = 33, 20, 48, 10          # odd on purpose: nothing divides evenly


def chosen(A, B, layout=None) -> str:
    """The algorithm kgen.dist.gemm picks for A @ B (the cheapest under its cost model)."""
    return min(kd.gemm_costs(A, B, layout=layout), key=lambda e: e.seconds).algorithm


def main() -> None:
    kd.init()
    me = kd.rank()
    rng = np.random.default_rng(0)                    # the same numbers on every rank
    x = rng.standard_normal((BATCH, D_IN))
    w1 = rng.standard_normal((D_IN, HIDDEN)) / np.sqrt(D_IN)
    w2 = rng.standard_normal((HIDDEN, D_OUT)) / np.sqrt(HIDDEN)
    t = rng.standard_normal((BATCH, D_OUT))

    X = kd.from_global(x, "replicated")
    W1 = kd.from_global(w1, "cols")
    W2 = kd.from_global(w2, "rows")
    T = kd.from_global(t, "rows")
    steps = []

    def product(name, A, B, layout=None):
        steps.append(f"{name}: {chosen(A, B, layout)}")
        return kd.gemm(A, B, layout=layout)

    # forward
    H = product("X @ W1", X, W1).apply(lambda z: np.maximum(z, 0))
    Y = product("H @ W2", H, W2)
    R = Y.redistribute(T.layout) - T
    loss = 0.5 * R.norm() ** 2 / BATCH
    # backward
    dY = R / BATCH
    dW2 = product("H.T @ dY", H.T, dY, layout=W2.layout)
    dH = product("dY @ W2.T", dY, W2.T, layout=H.layout)
    dZ = dH * H.apply(lambda h: (h > 0).astype(h.dtype))
    dW1 = product("X.T @ dZ", X.T, dZ, layout=W1.layout)
    dX = product("dZ @ W1.T", dZ, W1.T)

    # the same in NumPy
    h = np.maximum(x @ w1, 0)
    y = h @ w2
    dy = (y - t) / BATCH
    dh = dy @ w2.T
    dz = dh * (h > 0)
    want = {"Y": y, "dW2": h.T @ dy, "dW1": x.T @ dz, "dX": dz @ w1.T}
    got = {"Y": Y, "dW2": dW2, "dW1": dW1, "dX": dX}
    for name, value in got.items():
        np.testing.assert_allclose(value.to_global(), want[name], rtol=1e-10, atol=1e-12, err_msg=name)
    assert abs(loss - 0.5 * np.sum((y - t) ** 2) / BATCH) < 1e-10
    assert dW1.layout == W1.layout and dW2.layout == W2.layout

    received = kd.context().comm.allgather_object(kd.traffic().received)
    if me == 0:
        print("\n".join(steps))
        print(f"loss {loss:.6f}; bytes received per rank {received}")
        print(f"forward and backward on {kd.world_size()} ranks: every result matches NumPy")
    kd.finalize()


if __name__ == "__main__":
    main()
