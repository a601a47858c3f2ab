"""The distributed GEMM's algorithm as a tuned decision: the family ``dist_gemm``.

A problem is a global product (m, n, k, dtype), the layouts its operands start in, the number
of ranks and the backend; a config is an algorithm and, for SUMMA, its panel width, for the
others the pieces they overlap communication with computation in. A tune
measures configs with kgen's own search (``kgen.search.tune``, any sampler) on the ranks
themselves: rank 0 runs the search and ``DistRunner`` hands each config to every rank, which
multiply together (``serve`` on the others) and time the call from a barrier to the slowest
rank's finish; the records go to the database like any family's, under a device that names
the backend, the ranks and the device (``nccl 8 x NVIDIA H200``), because the interconnect
decides. ``kgen.dist.gemm`` then runs the tuned best of its problem where the database has
one (``kgen.dist.tuned``: rank 0 reads it, every rank follows), else the alpha-beta model's
choice.

    mpiexec -n 4 kgen tune dist_gemm --m 8192 --n 8192 --k 8192 --dtype float32

>>> from kgen.problem import Target
>>> spec = DistGemm()
>>> p = problem_of(512, 256, 128, "float32", "rows", "cols", 4, "mpi")
>>> p.key
'dist_gemm|a=rows|b=cols|backend=mpi|dtype=float32|k=128|m=512|n=256|world=4'
>>> names = [c.name for c in spec.space(p, Target.h200()).configs()]
>>> len(names), names[:2], names[-1]
(12, ['dist_allgather_p0_c1', 'dist_allgather_p0_c2'], 'dist_summa_p4096_c1')
"""

from __future__ import annotations

import time
from concurrent.futures import Future

import numpy as np

from kgen.dist.cost import ALGORITHMS, GemmCase, choose
from kgen.dist.dtypes import NAMES, accumulator, resolve_dtype
from kgen.dist.layout import KINDS, resolve
from kgen.dist.tuned import CHOSEN, CHUNKS, FAMILY, PANELS, implementation_digest, problem_of, target_of
from kgen.errors import ShapeError
from kgen.fields import Field
from kgen.measurement import Failure, Measurement, Timing
from kgen.problem import Problem, Target
from kgen.runners.base import Runner
from kgen.space import Constraint, Param, Space
from kgen.spec import KernelSpec


