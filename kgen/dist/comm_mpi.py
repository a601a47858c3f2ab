"""The MPI communicator (mpi4py) of host-memory ranks.

Data moves as raw bytes, so every dtype travels, bfloat16 included; reductions run in
float32 for the half types (MPI has no standard half-precision sum) and in the array's own
type otherwise, and the result comes back in the type it was given.
"""

from __future__ import annotations


import numpy as np

from kgen.dist.comm import Communicator, Pending, Traffic, offsets, poll
from kgen.dist.dtypes import accumulator


def _bytes(x: np.ndarray) -> np.ndarray:
    return x.reshape(-1).view(np.uint8)


class MpiCommunicator(Communicator):
    """A communicator over an mpi4py ``Intracomm``."""

    def __init__(self, comm, traffic: Traffic | None = None):
        super().__init__(comm.Get_rank(), comm.Get_size(), traffic)
        self.comm = comm
        from mpi4py import MPI

        self._mpi = MPI
        comm.Set_errhandler(MPI.ERRORS_RETURN)      # a failed peer is an exception here, not an abort

    def alive(self, timeout_s: float) -> None:
        """A non-blocking barrier, polled until ``timeout_s`` (RankLostError then)."""
        if self.size == 1:
            return
        if timeout_s <= 0:
            self.comm.Barrier()
            return
        from kgen.errors import RankLostError

        try:
            request = self.comm.Ibarrier()
            if not poll(request.Test, timeout_s):
                raise RankLostError(f"rank {self.rank}: not every one of the {self.size} ranks reached a "
                                    f"collective call within {timeout_s:g} s (KGEN_DIST_TIMEOUT)",
                                    rank=self.rank, world_size=self.size)
        except self._mpi.Exception as exc:
            raise RankLostError(f"rank {self.rank}: MPI failed waiting for the other ranks ({exc})",
                                rank=self.rank, world_size=self.size) from None

    def allgather_object(self, obj) -> list:
        return self.comm.allgather(obj)

    def bcast_object(self, obj, root: int):
        return self.comm.bcast(obj, root=root)

    def barrier(self) -> None:
        self.comm.Barrier()

    def split(self, color: int, key: int) -> MpiCommunicator:
        return MpiCommunicator(self.comm.Split(color, key), self.traffic)

    def free(self) -> None:
        if self.comm != self._mpi.COMM_NULL:
            self.comm.Free()

    def _alltoallv(self, send, send_counts, recv_counts):
        item = send.dtype.itemsize
        recv = np.empty(sum(recv_counts), dtype=send.dtype)
        sc = [c * item for c in send_counts]
        rc = [c * item for c in recv_counts]
        byte = self._mpi.BYTE
        self.comm.Alltoallv([_bytes(send), (sc, offsets(sc)), byte], [_bytes(recv), (rc, offsets(rc)), byte])
        return recv

    def _allgatherv(self, send, counts):
        item = send.dtype.itemsize
        recv = np.empty(sum(counts), dtype=send.dtype)
        rc = [c * item for c in counts]
        byte = self._mpi.BYTE
        self.comm.Allgatherv([_bytes(send), byte], [_bytes(recv), (rc, offsets(rc)), byte])
        return recv

    def _allgatherv_start(self, send, counts):
        """Iallgatherv: the ranks compute while MPI moves the pieces (as far as the MPI library
        progresses a request between calls)."""
        item = send.dtype.itemsize
        recv = np.empty(sum(counts), dtype=send.dtype)
        rc = [c * item for c in counts]
        byte = self._mpi.BYTE
        request = self.comm.Iallgatherv([_bytes(send), byte], [_bytes(recv), (rc, offsets(rc)), byte])

        def finish(send=send):                   # the send buffer lives until the request is done
            request.Wait()
            return recv

        return Pending(finish=finish)

    def _gatherv(self, send, counts, root):
        item = send.dtype.itemsize
        byte = self._mpi.BYTE
        if self.rank != root:
            self.comm.Gatherv([_bytes(send), byte], None, root=root)
            return None
        recv = np.empty(sum(counts), dtype=send.dtype)
        rc = [c * item for c in counts]
        self.comm.Gatherv([_bytes(send), byte], [_bytes(recv), (rc, offsets(rc)), byte], root=root)
        return recv

    def _bcast(self, buf, root):
        buf = np.array(buf, copy=True) if not buf.flags.writeable else buf
        self.comm.Bcast([_bytes(buf), self._mpi.BYTE], root=root)
        return buf

    def _bcast_start(self, buf, root):
        """Ibcast (as ``_allgatherv_start``), into ``buf`` (a copy where it is read-only)."""
        buf = np.array(buf, copy=True) if not buf.flags.writeable else buf
        request = self.comm.Ibcast([_bytes(buf), self._mpi.BYTE], root=root)

        def finish():
            request.Wait()
            return buf

        return Pending(finish=finish)

    def _op(self, op: str):
        return self._mpi.SUM if op == "sum" else self._mpi.MAX

    def reduction_dtype(self, dtype):
        return accumulator(dtype) if dtype.name in ("float16", "bfloat16") else dtype

    def _allreduce(self, x, op):
        work = np.array(x, dtype=self.reduction_dtype(x.dtype), copy=True)
        self.comm.Allreduce(self._mpi.IN_PLACE, work.reshape(-1), op=self._op(op))
        return work.astype(x.dtype, copy=False)

    def _reduce_scatter(self, x, counts, op):
        work = np.ascontiguousarray(x, dtype=self.reduction_dtype(x.dtype))
        recv = np.empty(counts[self.rank], dtype=work.dtype)
        self.comm.Reduce_scatter(work.reshape(-1), recv, recvcounts=counts, op=self._op(op))
        return recv.astype(x.dtype, copy=False)

    def _reduce_scatter_start(self, x, counts, op):
        """Ireduce_scatter (as ``_allgatherv_start``)."""
        work = np.ascontiguousarray(x, dtype=self.reduction_dtype(x.dtype))
        recv = np.empty(counts[self.rank], dtype=work.dtype)
        request = self.comm.Ireduce_scatter(work.reshape(-1), recv, recvcounts=counts, op=self._op(op))

        def finish(work=work):                   # the reduced buffer lives until the request is done
            request.Wait()
            return recv.astype(x.dtype, copy=False)

        return Pending(finish=finish)
