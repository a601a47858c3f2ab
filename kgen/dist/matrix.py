"""DistMatrix: a 2-D matrix spread over the ranks by a named layout, each rank holding its
shard as one dense local array (``.local``).

Made by ``from_global`` (every rank passes the whole matrix, or one rank does and it is
scattered) or ``from_local`` (every rank passes its own shard); brought back by
``to_global``. Collective calls (those that may communicate) first agree on a small
descriptor across the ranks (kgen.dist.check), so a rank that disagrees makes every rank
raise the same MismatchError; a bad layout or argument raises before any communication.

>>> # mpiexec -n 2 python -c "import numpy as np, kgen.dist as kd; kd.init();
>>> #     a = kd.from_global(np.arange(12.).reshape(3, 4), 'rows'); print(kd.rank(), a.local.shape)"
>>> # 0 (2, 4)
>>> # 1 (1, 4)
"""

from __future__ import annotations

import numbers
import operator

import numpy as np

from kgen.dist import runtime
from kgen.dist.check import agree
from kgen.dist.compute import array_module, index
from kgen.dist.dtypes import accumulator, resolve_dtype
from kgen.dist.layout import Layout, local_shape, owned, resolve
from kgen.dist.memory import track
from kgen.dist.redistribute import gather, move, scatter
from kgen.errors import DistError, DtypeError, DistLayoutError, InputError, KgenError, ShapeError


def _shape(shape) -> tuple[int, int]:
    try:
        m, n = (int(s) for s in shape)
        if m < 0 or n < 0 or (m, n) != tuple(shape):
            raise ValueError
        return m, n
    except (TypeError, ValueError):
        raise ShapeError(f"a DistMatrix's global shape is two whole numbers >= 0, got {shape!r}",
                         remedy="pass global_shape=(rows, cols)") from None


def _root(root, world: int) -> int | None:
    if root is None:
        return None
    if not isinstance(root, numbers.Integral) or not 0 <= root < world:
        raise DistError(f"root {root!r} is not a rank of {world}", remedy=f"pass a rank 0 to {world - 1}, or None")
    return int(root)


def _complaint(check) -> str | None:
    """A local problem as text for ``agree`` (so every rank raises it), or None."""
    try:
        check()
    except KgenError as exc:
        return exc.message
    return None