class DistGemm(KernelSpec):
    """The algorithm (and SUMMA's panel) of one distributed GEMM problem; nothing compiled."""

    family = FAMILY
    shape_params = ("m", "n", "k", "world")
    export_runtime = ""               # a choice of algorithm, not a kernel: kgen.dist.gemm reads it
    tunes_on_ranks = True
    problem_fields = (Field("m", int, "rows of A and C"), Field("n", int, "columns of B and C"),
                      Field("k", int, "columns of A, rows of B"),
                      Field("dtype", str, "element type", "float32", NAMES),
                      Field("a", str, "the layout A starts in", "rows", tuple(sorted(KINDS))),
                      Field("b", str, "the layout B starts in", "cols", tuple(sorted(KINDS))))

    def request(self, target: Target, **values):
        from kgen.dist import runtime

        ctx = runtime.context()
        return self, problem_of(values["m"], values["n"], values["k"], values["dtype"], values["a"], values["b"],
                                ctx.comm.size, ctx.backend)

    def space(self, problem: Problem, target: Target) -> Space:
        return Space([Param("ALG", ALGORITHMS), Param("PANEL", PANELS), Param("CHUNKS", CHUNKS)],
                     [Constraint("only SUMMA has panels", lambda v: v["ALG"] == "summa" or v["PANEL"] == 0,
                                 ("ALG", "PANEL")),
                      Constraint("SUMMA's pieces are its panels", lambda v: v["ALG"] != "summa" or v["CHUNKS"] == 1,
                                 ("ALG", "CHUNKS"))],
                     namer=lambda v: f"dist_{v['ALG']}_p{v['PANEL']}_c{v['CHUNKS']}")

    def default_config(self, problem: Problem, target: Target):
        """The alpha-beta model's choice (kgen.dist.cost) at the knobs' alpha, bandwidth, panel
        and chunks."""
        from kgen.knobs import knobs

        case = _case(problem)
        algorithm = choose(case, knobs.dist_alpha_us * 1e-6, 1.0 / (knobs.dist_bandwidth_gbs * 1e9), knobs.dist_panel)
        panel = knobs.dist_panel if algorithm == "summa" and knobs.dist_panel in PANELS else 0
        chunks = knobs.dist_chunks if algorithm != "summa" and knobs.dist_chunks in CHUNKS else 1
        return self.space(problem, target).config(ALG=algorithm, PANEL=panel, CHUNKS=chunks)

    def template_digest(self) -> str:
        """The implementation's version (``kgen.dist.tuned.implementation_digest``)."""
        return implementation_digest()

    def tune_on_ranks(self, values: dict, *, trials: int, sampler: str, seed: int | None, open_db, say=print):
        """``kgen tune dist_gemm``, run by every rank mpiexec started: joins them, tunes
        (``tune_gemm``) and leaves; rank 0 gets the TuneResult (the others None). The default
        sampler ("kgen") becomes "exhaustive": the space has twelve configs."""
        from kgen.dist import runtime
        from kgen.samplers import check_sampler

        sampler = "exhaustive" if sampler == "kgen" else sampler
        check_sampler(sampler)
        _check_sizes(values["m"], values["n"], values["k"])        # before any rank joins
        ctx = runtime.init()
        try:
            if ctx.comm.rank == 0:
                say(f"tuning dist_gemm {values['m']}x{values['n']}x{values['k']} {values['dtype']} on "
                    f"{ctx.comm.size} {ctx.backend} rank(s), {trials} trials, sampler {sampler}")
            return tune_gemm(**values, trials=trials, sampler=sampler, seed=seed,
                             db=open_db() if ctx.comm.rank == 0 else None)
        finally:
            runtime.finalize()

    def flops(self, problem: Problem) -> float:
        return 2.0 * problem["m"] * problem["n"] * problem["k"]

    def devices(self, problem: Problem) -> int:
        return problem["world"]


def _case(problem: Problem) -> GemmCase:
    world, dtype = problem["world"], resolve_dtype(problem["dtype"])
    return GemmCase(problem["m"], problem["n"], problem["k"], world, dtype.itemsize, accumulator(dtype).itemsize,
                    resolve(problem["a"], world), resolve(problem["b"], world))


# ---- measuring on the ranks --------------------------------------------------------------------

class _Operands:
    """The last problem's A and B on every rank (the same random numbers everywhere)."""

    def __init__(self):
        self.key, self.pair = None, None

    def get(self, problem: Problem):
        from kgen.dist.matrix import from_global

        if self.key != problem.key:
            self.pair = None
            rng = np.random.default_rng(problem["m"] * 31 + problem["n"] * 7 + problem["k"])
            dtype = resolve_dtype(problem["dtype"])
            a = rng.uniform(-1, 1, (problem["m"], problem["k"])).astype(dtype)
            b = rng.uniform(-1, 1, (problem["k"], problem["n"])).astype(dtype)
            self.pair = (from_global(a, problem["a"]), from_global(b, problem["b"]), a, b)
            self.key = problem.key
        return self.pair


def measure(ctx, problem: Problem, values: dict, warmup: int, runs: int, operands: _Operands) -> tuple[list, float]:
    """(each timed run's milliseconds, the relative error of the first result) of one config
    on every rank (a collective call; the error is rank 0's, -1 elsewhere). A run is timed
    from a barrier to the slowest rank's finish (its device synchronised)."""
    from kgen.dist.gemm import gemm

    A, B, a, b = operands.get(problem)
    from kgen.knobs import knobs

    def sync():                                   # the device's work done, or RankLostError (a lost peer)
        if ctx.backend == "nccl":
            ctx.comm.wait_stream(knobs.dist_timeout_s)
    algorithm, panel, chunks = values["ALG"], values["PANEL"], values["CHUNKS"]
    first = gemm(A, B, algorithm=algorithm, panel=panel, chunks=chunks)
    whole = first.to_global(root=0)
    error = -1.0
    if ctx.comm.rank == 0:                           # against float64, on the rank's own device
        xp = ctx.compute.xp
        got = whole.astype(np.float64)
        want = xp.asarray(a, dtype=np.float64) @ xp.asarray(b, dtype=np.float64)
        error = float(abs(got - want).max() / max(float(abs(want).max()), 1e-300)) if want.size else 0.0
    del first, whole
    times = []
    for i in range(warmup + runs):
        ctx.comm.barrier()
        start = time.perf_counter()
        gemm(A, B, algorithm=algorithm, panel=panel, chunks=chunks)
        sync()
        mine = time.perf_counter() - start
        slowest = max(ctx.comm.allgather_object(mine))
        if i >= warmup:
            times.append(slowest * 1e3)
    return times, error


