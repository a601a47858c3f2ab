"""Who this process is among the ranks: from MPI where mpiexec started it, else from the
torchrun-style variables RANK, WORLD_SIZE and LOCAL_RANK.

- Started by ``mpiexec -n N``: MPI's world gives the rank and size, the ranks sharing this
  host's memory give the local rank. RANK / WORLD_SIZE, if also set, must agree.
- Started by torchrun (or anything that sets RANK / WORLD_SIZE / LOCAL_RANK) and not by
  mpiexec: those variables give the rank and size. The host backend carries data through
  MPI, which cannot join processes it did not start (an MPI singleton cannot connect to
  another here), so more than one rank started this way is refused with a remedy; one is
  fine. The GPU backend will bootstrap NCCL from these variables.
- Neither: a single rank.

>>> describe_launch(mpi=(0, 1, 0), env=(-1, -1, -1))
Launch(rank=0, world_size=1, local_rank=0, how='single')
>>> describe_launch(mpi=(2, 4, 0), env=(-1, -1, -1)).how
'mpiexec'
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


def describe_launch(mpi: tuple[int, int, int], env: tuple[int, int, int]) -> Launch:
    """The launch, from MPI's (rank, size, local rank) and the environment's (RANK,
    WORLD_SIZE, LOCAL_RANK), -1 where unset."""
    mpi_rank, mpi_size, mpi_local = mpi
    env_rank, env_size, env_local = env
    if mpi_size > 1:
        if (env_size not in (-1, mpi_size)) or (env_rank not in (-1, mpi_rank)):
            raise BackendError(f"mpiexec started this process as rank {mpi_rank} of {mpi_size}, but "
                               f"RANK={env_rank} WORLD_SIZE={env_size} say otherwise",
                               remedy="unset RANK and WORLD_SIZE, or start the ranks with one launcher")
        return Launch(mpi_rank, mpi_size, mpi_local, "mpiexec")
    if env_size > 1:
        raise BackendError(f"RANK={env_rank} WORLD_SIZE={env_size} say this is one of {env_size} ranks, "
                           "but mpiexec did not start it: the host backend (mpi) carries data through MPI, "
                           "which cannot join processes it did not start",
                           remedy=f"start the ranks with mpiexec -n {env_size} python ... (the GPU backend, "
                                  "when available, bootstraps from these variables)",
                           rank=env_rank, world_size=env_size)
    if env_size == 1 or env_rank >= 0:
        if env_rank not in (-1, 0):
            raise BackendError(f"RANK={env_rank} is out of range for WORLD_SIZE={env_size}",
                               remedy="set RANK between 0 and WORLD_SIZE - 1")
        return Launch(0, 1, max(env_local, 0), "torchrun")
    return Launch(0, 1, 0, "single")
