"""``kgen.dist.gemm``: C = alpha * A @ B + beta * C on DistMatrices, by one of three
algorithms (kgen.dist.cost: which, and how the default is chosen).

Checks that need no communication come first (operand types, shapes, dtypes, layout names),
then the ranks agree on the call, then the algorithm runs. ``A @ B`` is ``gemm(A, B)``.

>>> # mpiexec -n 4 python -c "import numpy as np, kgen.dist as kd; kd.init();
>>> #   a = kd.from_global(np.ones((7, 5)), 'rows'); b = kd.from_global(np.ones((5, 3)), 'cols');
>>> #   print(kd.gemm(a, b, algorithm='summa').to_global()[0])"
>>> # [5. 5. 5.]
"""

from __future__ import annotations

import numbers

from kgen.dist.check import agree
from kgen.dist.cost import ALGORITHMS, Estimate, GemmCase, choose, estimates
from kgen.dist.dtypes import accumulator
from kgen.dist.gemm_algorithms import RUN
from kgen.dist.layout import Layout, resolve
from kgen.dist.redistribute import move
from kgen.errors import DistError, DtypeError, InputError, ShapeError
from kgen.knobs import knobs


def _is_dist(x) -> bool:
    return getattr(x, "_is_dist_matrix", False)


def _validate(A, B, C, alpha, beta, algorithm, layout):
    for name, x in (("A", A), ("B", B)) + ((("C", C),) if C is not None else ()):
        if not _is_dist(x):
            raise InputError(f"kgen.dist.gemm's {name} is a {type(x).__name__}, not a DistMatrix",
                             remedy="make it with kgen.dist.from_global or from_local")
        if x._ctx is not A._ctx:
            raise DistError("kgen.dist.gemm of DistMatrices from different kgen.dist contexts",
                            remedy="make them all after the same kgen.dist.init()")
    (m, k), (k2, n) = A.shape, B.shape
    if k != k2:
        raise ShapeError(f"inner dimensions differ: A is {m}x{k}, B is {k2}x{n}", remedy=f"pass B with {k} rows")
    if C is not None and C.shape != (m, n):
        raise ShapeError(f"C is {C.shape[0]}x{C.shape[1]}, A @ B is {m}x{n}", remedy=f"pass C of {m}x{n}")
    for name, x in (("B", B),) + ((("C", C),) if C is not None else ()):
        if x.dtype != A.dtype:
            raise DtypeError(f"A is {A.dtype.name} but {name} is {x.dtype.name}", remedy="cast with .astype(...)")
    for name, v in (("alpha", alpha), ("beta", beta)):
        if not isinstance(v, numbers.Real):
            raise InputError(f"{name} is a {type(v).__name__}, not a real number")
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise InputError(f"unknown algorithm {algorithm!r}; kgen.dist.gemm has {', '.join(ALGORITHMS)}")
    world = A._ctx.comm.size
    out = resolve(layout, world) if layout is not None else (C.layout if C is not None else None)
    return m, n, k, out


def _case(A, B, C, beta, out: Layout | None, m: int, n: int, k: int) -> GemmCase:
    return GemmCase(m, n, k, A._ctx.comm.size, A.dtype.itemsize, accumulator(A.dtype).itemsize,
                    A.layout, B.layout, C.layout if C is not None and beta != 0 else None, out)


def _model():
    return knobs.dist_alpha_us * 1e-6, 1.0 / (knobs.dist_bandwidth_gbs * 1e9), knobs.dist_panel


def gemm(A, B, C=None, alpha: float = 1.0, beta: float = 0.0, algorithm: str | None = None,
         layout: str | Layout | None = None, panel: int | None = None, chunks: int | None = None):
    """alpha * A @ B + beta * C as a new DistMatrix (a collective call). ``algorithm``:
    "allgather", "reduce_scatter", "summa" or None: the tuned best of this product on these
    ranks where the database has one (``kgen tune dist_gemm``, kgen.dist.tuning; a product
    with no C and no layout asked, from operands in layouts made by name), else the cost
    model's choice. ``panel``: SUMMA's k panel width (default KGEN_DIST_PANEL; 0: as wide as
    the splits allow). ``chunks``: the pieces all-gather and reduce-scatter overlap their
    collective with the local GEMMs in (default KGEN_DIST_CHUNKS; 1: one collective, then
    one GEMM). The result is in ``layout`` if given, else in C's layout if C is given, else
    in the algorithm's own. Half types accumulate in float32 and are rounded once, at the end.

    >>> # c = kd.gemm(a, b, c, alpha=2.0, beta=1.0, algorithm="reduce_scatter", chunks=4)
    """
    m, n, k, out = _validate(A, B, C, alpha, beta, algorithm, layout)
    if panel is not None and (not isinstance(panel, numbers.Integral) or panel < 0):
        raise InputError(f"panel={panel!r} is not a whole number >= 0", remedy="pass 0 or a width such as 256")
    if chunks is not None and (isinstance(chunks, bool) or not isinstance(chunks, numbers.Integral) or chunks < 1):
        raise InputError(f"chunks={chunks!r} is not a whole number >= 1", remedy="pass 1 (no overlap) or e.g. 4")
    comm = A._ctx.comm
    alpha_s, beta_s, model_panel = _model()
    panel = model_panel if panel is None else int(panel)
    chunks = max(1, knobs.dist_chunks) if chunks is None else int(chunks)
    agree(comm, "gemm", ("gemm", A.shape, B.shape, A.dtype.name, A.layout, B.layout,
                         None if C is None else (C.layout, C.dtype.name), float(alpha), float(beta),
                         algorithm, out, panel, chunks))
    name = algorithm
    if name is None:
        tuned = _tuned(A, B, C, out, m, n, k)
        if tuned is not None:
            name, panel, chunks = tuned
        else:
            name = choose(_case(A, B, C, beta, out, m, n, k), alpha_s, beta_s, panel)
    lc, local = RUN[name](A._ctx, A, B, C, float(alpha), float(beta), panel, chunks)
    result = A._new(lc, (m, n), local)
    if out is not None and out != lc:
        result = A._new(out, (m, n), move(comm, lc, out, (m, n), local))
    return result


def _tuned(A, B, C, out, m: int, n: int, k: int) -> tuple[str, int, int] | None:
    """The tuned (algorithm, panel, chunks) of this product on these ranks, or None."""
    if not knobs.dist_tuned or C is not None or out is not None:
        return None
    ctx, world = A._ctx, A._ctx.comm.size
    if A.layout != resolve(A.layout.kind, world) or B.layout != resolve(B.layout.kind, world):
        return None                                   # a grid or block of the caller's own: not what was tuned
    from kgen.dist.tuned import problem_of, tuned_choice

    return tuned_choice(ctx, problem_of(m, n, k, A.dtype.name, A.layout.kind, B.layout.kind, world, ctx.backend))


def gemm_costs(A, B, C=None, beta: float = 0.0, layout: str | Layout | None = None) -> list[Estimate]:
    """The cost model's estimate of each algorithm for this call (no communication).

    >>> # [(e.algorithm, e.bytes) for e in kd.gemm_costs(a, b)]
    """
    m, n, k, out = _validate(A, B, C, 1.0, beta, None, layout)
    return estimates(_case(A, B, C, beta, out, m, n, k), *_model())
