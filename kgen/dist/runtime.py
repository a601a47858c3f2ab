"""``init`` / ``finalize`` and what they hold: the backend's communicator, its local compute,
and how this process was launched.

Backends: "mpi" (host-memory ranks: mpi4py carries the data, NumPy computes) and "nccl" (GPU
ranks: NCCL through CuPy, kgen.gemm for local products), which this version does not have
and refuses with a BackendError rather than pretend. Left out, the backend is
``KGEN_DIST_BACKEND``, and "auto" means "mpi" while no GPU backend exists.

>>> import kgen.dist as kd
>>> kd.init("nccl")
Traceback (most recent call last):
...
kgen.errors.BackendError: the GPU backend (NCCL through CuPy) is not in this version of kgen.dist (remedy: use kgen.dist.init("mpi"): host-memory ranks with NumPy local compute)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kgen.dist.bootstrap import Launch, describe_launch
from kgen.dist.comm import Communicator, Traffic
from kgen.dist.compute import HostCompute
from kgen.errors import BackendError, DistError
from kgen.knobs import knobs

BACKENDS = ("mpi", "nccl")


@dataclass
class Context:
    backend: str
    comm: Communicator
    compute: HostCompute
    launch: Launch
    _grids: dict = field(default_factory=dict)

    def grid_comms(self, layout) -> tuple[Communicator, Communicator]:
        """(this rank's grid-row communicator ordered by grid column, its grid-column one ordered
        by grid row) for a resolved 2-D layout; made once per grid (a collective call)."""
        from kgen.dist.layout import coords

        key = (layout.grid, layout.order)
        if key not in self._grids:
            pr, pc = coords(layout, self.comm.rank)
            self._grids[key] = (self.comm.split(pr, pc), self.comm.split(pc, pr))
        return self._grids[key]

    def close(self) -> None:
        for row, col in self._grids.values():
            row.free()
            col.free()
        self._grids.clear()
        self.comm.free()


_context: Context | None = None


def _mpi_context() -> Context:
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError) as exc:
        raise BackendError(f"the mpi backend needs mpi4py and an MPI library: {exc}",
                           remedy="pip install 'kgen[dist]' (mpi4py and the mpich wheel)") from None
    from kgen.dist.comm_mpi import MpiCommunicator

    world = MPI.COMM_WORLD
    node = world.Split_type(MPI.COMM_TYPE_SHARED, key=world.Get_rank())
    local_rank = node.Get_rank()
    node.Free()
    launch = describe_launch((world.Get_rank(), world.Get_size(), local_rank),
                             (knobs.launch_rank, knobs.launch_world_size, knobs.launch_local_rank))
    comm = MpiCommunicator(world.Dup())       # kgen's own communicator: never mixes with the caller's messages
    return Context("mpi", comm, HostCompute(), launch)


def init(backend: str | None = None) -> Context:
    """Join the ranks (a collective call); returns the context. Calling it again with the same
    backend returns the same context.

    >>> # mpiexec -n 4 python -c "import kgen.dist as kd; kd.init(); print(kd.rank(), kd.world_size())"
    """
    global _context
    name = backend if backend is not None else knobs.dist_backend
    if name == "auto":
        name = "mpi"
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; kgen.dist knows {', '.join(BACKENDS)}",
                           remedy='use kgen.dist.init("mpi")')
    if name == "nccl":
        raise BackendError("the GPU backend (NCCL through CuPy) is not in this version of kgen.dist",
                           remedy='use kgen.dist.init("mpi"): host-memory ranks with NumPy local compute')
    if _context is not None:
        if _context.backend != name:
            raise BackendError(f"kgen.dist runs the {_context.backend} backend already",
                               remedy="call kgen.dist.finalize() before init with another backend")
        return _context
    _context = _mpi_context()
    return _context


def finalize() -> None:
    """Leave the ranks (a collective call): wait for every rank, then free kgen's communicators.
    MPI itself stays up until the interpreter exits (mpi4py finalizes it then), so ``init``
    may be called again."""
    global _context
    if _context is None:
        return
    _context.comm.barrier()
    _context.close()
    _context = None


def context() -> Context:
    """The running context; DistError if ``init`` was not called."""
    if _context is None:
        raise DistError("kgen.dist is not initialized", remedy="call kgen.dist.init() first")
    return _context


def rank() -> int:
    """This process's rank, 0 to world_size() - 1."""
    return context().comm.rank


def world_size() -> int:
    """How many ranks there are."""
    return context().comm.size


def local_rank() -> int:
    """This process's rank among the ranks on its host (which GPU a GPU backend would take)."""
    return context().launch.local_rank


def barrier() -> None:
    """Return once every rank has called it."""
    context().comm.barrier()


def traffic() -> Traffic:
    """This rank's counted traffic (bytes sent and received, collectives) since init or reset."""
    return context().comm.traffic
