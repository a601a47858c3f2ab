"""kgen.dist: matrices spread over ranks by named layouts, moved between layouts by a
redistribution service that moves only what changes owner, and multiplied by distributed
GEMM algorithms whose local products go through one seam. Host-memory ranks (MPI through
mpi4py, NumPy local compute) or GPU ranks (NCCL through CuPy, kgen.gemm); docs/dist.md is the
user's guide.

>>> import kgen.dist as kd
>>> sorted(kd.layout.KINDS)
['block2d', 'cols', 'cyclic2d', 'replicated', 'rows']
"""

from kgen.dist import layout
from kgen.dist.comm import Communicator, Traffic
from kgen.dist.cost import ALGORITHMS, Estimate
from kgen.dist.dtypes import supported as supported_dtypes
from kgen.dist.gemm import gemm, gemm_costs
from kgen.dist.layout import Layout, block2d, cyclic2d
from kgen.dist.matrix import DistMatrix, from_global, from_local
from kgen.dist.runtime import (barrier, context, finalize, init, local_rank, memory_stats, rank, reset_peak, traffic,
                               world_size)


def norm(x: DistMatrix) -> float:
    """The Frobenius norm of ``x`` on every rank (a collective call)."""
    return x.norm()


__all__ = [
    "init", "finalize", "rank", "world_size", "local_rank", "barrier", "traffic", "context", "memory_stats",
    "reset_peak",
    "DistMatrix", "from_global", "from_local", "Layout", "block2d", "cyclic2d", "layout",
    "gemm", "gemm_costs", "ALGORITHMS", "Estimate", "norm", "supported_dtypes", "Communicator", "Traffic",
]
