"""Reads merged over several stores; writes to the first.

>>> from kgen.db import MemoryStore
>>> db = LayeredStore(MemoryStore(), MemoryStore())
>>> db.count()
0
"""

from __future__ import annotations

from typing import Iterable

from kgen.db.base import Database, best_order, canonical, record_order
from kgen.measurement import Record


class LayeredStore(Database):
    """``commit`` goes to ``write``; reads merge every layer (a record also in an earlier layer is shown once)."""

    def __init__(self, write: Database, *read_only: Database):
        self.write = write
        self.layers: tuple[Database, ...] = (write, *read_only)

    def commit(self, records: Iterable[Record]) -> int:
        return self.write.commit(records)

    def records(self, family, problem_key=None, device=None, template_digest=None):
        merged: list[tuple[str, Record]] = []
        seen: set[str] = set()
        for layer in self.layers:
            rows = [(canonical(r), r) for r in layer.records(family, problem_key, device, template_digest)]
            merged += [(t, r) for t, r in rows if t not in seen]
            seen.update(t for t, _ in rows)
        return [r for t, r in sorted(merged, key=lambda tr: record_order(tr[1], tr[0]))]

    def best(self, family, problem_key, device, template_digest=None):
        found = [b for layer in self.layers
                 if (b := layer.best(family, problem_key, device, template_digest)) is not None]
        return min(found, key=lambda r: best_order(r, canonical(r))) if found else None

    def problems(self, family, device=None, template_digest=None):
        return sorted({k for layer in self.layers for k in layer.problems(family, device, template_digest)})

    def families(self):
        return sorted({f for layer in self.layers for f in layer.families()})

    def count(self) -> int:
        """Records stored in all layers together."""
        return sum(layer.count() for layer in self.layers)

    def close(self) -> None:
        for layer in self.layers:
            layer.close()
