"""``init`` / ``finalize`` and what they hold: the backend's communicator, its local compute,
and how this process was launched.

Backends: "mpi" (host-memory ranks: mpi4py carries the data, NumPy computes) and "nccl" (GPU
ranks: NCCL through CuPy carries the data on the current stream, ``kgen.gemm`` computes each
local product; one GPU per rank, the rank's local rank choosing it; the ranks are those
mpiexec started, those torchrun started (joined through PyTorch's TCPStore), or this process
alone). Left out, the backend is ``KGEN_DIST_BACKEND``, and
"auto" means "nccl" where CuPy sees a GPU and an NCCL library, else "mpi".

>>> import kgen.dist as kd
>>> kd.init("gloo")
Traceback (most recent call last):
...
kgen.errors.BackendError: unknown backend 'gloo'; kgen.dist knows mpi, nccl (remedy: use kgen.dist.init("mpi") (host ranks) or kgen.dist.init("nccl") (GPU ranks))
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from kgen.dist.bootstrap import Launch, describe_launch
from kgen.dist.comm import Communicator, Traffic
from kgen.dist.compute import DeviceCompute, HostCompute
from kgen.dist.memory import Ledger, stats
from kgen.errors import BackendError, DistError
from kgen.knobs import knobs

BACKENDS = ("mpi", "nccl")


@dataclass
class Context:
    backend: str
    comm: Communicator
    compute: HostCompute | DeviceCompute
    launch: Launch
    memory: Ledger = field(default_factory=Ledger)
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


def _mpi_world(backend: str):
    """(kgen's own MPI communicator over the ranks mpiexec started, the launch)."""
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError) as exc:
        raise BackendError(f"the {backend} backend needs mpi4py and an MPI library: {exc}",
                           remedy="pip install 'kgen[dist]' (mpi4py and the mpich wheel)") from None
    from kgen.dist.comm_mpi import MpiCommunicator

    world = MPI.COMM_WORLD
    node = world.Split_type(MPI.COMM_TYPE_SHARED, key=world.Get_rank())
    local_rank = node.Get_rank()
    node.Free()
    launch = describe_launch((world.Get_rank(), world.Get_size(), local_rank), _launch_env(), backend)
    return MpiCommunicator(world.Dup()), launch      # a Dup: never mixes with the caller's messages


def _launch_env() -> tuple[int, int, int]:
    return knobs.launch_rank, knobs.launch_world_size, knobs.launch_local_rank


def _mpi_context() -> Context:
    comm, launch = _mpi_world("mpi")
    return Context("mpi", comm, HostCompute(), launch)


@functools.lru_cache(maxsize=1)
def gpu_backend_missing() -> str | None:
    """Why this process cannot run the nccl backend (no CuPy, no GPU, no NCCL), or None (asked
    once per process: ``auto`` and the nccl backend both need it)."""
    import warnings

    try:
        import cupy
    except ImportError as exc:
        return f"CuPy does not import ({exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:          # no driver, no device: CUDA's own error types
        return f"CUDA sees no GPU ({type(exc).__name__}: {exc})"
    if count < 1:
        return "CUDA sees no GPU"
    with warnings.catch_warnings():   # CuPy warns where it finds no NCCL library: said here instead
        warnings.simplefilter("ignore")
        from cupy.cuda import nccl
    if not nccl.available:
        return "CuPy finds no NCCL library (pip install nvidia-nccl-cu13)"
    return None


def _store_channel(launch: Launch):
    """The host channel of ranks torchrun started: PyTorch's TCPStore (``kgen.dist.comm_store``),
    its keys apart from those of an earlier attempt (torchrun's restarts) and of an earlier
    ``init`` of these processes (every rank counts its inits alike)."""
    from kgen.dist.comm_store import StoreChannel, torchrun_store

    global _store_inits
    _store_inits += 1
    store = torchrun_store(launch.rank, launch.world_size, knobs.launch_master_addr, knobs.launch_master_port,
                           knobs.launch_agent_store, knobs.dist_timeout_s)
    prefix = f"kgen.dist/restart{knobs.launch_restart_count}/init{_store_inits}"
    return StoreChannel(store, launch.rank, launch.world_size, prefix, knobs.dist_timeout_s)


_store_inits = 0


def _nccl_context() -> Context:
    import cupy

    from kgen.dist.comm_nccl import NcclCommunicator, SingleRank

    missing = gpu_backend_missing()
    if missing is not None:
        raise BackendError(f"the nccl backend cannot run here: {missing}",
                           remedy="pip install nvidia-nccl-cu13 on a machine with a GPU, or use "
                                  'kgen.dist.init("mpi") (host ranks)')
    try:
        host, launch = _mpi_world("nccl")
    except BackendError:              # no mpi4py: not started by mpiexec
        host, launch = SingleRank(), describe_launch((0, 1, 0), _launch_env(), "nccl")
    if (launch.world_size == 1 or launch.how == "torchrun") and not isinstance(host, SingleRank):
        host.free()
        host = SingleRank()
    if launch.how == "torchrun" and launch.world_size > 1:
        host = _store_channel(launch)
    gpus = cupy.cuda.runtime.getDeviceCount()
    if launch.local_rank >= gpus:
        raise BackendError(f"rank {launch.rank} is local rank {launch.local_rank} of its host, which has "
                           f"{gpus} GPU(s): the nccl backend runs one rank per GPU",
                           remedy=f"start at most {gpus} rank(s) per host, or use kgen.dist.init(\"mpi\")",
                           rank=launch.rank)
    cupy.cuda.Device(launch.local_rank).use()
    return Context("nccl", NcclCommunicator.create(host), DeviceCompute(launch.local_rank), launch)


def init(backend: str | None = None) -> Context:
    """Join the ranks (a collective call); returns the context. Calling it again with the same
    backend returns the same context.

    >>> # mpiexec -n 4 python -c "import kgen.dist as kd; kd.init(); print(kd.rank(), kd.world_size())"
    """
    global _context
    name = backend if backend is not None else knobs.dist_backend
    if name == "auto":
        name = "nccl" if gpu_backend_missing() is None else "mpi"
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r}; kgen.dist knows {', '.join(BACKENDS)}",
                           remedy='use kgen.dist.init("mpi") (host ranks) or kgen.dist.init("nccl") (GPU ranks)')
    if _context is not None:
        if _context.backend != name:
            raise BackendError(f"kgen.dist runs the {_context.backend} backend already",
                               remedy="call kgen.dist.finalize() before init with another backend")
        return _context
    _context = _nccl_context() if name == "nccl" else _mpi_context()
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
    """This process's rank among the ranks on its host (the GPU the nccl backend takes)."""
    return context().launch.local_rank


def barrier() -> None:
    """Return once every rank has called it."""
    context().comm.barrier()


def traffic() -> Traffic:
    """This rank's counted traffic (bytes sent and received, collectives) since init or reset."""
    return context().comm.traffic


def memory_stats(all_ranks: bool = False) -> dict | list[dict]:
    """This rank's memory figures (``kgen.dist.memory``): ``shard_bytes`` (its DistMatrix shards
    alive now), ``shard_peak_bytes`` (the most alive at once since init or ``reset_peak``) and,
    on GPU ranks, ``pool_used_bytes`` / ``pool_held_bytes`` (CuPy's pool). ``all_ranks``:
    every rank's, in rank order (a collective call)."""
    ctx = context()
    mine = stats(ctx.memory, ctx.backend)
    return ctx.comm.allgather_object(mine) if all_ranks else mine


def reset_peak() -> None:
    """Start the peak over from what is alive now."""
    ledger = context().memory
    ledger.peak = ledger.live