class DistMatrix:
    """A matrix spread over the ranks; see the module's docstring."""

    __array_priority__ = 1000            # NumPy scalars defer to our reflected operators
    _is_dist_matrix = True

    def __init__(self, ctx, layout: Layout, shape: tuple[int, int], dtype: np.dtype, local: np.ndarray):
        self._ctx, self._layout, self._shape, self._dtype, self._local = ctx, layout, shape, dtype, local
        track(ctx.memory, self, local)

    def _new(self, layout: Layout, shape: tuple[int, int], local: np.ndarray, dtype=None) -> DistMatrix:
        return DistMatrix(self._ctx, layout, shape, np.dtype(dtype or self._dtype), local)

    # ---- what it is -----------------------------------------------------------------------

    @property
    def local(self) -> np.ndarray:
        """This rank's shard: its rows x its columns, both in increasing global order."""
        return self._local

    @property
    def layout(self) -> Layout:
        return self._layout

    @property
    def shape(self) -> tuple[int, int]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def ndim(self) -> int:
        return 2

    @property
    def comm(self):
        return self._ctx.comm

    def owned(self) -> tuple[np.ndarray, np.ndarray]:
        """(global rows, global columns) of this rank's shard."""
        return owned(self._layout, self._shape, self._ctx.comm.rank)

    def __repr__(self) -> str:
        m, n = self._shape
        return (f"DistMatrix({m}x{n} {self._dtype.name}, {self._layout}, rank {self._ctx.comm.rank} "
                f"holds {self._local.shape[0]}x{self._local.shape[1]})")

    # ---- moving it ------------------------------------------------------------------------

    def redistribute(self, layout: str | Layout) -> DistMatrix:
        """The same matrix in ``layout``, moving only the elements whose owner changes (a
        collective call; returns self when the layout is the same)."""
        dst = resolve(layout, self._ctx.comm.size)
        agree(self._ctx.comm, "redistribute", ("redistribute", self._shape, self._dtype.name, self._layout, dst))
        if dst == self._layout:
            return self
        return self._new(dst, self._shape, move(self._ctx.comm, self._layout, dst, self._shape, self._local))

    def to_global(self, root: int | None = None):
        """The whole matrix on every rank (``root`` None) or on ``root`` only (None elsewhere),
        an array of the ranks' kind (NumPy on host ranks, CuPy on GPU ranks); a collective call."""
        root = _root(root, self._ctx.comm.size)
        agree(self._ctx.comm, "to_global", ("to_global", root, self._shape, self._dtype.name, self._layout))
        return gather(self._ctx.comm, self._layout, self._shape, self._local, root)

    def astype(self, dtype) -> DistMatrix:
        """The matrix with its elements cast to ``dtype`` (local: no communication)."""
        dtype = resolve_dtype(dtype)
        return self._new(self._layout, self._shape, self._local.astype(dtype), dtype)

    @property
    def T(self) -> DistMatrix:
        """The transpose: every element stays on its rank (the layout is transposed; the local
        array is a transposed view of this one's)."""
        return self._new(self._layout.T, self._shape[::-1], self._local.T)

    # ---- elementwise ----------------------------------------------------------------------

    def _operands(self, other, name: str):
        """(layout, shape, this side's local array, the other's) of an elementwise op."""
        if isinstance(other, (numbers.Number, np.generic)):
            return self._layout, self._shape, self._local, other
        if not getattr(other, "_is_dist_matrix", False):
            raise InputError(f"{name} of a DistMatrix and a {type(other).__name__}",
                             remedy="use a scalar, or make the other operand a DistMatrix (kgen.dist.from_global)")
        if other._ctx is not self._ctx:
            raise DistError(f"{name} of DistMatrices from different kgen.dist contexts",
                            remedy="make both after the same kgen.dist.init()")
        if other.dtype != self._dtype:
            raise DtypeError(f"{name} of {self._dtype.name} and {other.dtype.name} DistMatrices",
                             remedy="cast one with .astype(...)")
        if other.shape == self._shape:
            if other.layout != self._layout:
                raise DistLayoutError(f"{name} of DistMatrices in layouts {self._layout} and {other.layout}",
                                      remedy="bring one to the other's layout: b.redistribute(a.layout)")
            return self._layout, self._shape, self._local, other.local
        vector = _broadcast(other, self)
        if vector is not None:
            return self._layout, self._shape, self._local, vector
        vector = _broadcast(self, other)
        if vector is not None:
            return other.layout, other.shape, vector, other.local
        raise ShapeError(f"{name} of {self._shape[0]}x{self._shape[1]} and {other.shape[0]}x{other.shape[1]} "
                         "DistMatrices", remedy="use matching shapes, or a replicated 1 x n or m x 1 vector")

    def _binary(self, other, op, name: str, reflected: bool = False) -> DistMatrix:
        layout, shape, mine, theirs = self._operands(other, name)
        out = op(theirs, mine) if reflected else op(mine, theirs)
        return self._new(layout, shape, array_module(self._local).asarray(out).astype(self._dtype, copy=False))

    def __add__(self, other):
        return self._binary(other, operator.add, "+")

    def __radd__(self, other):
        return self._binary(other, operator.add, "+", reflected=True)

    def __sub__(self, other):
        return self._binary(other, operator.sub, "-")

    def __rsub__(self, other):
        return self._binary(other, operator.sub, "-", reflected=True)

    def __mul__(self, other):
        return self._binary(other, operator.mul, "*")

    def __rmul__(self, other):
        return self._binary(other, operator.mul, "*", reflected=True)

    def __truediv__(self, other):
        if not isinstance(other, numbers.Number):
            raise InputError("a DistMatrix is divided by a scalar only", remedy="multiply by the other's inverse")
        return self._binary(other, operator.truediv, "/")

    def __neg__(self):
        return self._new(self._layout, self._shape, -self._local)

    def apply(self, fn) -> DistMatrix:
        """``fn`` (an elementwise function of an array, e.g. ``lambda x: np.maximum(x, 0)``)
        applied to the local shard; its result is cast back to this dtype."""
        out = array_module(self._local).asarray(fn(self._local))
        if out.shape != self._local.shape:
            raise ShapeError(f"apply's function turned a {self._local.shape} shard into {out.shape}",
                             remedy="pass an elementwise function")
        return self._new(self._layout, self._shape, out.astype(self._dtype, copy=False))

    # ---- reductions and products ----------------------------------------------------------

    def sum(self, axis: int | None = None):
        """The sum over ``axis`` (0: a replicated 1 x n DistMatrix, 1: m x 1, None: a NumPy
        scalar on every rank), accumulated in float32 for half types; a collective call."""
        return _reduce(self, "sum", axis)

    def max(self, axis: int | None = None):
        """The largest element over ``axis``, as ``sum`` returns it; a collective call."""
        return _reduce(self, "max", axis)

    def norm(self) -> float:
        """The Frobenius norm (accumulated in float64) on every rank; a collective call."""
        agree(self._ctx.comm, "norm", ("norm", self._shape, self._dtype.name, self._layout))
        xp = array_module(self._local)
        part = xp.sum(xp.square(self._local.astype(np.float64))).reshape(1)
        if not self._layout.replicated:
            part = self._ctx.comm.allreduce(part, "sum")
        return float(np.sqrt(float(part[0])))

    def __matmul__(self, other):
        from kgen.dist.gemm import gemm

        return gemm(self, other)

    # ---- construction ---------------------------------------------------------------------

    @staticmethod
    def from_global(x, layout: str | Layout, root: int | None = None, dtype=None) -> DistMatrix:
        """See kgen.dist.from_global."""
        return from_global(x, layout, root=root, dtype=dtype)

    @staticmethod
    def from_local(shard, layout: str | Layout, global_shape, dtype=None) -> DistMatrix:
        """See kgen.dist.from_local."""
        return from_local(shard, layout, global_shape, dtype=dtype)


