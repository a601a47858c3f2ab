"""What kgen.dist.gemm needs of the tuned ``dist_gemm`` family (kgen.dist.tuning) at call time:
a problem's key, the device its records are of, the implementation's version, and the tuned
best of a problem on the running ranks (rank 0 reads the database once per problem, every
rank takes its answer, so all run the same algorithm).

>>> device_label("nccl", 8, "NVIDIA H200")
'nccl 8 x NVIDIA H200'
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from pathlib import Path

from kgen.dist.cost import ALGORITHMS
from kgen.problem import Problem, Target
from kgen.provenance import cpu_name

FAMILY = "dist_gemm"
PANELS = (0, 256, 1024, 4096)               # SUMMA's k panel width (0: as wide as the splits allow)
CHUNKS = (1, 2, 4, 8)                        # pieces all-gather and reduce-scatter overlap in
_SOURCES = ("gemm_algorithms.py", "redistribute.py", "comm.py", "comm_mpi.py", "comm_nccl.py", "compute.py")
CHOSEN: dict[str, tuple[str, int, int] | None] = {}   # problem key -> the tuned (algorithm, panel, chunks)


def problem_of(m: int, n: int, k: int, dtype: str, a: str, b: str, world: int, backend: str) -> Problem:
    return Problem.of(FAMILY, m=m, n=n, k=k, dtype=dtype, a=a, b=b, world=world, backend=backend)


def device_label(backend: str, world: int, device: str) -> str:
    """The device a dist_gemm record is of: the backend, the ranks and what each runs on."""
    return f"{backend} {world} x {device}"


def implementation_digest() -> str:
    """The version of what a dist_gemm record measured: the sources of the algorithms and of
    their communication (a record of other sources is history, never dispatched)."""
    h = hashlib.sha256()
    for name in _SOURCES:
        h.update(name.encode())
        h.update((Path(__file__).parent / name).read_bytes())
    return h.hexdigest()[:16]


def target_of(ctx) -> Target:
    """The device records of this run are of (backend, ranks, device; see ``device_label``)."""
    if ctx.backend == "nccl":
        device = Target.detect(ctx.compute.device)
        return dataclasses.replace(device, name=device_label("nccl", ctx.comm.size, device.name))
    return Target.h200(device_label("mpi", ctx.comm.size, cpu_name()), nvrtc="")


def tuned_choice(ctx, problem: Problem) -> tuple[str, int, int] | None:
    """(algorithm, panel, chunks) of the problem's tuned best on these ranks, or None (a collective
    call the first time per problem: rank 0 reads the database, every rank takes its answer)."""
    if problem.key in CHOSEN:
        return CHOSEN[problem.key]
    found = None
    if ctx.comm.rank == 0:
        found = _lookup(ctx, problem)
    found = ctx.comm.bcast_object(found, 0) if ctx.comm.size > 1 else found
    CHOSEN[problem.key] = found
    return found


def _lookup(ctx, problem: Problem) -> tuple[str, int, int] | None:
    from kgen.db import open_default
    from kgen.errors import KgenError

    try:
        best = open_default().best(FAMILY, problem.key, target_of(ctx).name, implementation_digest())
    except KgenError:
        return None
    if best is None:
        return None
    config = best.measurement.config
    chunks = config.get("CHUNKS")
    if config.get("ALG") not in ALGORITHMS or config.get("PANEL") not in PANELS or chunks not in CHUNKS or \
            not math.isfinite(best.measurement.time_ms or math.nan):
        return None
    return config["ALG"], config["PANEL"], chunks

