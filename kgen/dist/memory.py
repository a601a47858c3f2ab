"""What this rank's matrices hold: the bytes of the DistMatrix shards alive now and the most
alive at once since init (or ``reset_peak``), and on GPU ranks what CuPy's memory pool, which
every shard and communication buffer comes from and returns to, uses and holds.

A buffer is counted once, however many matrices hold it or views of it (``.T``, a reshaped
receive buffer): while any of them is alive.

>>> ledger = Ledger()
>>> ledger.hold(1, 100); ledger.hold(2, 50); ledger.hold(1, 100); ledger.drop(1); ledger.drop(2)
>>> (ledger.live, ledger.peak)
(100, 150)
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field


@dataclass
class Ledger:
    live: int = 0
    peak: int = 0
    buffers: dict = field(default_factory=dict)      # id of a buffer -> [bytes, matrices holding it]

    def hold(self, key: int, nbytes: int) -> None:
        entry = self.buffers.get(key)
        if entry is not None:
            entry[1] += 1
            return
        self.buffers[key] = [nbytes, 1]
        self.live += nbytes
        self.peak = max(self.peak, self.live)

    def drop(self, key: int) -> None:
        entry = self.buffers[key]
        entry[1] -= 1
        if not entry[1]:
            del self.buffers[key]
            self.live -= entry[0]


def _owner(array):
    """The array that owns ``array``'s memory (``array`` itself unless it is a view)."""
    while hasattr(getattr(array, "base", None), "nbytes"):
        array = array.base
    return array


def track(ledger: Ledger, matrix, local) -> None:
    """Count the buffer under ``local`` (the shard of ``matrix``) while ``matrix`` lives (the
    buffer stays alive as long, so its id names it meanwhile)."""
    owner = _owner(local)
    if not owner.nbytes:
        return
    ledger.hold(id(owner), owner.nbytes)
    weakref.finalize(matrix, ledger.drop, id(owner))


def stats(ledger: Ledger, backend: str) -> dict:
    """This rank's figures (see the module's text), in bytes."""
    out = {"shard_bytes": ledger.live, "shard_peak_bytes": ledger.peak}
    if backend == "nccl":
        import cupy

        pool = cupy.get_default_memory_pool()
        out.update(pool_used_bytes=pool.used_bytes(), pool_held_bytes=pool.total_bytes())
    return out