def _broadcast(vector: DistMatrix, full: DistMatrix):
    """The part of a replicated 1 x n (or m x 1) ``vector`` that meets ``full``'s shard, or None
    if ``vector`` does not broadcast against ``full``."""
    if not vector.layout.replicated:
        return None
    xp = array_module(vector.local)
    rows, cols = full.owned()
    if vector.shape == (1, full.shape[1]):
        return vector.local[:, xp.asarray(cols)]
    if vector.shape == (full.shape[0], 1):
        return vector.local[xp.asarray(rows), :]
    return None


def _reduce(x: DistMatrix, op: str, axis: int | None):
    if axis not in (None, 0, 1):
        raise InputError(f"axis {axis!r} is not 0, 1 or None")
    comm = x.comm
    agree(comm, op, (op, axis, x.shape, x.dtype.name, x.layout))
    if op == "max" and 0 in x.shape:
        raise ShapeError(f"max of an empty {x.shape[0]}x{x.shape[1]} DistMatrix")
    xp = array_module(x.local)
    acc = accumulator(x.dtype)
    local = x.local.astype(acc, copy=False)
    fill = 0 if op == "sum" else -np.inf
    reduce = xp.sum if op == "sum" else xp.max
    rows, cols = x.owned()
    if axis is None:
        part = reduce(local).reshape(1).astype(acc) if local.size else xp.full(1, fill, dtype=acc)
    else:
        n = x.shape[1 - axis]
        part = xp.full(n, fill, dtype=acc)
        if local.size:
            part[xp.asarray(cols if axis == 0 else rows)] = reduce(local, axis=axis)
    if not x.layout.replicated:
        part = comm.allreduce(part, op)
    if axis is None:                                     # a NumPy scalar, wherever the shards live
        return x._ctx.compute.to_host(part).astype(x.dtype)[0]
    shape = (1, len(part)) if axis == 0 else (len(part), 1)
    return x._new(resolve("replicated", comm.size), shape, part.reshape(shape).astype(x.dtype))


