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

from kgen.dist.comm import Communicator, Pending, Traffic, offsets, poll
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
        self._side = None                 # the stream begun collectives run on (``_started``)

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
        from kgen.knobs import knobs

        self.wait_stream(knobs.dist_timeout_s)
        self.host.barrier()

    def alive(self, timeout_s: float) -> None:
        """As the host channel's ``alive``; a rank lost there also aborts this NCCL communicator,
        so the collectives it has queued on this GPU end instead of waiting for ever."""
        from kgen.errors import RankLostError

        try:
            self.host.alive(timeout_s)
        except RankLostError:
            self.abort()
            raise

    # ---- the watchdog -----------------------------------------------------------------------

    def wait_stream(self, timeout_s: float) -> None:
        """Wait for the work queued on the current stream (NCCL's collectives among it). A
        collective whose peer died never ends: after ``timeout_s`` seconds (0: for ever), or at
        once where NCCL reports an error of its own, this communicator is aborted (its kernels
        stop) and RankLostError raised."""
        from kgen.errors import RankLostError

        done = self._current_work()
        if timeout_s <= 0:
            done.synchronize()
            return
        failure = []

        def over() -> bool:                          # done, or NCCL has reported an error
            if done.done:
                return True
            failure.extend(f for f in (self._async_error(),) if f is not None)
            return bool(failure)

        if not poll(over, timeout_s) or failure:
            self.abort()
            why = f"NCCL reported {failure[0]}" if failure else \
                f"its collectives did not finish within {timeout_s:g} s (KGEN_DIST_TIMEOUT)"
            raise RankLostError(f"rank {self.rank} of {self.size}: {why}; the NCCL communicator is aborted",
                                rank=self.rank, world_size=self.size)

    def abort(self) -> None:
        """Abort the NCCL communicator (its queued collectives end); it is unusable after."""
        if self.nccl_comm is not None:
            comm, self.nccl_comm = self.nccl_comm, None
            try:
                comm.abort()
            except Exception:             # aborting what already failed: nothing more to stop
                pass

    def _current_work(self):
        """An event after the work queued on the current stream (``.done``, ``.synchronize()``)."""
        import cupy

        return cupy.cuda.get_current_stream().record()

    def _async_error(self) -> str | None:
        """NCCL's own report of a failed collective (a peer lost, a network error), or None."""
        if self.nccl_comm is None:
            return "an aborted communicator"
        try:
            self.nccl_comm.check_async_error()
        except Exception as exc:          # cupy.cuda.nccl.NcclError
            return str(exc) or type(exc).__name__
        return None

    def split(self, color: int, key: int) -> NcclCommunicator:
        return NcclCommunicator.create(self.host.split(color, key), self.traffic)

    def free(self) -> None:
        if self.nccl_comm is not None:
            self.nccl_comm.destroy()
            self.nccl_comm = None
        self.host.free()

    # ---- begun collectives: on a second stream ---------------------------------------------

    def _started(self, run, inputs) -> Pending:
        """``run()`` issued on this communicator's own stream once the work queued so far on the
        current stream is done; ``wait()`` makes the stream current then wait for it. ``inputs``
        (made on the current stream) are kept until then, so their memory is not handed out
        again while the collective reads it; and every start waits for the current stream's
        work, so memory freed after a wait and reused on either stream is ordered after its
        last reader."""
        import cupy

        if self._side is None:
            self._side = cupy.cuda.Stream(non_blocking=True)
        self._side.wait_event(cupy.cuda.get_current_stream().record())
        with self._side:
            result = run()
        done = self._side.record()

        def finish(inputs=inputs):
            cupy.cuda.get_current_stream().wait_event(done)
            return result

        return Pending(finish=finish)

    def _allgatherv_start(self, send, counts):
        return self._started(lambda: self._allgatherv(send, counts), send)

    def _reduce_scatter_start(self, x, counts, op):
        return self._started(lambda: self._reduce_scatter(x, counts, op), x)

    def _bcast_start(self, buf, root):
        return self._started(lambda: self._bcast(buf, root), buf)

    # ---- data -----------------------------------------------------------------------------

    def _exchange(self, sends: dict[int, tuple[int, int]], recvs: dict[int, tuple[int, int]]) -> None:
        """Grouped point-to-point: (address, bytes) sent to each peer in ``sends``, received
        from each peer in ``recvs`` (this rank's own piece is the caller's copy)."""
        nccl, stream = _nccl(), _stream()
        nccl.groupStart()
        try:
            for peer in range(self.size):
                if peer == self.rank:
                    continue
                address, count = sends.get(peer, (0, 0))
                if count:
                    self.nccl_comm.send(address, count, nccl.NCCL_UINT8, peer, stream)
                address, count = recvs.get(peer, (0, 0))
                if count:
                    self.nccl_comm.recv(address, count, nccl.NCCL_UINT8, peer, stream)
        finally:
            nccl.groupEnd()

    def _alltoallv(self, send, send_counts, recv_counts):
        import cupy

        item, me = send.dtype.itemsize, self.rank
        recv = cupy.empty(sum(recv_counts), dtype=send.dtype)
        sb, rb = _bytes(send), _bytes(recv)
        sc, rc = [c * item for c in send_counts], [c * item for c in recv_counts]
        s_at, r_at = offsets(sc), offsets(rc)
        rb[r_at[me]:r_at[me] + rc[me]] = sb[s_at[me]:s_at[me] + sc[me]]
        self._exchange({d: (sb.data.ptr + s_at[d], sc[d]) for d in range(self.size)},
                       {s: (rb.data.ptr + r_at[s], rc[s]) for s in range(self.size)})
        return recv

    def _allgatherv(self, send, counts):
        import cupy

        item, me = send.dtype.itemsize, self.rank
        recv = cupy.empty(sum(counts), dtype=send.dtype)
        sb, rb = _bytes(send), _bytes(recv)
        rc = [c * item for c in counts]
        r_at = offsets(rc)
        rb[r_at[me]:r_at[me] + rc[me]] = sb
        self._exchange({d: (sb.data.ptr, rc[me]) for d in range(self.size)},
                       {s: (rb.data.ptr + r_at[s], rc[s]) for s in range(self.size)})
        return recv

    def _gatherv(self, send, counts, root):
        import cupy

        item, me = send.dtype.itemsize, self.rank
        sb = _bytes(send)
        if me != root:
            self._exchange({root: (sb.data.ptr, counts[me] * item)}, {})
            return None
        recv = cupy.empty(sum(counts), dtype=send.dtype)
        rb = _bytes(recv)
        rc = [c * item for c in counts]
        r_at = offsets(rc)
        rb[r_at[me]:r_at[me] + rc[me]] = sb
        self._exchange({}, {s: (rb.data.ptr + r_at[s], rc[s]) for s in range(self.size)})
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
