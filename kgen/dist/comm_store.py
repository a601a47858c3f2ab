"""The host channel of GPU ranks that torchrun started: small objects through a key-value store.

The nccl backend moves arrays through NCCL, but its ranks first agree on NCCL's unique id and
later on small descriptors; under mpiexec, MPI carries those. Ranks that torchrun (or another
launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT) started have no MPI world
joining them, so they use PyTorch's ``TCPStore`` instead, the store torchrun's own rendezvous
serves (``TORCHELASTIC_USE_AGENT_STORE``: every rank a client), else one that rank 0 serves at
MASTER_ADDR:MASTER_PORT.

A store offers ``set``, a ``get`` that waits for the key, ``add`` (an atomic counter) and
``delete_key``. Each exchange writes this rank's value under a key naming the channel, the
exchange's sequence number and the rank, then reads the others' (a broadcast: the root writes,
the others read). Once a rank has finished an exchange every rank writes to (an all-gather, a
barrier, ``alive``), every rank has finished all exchanges before it, so it deletes the keys it
wrote for those. Values are pickled: the store is the job's own, reached only by its ranks.

>>> channel = StoreChannel(DictStore(), rank=0, size=1)
>>> channel.allgather_object({"uid": 7}), channel.bcast_object("x", 0)
([{'uid': 7}], 'x')
"""

from __future__ import annotations

import pickle
import threading
from datetime import timedelta

from kgen.dist.comm import poll
from kgen.errors import BackendError, RankLostError


class StoreChannel:
    """Object collectives of ``size`` ranks over ``store``, keys under ``prefix``."""

    def __init__(self, store, rank: int, size: int, prefix: str = "kgen.dist", timeout_s: float = 300.0):
        self.store, self.rank, self.size, self.prefix = store, rank, size, prefix
        self.timeout_s = timeout_s
        self._seq = 0
        self._written: list[tuple[int, str]] = []     # (exchange, key) this rank wrote and has not deleted

    # ---- the exchange ------------------------------------------------------------------------
    def _key(self, seq: int, rank: int) -> str:
        return f"{self.prefix}/{seq}/{rank}"

    def _next(self) -> int:
        seq, self._seq = self._seq, self._seq + 1
        return seq

    def _set(self, seq: int, key: str, value: bytes) -> None:
        self.store.set(key, value)
        self._written.append((seq, key))

    def _everyone_passed(self, seq: int) -> None:
        """Every rank has finished the exchanges before ``seq``: delete this rank's keys of them."""
        keep = []
        for written, key in self._written:
            if written < seq:
                try:
                    self.store.delete_key(key)
                except Exception:        # a store without deletion keeps the key: only memory
                    pass
            else:
                keep.append((written, key))
        self._written = keep

    def _get(self, key: str) -> bytes:
        try:
            return self.store.get(key)
        except Exception as exc:         # the store's own timeout or a lost connection
            raise RankLostError(f"rank {self.rank}: no value for {key} in the store within {self.timeout_s:g} s "
                                f"(KGEN_DIST_TIMEOUT) ({type(exc).__name__}: {exc})",
                                rank=self.rank, world_size=self.size) from None

    def allgather_object(self, obj) -> list:
        seq = self._next()
        self._set(seq, self._key(seq, self.rank), pickle.dumps(obj))
        out = [obj if r == self.rank else pickle.loads(self._get(self._key(seq, r))) for r in range(self.size)]
        self._everyone_passed(seq)
        return out

    def bcast_object(self, obj, root: int):
        seq = self._next()
        if self.rank == root:
            self._set(seq, self._key(seq, root), pickle.dumps(obj))
            return obj
        return pickle.loads(self._get(self._key(seq, root)))

    def barrier(self) -> None:
        self.allgather_object(None)

    def alive(self, timeout_s: float) -> None:
        """A barrier that raises RankLostError after ``timeout_s`` (0: waits as long as the store)."""
        if self.size == 1:
            return
        seq = self._next()
        key = f"{self.prefix}/{seq}/arrived"
        count = self.store.add(key, 1)
        if self.rank == 0:
            self._written.append((seq, key))
        arrived = [count]

        def everyone() -> bool:
            if arrived[0] < self.size:
                arrived[0] = self.store.add(key, 0)
            return arrived[0] >= self.size

        if not (count >= self.size or poll(everyone, timeout_s, 1e-4, 1e-2)):
            raise RankLostError(f"rank {self.rank}: {arrived[0]} of the {self.size} ranks reached a collective "
                                f"call within {timeout_s:g} s (KGEN_DIST_TIMEOUT)",
                                rank=self.rank, world_size=self.size)
        self._everyone_passed(seq)

    def split(self, color: int, key: int) -> StoreChannel:
        """The channel of the ranks that gave the same ``color``, ordered by ``key`` (then rank)."""
        seq = self._seq
        everyone = self.allgather_object((color, key))
        members = sorted((k, r) for r, (c, k) in enumerate(everyone) if c == color)
        rank = [r for _, r in members].index(self.rank)
        return StoreChannel(self.store, rank, len(members), f"{self.prefix}/split{seq}.{color}", self.timeout_s)

    def free(self) -> None:
        pass