def from_global(x, layout: str | Layout, root: int | None = None, dtype=None) -> DistMatrix:
    """A DistMatrix in ``layout`` from the whole matrix ``x`` (2-D, any array NumPy reads):
    passed by every rank (``root`` None: each keeps its part, no data moves), or by ``root``
    only (the others pass None; it is scattered). ``dtype`` casts it. A collective call.

    >>> # a = kd.from_global(np.ones((7, 5), np.float32), kd.block2d())
    """
    ctx = runtime.context()
    comm = ctx.comm
    lay = resolve(layout, comm.size)
    root = _root(root, comm.size)
    want = None if dtype is None else resolve_dtype(dtype)
    holds = root is None or comm.rank == root
    arr = array_module(x).asarray(x) if holds else None

    def check():
        if arr.ndim != 2:
            raise ShapeError(f"from_global takes a 2-D matrix, got {arr.ndim}-D")
        resolve_dtype(want if want is not None else arr.dtype)

    complaint = _complaint(check) if holds else None
    kind = None if complaint or not holds else (want if want is not None else arr.dtype).name
    if root is None:
        shape = None if complaint else arr.shape
        agree(comm, "from_global", ("from_global", root, lay, shape, kind), complaint)
        dt = resolve_dtype(kind)
        mine = arr[index(array_module(arr), *owned(lay, shape, comm.rank))]     # the shard alone moves to the device
        return DistMatrix(ctx, lay, tuple(shape), dt, ctx.compute.asarray(mine, dtype=dt))
    agree(comm, "from_global", ("from_global", root, lay, None if want is None else want.name), complaint)
    shape, name = comm.bcast_object((arr.shape, kind) if holds else None, root)
    dt = resolve_dtype(name)
    whole = ctx.compute.asarray(arr, dtype=dt) if holds else None
    return DistMatrix(ctx, lay, tuple(shape), dt, scatter(comm, lay, tuple(shape), whole, dt, root, ctx.compute.xp))


def from_local(shard, layout: str | Layout, global_shape, dtype=None) -> DistMatrix:
    """A DistMatrix from every rank's own ``shard`` of a ``global_shape`` matrix in ``layout``
    (the shard holds the rank's rows x columns, as ``kgen.dist.owned`` lists them). A
    collective call: ranks whose shapes, layouts or dtypes disagree all raise MismatchError.

    >>> # a = kd.from_local(np.ones((4, 5)), "rows", (8, 5))     # on each of 2 ranks
    """
    ctx = runtime.context()
    comm = ctx.comm
    lay = resolve(layout, comm.size)
    shape = _shape(global_shape)
    arr = array_module(shard).asarray(shard)
    want = None if dtype is None else resolve_dtype(dtype)
    expected = local_shape(lay, shape, comm.rank)

    def check():
        if arr.shape != expected:
            raise ShapeError(f"its shard is {'x'.join(map(str, arr.shape)) or 'a scalar'}, but its part of a "
                             f"{shape[0]}x{shape[1]} matrix in {lay} is {expected[0]}x{expected[1]}")
        resolve_dtype(want if want is not None else arr.dtype)

    complaint = _complaint(check)
    kind = (want if want is not None else arr.dtype).name
    agree(comm, "from_local", ("from_local", shape, lay, kind), complaint)
    dt = resolve_dtype(kind)
    return DistMatrix(ctx, lay, shape, dt, ctx.compute.asarray(arr, dtype=dt))
