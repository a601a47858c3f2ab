"""Who this process is among the ranks: from MPI where mpiexec started it, else from the
torchrun-style variables RANK, WORLD_SIZE and LOCAL_RANK.

- Started by ``mpiexec -n N``: MPI's world gives the rank and size, the ranks sharing this
  host's memory give the local rank. RANK / WORLD_SIZE, if also set, must agree.
- Started by torchrun (or anything that sets RANK / WORLD_SIZE / LOCAL_RANK) and not by
  mpiexec: those variables give the rank and size. The GPU backend (nccl) joins such ranks
  through PyTorch's TCPStore (``kgen.dist.comm_store``). The host backend (mpi) carries data
  through MPI, which cannot join processes it did not start (an MPI singleton cannot connect
  to another here), so more than one rank started this way is refused for it with a remedy;
  one is fine.
- Neither: a single rank.

>>> describe_launch(mpi=(0, 1, 0), env=(-1, -1, -1))
Launch(rank=0, world_size=1, local_rank=0, how='single')
>>> describe_launch(mpi=(2, 4, 0), env=(-1, -1, -1)).how
'mpiexec'
>>> describe_launch(mpi=(0, 1, 0), env=(3, 4, 1), backend="nccl")
Launch(rank=3, world_size=4, local_rank=1, how='torchrun')
"""

from __future__ import annotations

from dataclasses import dataclass

from kgen.errors import BackendError


@dataclass(frozen=True)
class Launch:
    rank: int
    world_size: int
    local_rank: int
    how: str            # "mpiexec", "torchrun" or "single"


def describe_launch(mpi: tuple[int, int, int], env: tuple[int, int, int], backend: str = "mpi") -> Launch:
    """The launch, from MPI's (rank, size, local rank) and the environment's (RANK,
    WORLD_SIZE, LOCAL_RANK), -1 where unset, for ``backend`` ("mpi" or "nccl")."""
    mpi_rank, mpi_size, mpi_local = mpi
    env_rank, env_size, env_local = env
    if mpi_size > 1:
        if (env_size not in (-1, mpi_size)) or (env_rank not in (-1, mpi_rank)):
            raise BackendError(f"mpiexec started this process as rank {mpi_rank} of {mpi_size}, but "
                               f"RANK={env_rank} WORLD_SIZE={env_size} say otherwise",
                               remedy="unset RANK and WORLD_SIZE, or start the ranks with one launcher")
        return Launch(mpi_rank, mpi_size, mpi_local, "mpiexec")
    if env_size > 1 and backend == "nccl":
        if not 0 <= env_rank < env_size:
            raise BackendError(f"RANK={env_rank} is out of range for WORLD_SIZE={env_size}",
                               remedy="set RANK between 0 and WORLD_SIZE - 1")
        return Launch(env_rank, env_size, max(env_local, 0), "torchrun")
    if env_size > 1:
        raise BackendError(f"RANK={env_rank} WORLD_SIZE={env_size} say this is one of {env_size} ranks, "
                           "but mpiexec did not start it: the host backend (mpi) carries data through MPI, "
                           "which cannot join processes it did not start",
                           remedy=f"start the ranks with mpiexec -n {env_size} python ..., or use the GPU "
                                  "backend (kgen.dist.init(\"nccl\")), which joins torchrun's ranks",
                           rank=env_rank, world_size=env_size)
    if env_size == 1 or env_rank >= 0:
        if env_rank not in (-1, 0):
            raise BackendError(f"RANK={env_rank} is out of range for WORLD_SIZE={env_size}",
                               remedy="set RANK between 0 and WORLD_SIZE - 1")
        return Launch(0, 1, max(env_local, 0), "torchrun")
    return Launch(0, 1, 0, "single")