class DictStore:
    """A store in this process's memory, for ranks that are threads (tests, and the doctest):
    ``get`` waits for the key as ``TCPStore.get`` does, up to ``timeout_s``."""

    def __init__(self, timeout_s: float = 30.0):
        self._values: dict[str, object] = {}
        self._changed = threading.Condition()
        self.timeout_s = timeout_s

    def set(self, key: str, value: bytes) -> None:
        with self._changed:
            self._values[key] = bytes(value)
            self._changed.notify_all()

    def get(self, key: str) -> bytes:
        with self._changed:
            if not self._changed.wait_for(lambda: key in self._values, self.timeout_s):
                raise TimeoutError(f"no key {key!r} within {self.timeout_s:g} s")
            return self._values[key]

    def add(self, key: str, amount: int) -> int:
        with self._changed:
            value = int(self._values.get(key, 0)) + amount
            self._values[key] = value
            self._changed.notify_all()
            return value

    def delete_key(self, key: str) -> bool:
        with self._changed:
            return self._values.pop(key, None) is not None

    def keys(self) -> list[str]:
        with self._changed:
            return sorted(self._values)


def torchrun_store(rank: int, world_size: int, addr: str, port: int, agent_store: bool, timeout_s: float):
    """PyTorch's TCPStore for these ranks: a client of torchrun's agent's store where torchrun
    says it serves one (``agent_store``), else served by rank 0 at ``addr:port``."""
    try:
        from torch.distributed import TCPStore
    except ImportError as exc:
        raise BackendError(f"ranks started without mpiexec meet through PyTorch's TCPStore, which does not "
                           f"import here ({exc})",
                           remedy="pip install torch (torchrun comes with it), or start the ranks with mpiexec",
                           rank=rank, world_size=world_size) from None
    if not addr or port <= 0:
        raise BackendError(f"rank {rank} of {world_size} was started without mpiexec, and MASTER_ADDR / "
                           "MASTER_PORT do not say where the ranks meet",
                           remedy="start the ranks with torchrun (it sets them), or set MASTER_ADDR and "
                                  "MASTER_PORT to rank 0's host and a free port", rank=rank, world_size=world_size)
    timeout = timedelta(seconds=timeout_s if timeout_s > 0 else 7 * 24 * 3600)
    try:
        store = TCPStore(addr, port, world_size, is_master=rank == 0 and not agent_store, timeout=timeout,
                         wait_for_workers=False)
    except Exception as exc:             # refused, unreachable, the port taken: PyTorch's own errors
        raise BackendError(f"rank {rank}: the store at {addr}:{port} cannot be reached or served "
                           f"({type(exc).__name__}: {exc})",
                           remedy="check MASTER_ADDR / MASTER_PORT (a free port on rank 0's host)",
                           rank=rank, world_size=world_size) from None
    return store
