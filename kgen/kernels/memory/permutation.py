"""Axis permutations of row-major arrays, reduced to their canonical form: the fewest dimensions
that move the same bytes. Dimensions of size 1 are dropped, and input dimensions that stay
adjacent and in order under the permutation are merged into one.

``axes[i]`` is the input dimension that becomes output dimension ``i`` (NumPy's
``transpose(x, axes)``, PyTorch's ``x.permute(*axes)``).

>>> canonical((64, 256, 56, 56), (0, 2, 3, 1))        # NCHW -> NHWC: a batched 2-D transpose
((64, 256, 3136), (0, 2, 1))
>>> canonical((64, 56, 56, 256), (0, 3, 1, 2))        # NHWC -> NCHW
((64, 3136, 256), (0, 2, 1))
>>> canonical((3, 1, 5), (1, 0, 2))                   # moves nothing: a copy
((15,), (0,))
>>> padded((64, 256, 3136), (0, 2, 1))                # the form a problem key holds
((1, 64, 256, 3136), (0, 1, 3, 2))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Sequence

from kgen.errors import ShapeError

MAX_RANK = 4            # canonical dimensions a kernel takes


def check_axes(axes: Iterable[int], ndim: int) -> tuple[int, ...]:
    """``axes`` as a tuple of ints, checked to be a permutation of ``range(ndim)`` (negative
    axes count from the end, as in NumPy); a ShapeError saying what is wrong otherwise."""
    try:
        given = tuple(axes)
    except TypeError:
        raise ShapeError(f"axes {axes!r} is not a sequence of dimensions",
                         remedy=f"pass a permutation of 0..{ndim - 1}, e.g. {tuple(reversed(range(ndim)))}") from None
    out = []
    for ax in given:
        if isinstance(ax, bool) or not hasattr(ax, "__index__"):
            raise ShapeError(f"axes {given!r} holds {ax!r}, which is not an integer",
                             remedy=f"pass a permutation of 0..{ndim - 1}")
        i = ax.__index__()
        if not -ndim <= i < ndim:
            raise ShapeError(f"axis {i} is out of range for an array of {ndim} dimensions",
                             remedy=f"pass a permutation of 0..{ndim - 1}")
        out.append(i % ndim if ndim else i)
    if len(out) != ndim or sorted(out) != list(range(ndim)):
        raise ShapeError(f"axes {given!r} is not a permutation of the {ndim} dimensions 0..{ndim - 1}",
                         remedy="name every dimension exactly once, e.g. (0, 2, 3, 1) for NCHW -> NHWC")
    return tuple(out)


def canonical(shape: Sequence[int], axes: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape, axes) of the fewest dimensions that permute the same bytes: size-1 dimensions
    dropped, runs of input dimensions kept adjacent and in order merged. An identity (or an
    array of one element) becomes one dimension, a copy."""
    axes = check_axes(axes, len(shape))
    kept = [d for d in range(len(shape)) if shape[d] != 1]
    rank_of = {d: i for i, d in enumerate(kept)}
    order = [rank_of[d] for d in axes if shape[d] != 1]
    sizes = [int(shape[d]) for d in kept]
    runs: list[list[int]] = []           # output order; each a run of consecutive input dims
    for d in order:
        if runs and runs[-1][-1] + 1 == d:
            runs[-1].append(d)
        else:
            runs.append([d])
    if not runs:
        return (1,), (0,)
    by_input = sorted(range(len(runs)), key=lambda r: runs[r][0])
    position = {r: i for i, r in enumerate(by_input)}
    new_shape = tuple(math.prod(sizes[d] for d in runs[r]) for r in by_input)
    new_axes = tuple(position[r] for r in range(len(runs)))
    return new_shape, new_axes


def padded(shape: Sequence[int], axes: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A canonical (shape, axes) written with ``MAX_RANK`` dimensions: leading dimensions of
    size 1 that stay in place (so that every problem key has the same fields)."""
    lead = MAX_RANK - len(shape)
    if lead < 0:
        raise ShapeError(f"the permutation needs {len(shape)} dimensions once merged; at most {MAX_RANK} are taken",
                         remedy="split it into two permutes, or merge dimensions first (reshape)")
    return (1,) * lead + tuple(shape), tuple(range(lead)) + tuple(a + lead for a in axes)


@dataclass(frozen=True)
class Dim:
    """One input dimension of a canonical permutation: its size, its stride in the input and
    in the output (elements)."""

    size: int
    in_stride: int
    out_stride: int


@dataclass(frozen=True)
class Plan:
    """How a canonical permutation runs. ``mode``: ``copy`` (one dimension), ``rows`` (the
    innermost dimension stays innermost: whole rows move) or ``tile`` (the innermost dimension
    changes: tiles of dimension ``a``, the output's innermost, by dimension ``b``, the
    input's, pass through shared memory; the other dimensions are a batch)."""

    shape: tuple[int, ...]
    axes: tuple[int, ...]
    dims: tuple[Dim, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(self.shape[d] for d in self.axes)

    @property
    def mode(self) -> str:
        if self.rank == 1:
            return "copy"
        return "rows" if self.axes[-1] == self.rank - 1 else "tile"

    # ---- tile mode ----------------------------------------------------------------------------
    @property
    def a(self) -> int:
        """The input dimension that is innermost in the output."""
        return self.axes[-1]

    @property
    def b(self) -> int:
        """The input's innermost dimension."""
        return self.rank - 1

    @property
    def batch(self) -> tuple[Dim, ...]:
        """The dimensions other than ``a`` and ``b``, in input order (tile mode)."""
        return tuple(self.dims[d] for d in range(self.rank) if d not in (self.a, self.b))

    # ---- rows mode ----------------------------------------------------------------------------
    @property
    def row(self) -> int:
        """Elements per row (the innermost dimension's size)."""
        return self.shape[-1]

    @property
    def outer(self) -> tuple[Dim, ...]:
        """The dimensions above the rows, in output order (rows and copy mode)."""
        return tuple(self.dims[d] for d in self.axes[:-1])


def strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides (elements) of ``shape``."""
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


@lru_cache(maxsize=1024)
def plan(shape: tuple[int, ...], axes: tuple[int, ...]) -> Plan:
    """The Plan of a permutation, canonicalised first (a padded key's form is accepted)."""
    shape, axes = canonical(shape, axes)
    out_strides = strides(tuple(shape[d] for d in axes))
    out_stride_of = {d: out_strides[i] for i, d in enumerate(axes)}
    dims = tuple(Dim(s, st, out_stride_of[d]) for d, (s, st) in enumerate(zip(shape, strides(shape))))
    return Plan(shape, axes, dims)