def tolerance(dtype: str) -> float:
    return {"float16": 2e-2, "bfloat16": 5e-2, "float32": 1e-4, "float64": 1e-10}[dtype]


class DistRunner(Runner):
    """Rank 0's runner of a dist_gemm tune: each task is measured by every rank together (the
    others in ``serve``); ``close`` releases them."""

    needs_binaries = False

    def __init__(self, ctx, warmup: int = 2, runs: int = 5):
        self.ctx, self.warmup, self.runs = ctx, warmup, runs
        self.operands = _Operands()
        self._open = True

    def submit(self, task) -> Future:
        fut: Future = Future()
        timing = Timing(method="barrier_wall_clock", warmup=self.warmup, runs=self.runs, l2="warm")
        base = dict(config_name=task.config.name, config=task.config.as_dict(), problem_key=task.problem.key,
                    timing=timing)
        if task.baseline:
            fut.set_result(Measurement(**base, failure=Failure("constraints", "dist_gemm has no library baseline")))
            return fut
        values = task.config.as_dict()
        self.ctx.comm.bcast_object(("measure", task.problem.key, values), 0)
        start = time.perf_counter()
        times, error = measure(self.ctx, task.problem, values, self.warmup, self.runs, self.operands)
        spent = time.perf_counter() - start
        if not (error <= tolerance(task.problem["dtype"])):
            fut.set_result(Measurement(**base, failure=Failure("correctness", f"relative error {error:.3g}"),
                                       error=error, measure_s=spent))
        else:
            fut.set_result(Measurement(**base, times_ms=tuple(times), error=error, measure_s=spent))
        return fut

    def close(self) -> None:
        if self._open:
            self._open = False
            self.ctx.comm.bcast_object(None, 0)


def serve(ctx, warmup: int = 2, runs: int = 5) -> None:
    """Ranks but 0 during a tune: measure each config rank 0 sends, until it sends None."""
    operands = _Operands()
    while True:
        order = ctx.comm.bcast_object(None, 0)
        if order is None:
            return
        _, key, values = order
        measure(ctx, Problem.from_key(key), values, warmup, runs, operands)


def _check_sizes(m, n, k) -> None:
    for name, size in (("m", m), ("n", n), ("k", k)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ShapeError(f"dist_gemm: {name}={size!r} must be an integer >= 1",
                             remedy="tune a product of at least one row, column and inner element")


def tune_gemm(m: int, n: int, k: int, dtype: str = "float32", a: str = "rows", b: str = "cols", *,
              trials: int = 8, sampler: str = "exhaustive", db=None, warmup: int = 2, runs: int = 5,
              seed: int | None = None, on_progress=None):
    """Tune the algorithm of one distributed GEMM on the running ranks (a collective call):
    rank 0 gets the TuneResult, the others None."""
    from kgen.db import open_default
    from kgen.dist import runtime
    from kgen.search import tune

    _check_sizes(m, n, k)
    ctx = runtime.context()
    problem = problem_of(m, n, k, resolve_dtype(dtype).name, a, b, ctx.comm.size, ctx.backend)
    if ctx.comm.rank != 0:
        serve(ctx, warmup, runs)
        CHOSEN.clear()
        return None
    runner = DistRunner(ctx, warmup, runs)
    try:
        return tune(DistGemm(), problem, target_of(ctx), runner, db if db is not None else open_default(),
                    trials=trials, sampler=sampler, seed=seed, on_progress=on_progress)
    finally:
        runner.close()
        CHOSEN.clear()
