"""The NCCL communicator (CuPy's bindings) of GPU ranks.

Arrays move through NCCL on the current CuPy stream, so a collective is ordered with the
kernels around it and nothing waits on the host; small Python objects (the descriptors ranks
agree on, NCCL's unique ids) go through a host channel: the MPI communicator of the ranks
mpiexec started, or ``SingleRank`` for a process alone.

Payloads move as bytes, so every dtype travels; the variable-size collectives (alltoallv,
allgatherv, gatherv) are grouped point-to-point sends and receives, each rank's own piece a
device copy. Reductions run in float32 for the half types (as on host ranks) and in the
array's own type otherwise; a reduce-scatter of unequal blocks pads each to the largest.
"""

from __future__ import annotations

from kgen.dist.comm import Communicator, Traffic, offsets
from kgen.dist.dtypes import accumulator


class SingleRank:
    """The host channel of a process that is the only rank: objects stay where they are."""

    rank, size = 0, 1

    def allgather_object(self, obj) -> list:
        return [obj]

    def bcast_object(self, obj, root: int):
        return obj

    def barrier(self) -> None:
        pass

    def split(self, color: int, key: int) -> SingleRank:
        return SingleRank()

    def alive(self, timeout_s: float) -> None:
        pass

    def free(self) -> None:
        pass


def _nccl():
    from cupy.cuda import nccl

    return nccl


def _stream() -> int:
    import cupy

    return cupy.cuda.get_current_stream().ptr


def _bytes(x):
    """A contiguous array's bytes as a 1-D uint8 view."""
    import cupy

    return x.reshape(-1).view(cupy.uint8)


