"""Shapes, layouts and tolerances the MPI tests share."""

from __future__ import annotations

import numpy as np

import kgen.dist as kd
from kgen.dist.dtypes import resolve_dtype
from kgen.dist.layout import resolve

TOLERANCE = {"float64": 1e-12, "float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}


def layouts(world: int) -> list:
    """Every kind, every block2d grid of ``world``, two cyclic blocks and a col-ordered one."""
    out = ["replicated", "rows", "cols"]
    out += [kd.block2d((p, world // p)) for p in range(1, world + 1) if world % p == 0]
    out += [kd.cyclic2d((1, 1)), kd.cyclic2d((2, 3)), resolve(kd.cyclic2d((2, 1)), world).T]
    return out


def random(rng, shape, dtype) -> np.ndarray:
    """Values exactly representable in ``dtype`` (so every rank and NumPy start equal)."""
    return (rng.standard_normal(shape).astype(np.float32)).astype(resolve_dtype(dtype))


def close(got: np.ndarray, want: np.ndarray, dtype: str) -> bool:
    got, want = got.astype(np.float64), want.astype(np.float64)
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    return got.shape == want.shape and bool(np.all(np.abs(got - want) <= TOLERANCE[dtype] * scale))


def everywhere(ok: bool, what="") -> None:
    """Assert ``ok`` on every rank at once: a check that fails on one rank fails on all, so
    no rank goes on to a collective that the others left."""
    oks = kd.context().comm.allgather_object(bool(ok))
    assert all(oks), f"failed on ranks {[r for r, o in enumerate(oks) if not o]}: {what}"