class NcclCommunicator(Communicator):
    """A communicator over a ``cupy.cuda.nccl.NcclCommunicator`` and a host channel."""

    def __init__(self, nccl_comm, host, traffic: Traffic | None = None):
        super().__init__(host.rank, host.size, traffic)
        self.nccl_comm, self.host = nccl_comm, host

    @classmethod
    def create(cls, host, traffic: Traffic | None = None) -> NcclCommunicator:
        """One NCCL communicator over the host channel's ranks (a collective call); each
        process has made its GPU current."""
        nccl = _nccl()
        uid = host.bcast_object(nccl.get_unique_id() if host.rank == 0 else None, 0)
        return cls(nccl.NcclCommunicator(host.size, uid, host.rank), host, traffic)

    # ---- uncounted ------------------------------------------------------------------------

    def allgather_object(self, obj) -> list:
        return self.host.allgather_object(obj)

    def bcast_object(self, obj, root: int):
        return self.host.bcast_object(obj, root)

    def barrier(self) -> None:
        import cupy

        cupy.cuda.get_current_stream().synchronize()
        self.host.barrier()

    def alive(self, timeout_s: float) -> None:
        self.host.alive(timeout_s)

    def split(self, color: int, key: int) -> NcclCommunicator:
        return NcclCommunicator.create(self.host.split(color, key), self.traffic)

    def free(self) -> None:
        if self.nccl_comm is not None:
            self.nccl_comm.destroy()
            self.nccl_comm = None
        self.host.free()

    # ---- data -----------------------------------------------------------------------------

    def _exchange(self, send, send_counts: list[int], recv, recv_counts: list[int]) -> None:
        """Rank d gets ``send_counts[d]`` bytes of ``send`` (in rank order); ``recv_counts[s]``
        bytes from rank s land in ``recv`` (in rank order): grouped sends and receives, this
        rank's own piece copied."""
        nccl, stream, me = _nccl(), _stream(), self.rank
        send_at, recv_at = offsets(send_counts), offsets(recv_counts)
        if recv_counts[me]:
            recv[recv_at[me]:recv_at[me] + recv_counts[me]] = send[send_at[me]:send_at[me] + send_counts[me]]
        nccl.groupStart()
        try:
            for peer in range(self.size):
                if peer == me:
                    continue
                if send_counts[peer]:
                    self.nccl_comm.send(send.data.ptr + send_at[peer], send_counts[peer], nccl.NCCL_UINT8, peer,
                                        stream)
                if recv_counts[peer]:
                    self.nccl_comm.recv(recv.data.ptr + recv_at[peer], recv_counts[peer], nccl.NCCL_UINT8, peer,
                                        stream)
        finally:
            nccl.groupEnd()

    def _alltoallv(self, send, send_counts, recv_counts):
        import cupy

        item = send.dtype.itemsize
        recv = cupy.empty(sum(recv_counts), dtype=send.dtype)
        self._exchange(_bytes(send), [c * item for c in send_counts], _bytes(recv), [c * item for c in recv_counts])
        return recv

    def _allgatherv(self, send, counts):
        import cupy

        item, me = send.dtype.itemsize, self.rank
        recv = cupy.empty(sum(counts), dtype=send.dtype)
        sends = [counts[me] * item] * self.size
        self._exchange(_bytes(send), [0 if d == me else c for d, c in enumerate(sends)], _bytes(recv),
                       [c * item for c in counts])
        if counts[me]:
            at = sum(counts[:me])
            recv[at:at + counts[me]] = send
        return recv

    def _gatherv(self, send, counts, root):
        import cupy

        item, me = send.dtype.itemsize, self.rank
        if me != root:
            sends = [0] * self.size
            sends[root] = counts[me] * item
            self._exchange(_bytes(send), sends, cupy.empty(0, dtype=cupy.uint8), [0] * self.size)
            return None
        recv = cupy.empty(sum(counts), dtype=send.dtype)
        self._exchange(_bytes(send), [0] * self.size, _bytes(recv),
                       [0 if r == me else c * item for r, c in enumerate(counts)])
        if counts[me]:
            at = sum(counts[:me])
            recv[at:at + counts[me]] = send
        return recv

    def _bcast(self, buf, root):
        raw = _bytes(buf)
        if raw.size and self.size > 1:
            self.nccl_comm.bcast(raw.data.ptr, raw.size, _nccl().NCCL_UINT8, root, _stream())
        return buf

    def reduction_dtype(self, dtype):
        return accumulator(dtype) if dtype.name in ("float16", "bfloat16") else dtype

    def _type_and_op(self, dtype, op: str) -> tuple[int, int]:
        nccl = _nccl()
        kinds = {"float32": nccl.NCCL_FLOAT32, "float64": nccl.NCCL_FLOAT64}
        return kinds[dtype.name], nccl.NCCL_SUM if op == "sum" else nccl.NCCL_MAX

    def _allreduce(self, x, op):
        work = x.astype(self.reduction_dtype(x.dtype), copy=True).reshape(-1)
        if work.size and self.size > 1:
            kind, red = self._type_and_op(work.dtype, op)
            self.nccl_comm.allReduce(work.data.ptr, work.data.ptr, work.size, kind, red, _stream())
        return work.reshape(x.shape).astype(x.dtype, copy=False)

    def _reduce_scatter(self, x, counts, op):
        import cupy

        work = x.astype(self.reduction_dtype(x.dtype), copy=False).reshape(-1)
        block = max(counts) if counts else 0
        if self.size == 1 or not block:
            return work[:counts[self.rank]].astype(x.dtype, copy=True)
        padded = cupy.zeros(block * self.size, dtype=work.dtype)
        for r, at in enumerate(offsets(counts)):
            padded[r * block:r * block + counts[r]] = work[at:at + counts[r]]
        mine = cupy.empty(block, dtype=work.dtype)
        kind, red = self._type_and_op(work.dtype, op)
        self.nccl_comm.reduceScatter(padded.data.ptr, mine.data.ptr, block, kind, red, _stream())
        return mine[:counts[self.rank]].astype(x.dtype, copy=False)
