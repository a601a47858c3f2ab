"""Reads merged over several stores; writes to one of them.

Answers do not depend on the order of the layers: ``best`` is the least under one total
order, ``problems`` a union, ``records`` sorted (a record held by several layers is shown
as many times as the layer holding it most often).

>>> from kgen.db import MemoryStore
>>> db = LayeredStore(MemoryStore(), MemoryStore())
>>> db.count()
0
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from kgen.db.base import Database, best_order, canonical, record_order
from kgen.errors import DatabaseError
from kgen.measurement import Record


class LayeredStore(Database):
    """Reads every layer, in order; ``commit`` goes to ``write`` (default: the first layer)."""

    def __init__(self, first: Database, *rest: Database, write: Database | None = None):
        self.layers: tuple[Database, ...] = (first, *rest)
        self.write = first if write is None else write
        if not any(layer is self.write for layer in self.layers):
            raise DatabaseError("the write store of a LayeredStore must be one of its layers",
                                remedy="pass the write store among the layers too")

    def commit(self, records: Iterable[Record]) -> int:
        return self.write.commit(records)

    def records(self, family, problem_key=None, device=None, template_digest=None):
        most: Counter = Counter()
        found: dict[str, Record] = {}
        for layer in self.layers:
            here = Counter()
            for r in layer.records(family, problem_key, device, template_digest):
                text = canonical(r)
                here[text] += 1
                found.setdefault(text, r)
            most |= here                              # per text: the largest count of any layer
        rows = sorted(most.elements(), key=lambda t: record_order(found[t], t))
        return [found[t] for t in rows]

    def best(self, family, problem_key, device, template_digest=None, *, policy="device", cc=None):
        found = [b for layer in self.layers
                 if (b := layer.best(family, problem_key, device, template_digest,
                                     policy=policy, cc=cc)) is not None]
        return min(found, key=lambda r: best_order(r, canonical(r))) if found else None

    def problems(self, family, device=None, template_digest=None, *, policy="device", cc=None):
        return sorted({k for layer in self.layers
                       for k in layer.problems(family, device, template_digest, policy=policy, cc=cc)})

    def families(self):
        return sorted({f for layer in self.layers for f in layer.families()})

    def count(self) -> int:
        """Records stored in all layers together."""
        return sum(layer.count() for layer in self.layers)

    def close(self) -> None:
        for layer in self.layers:
            layer.close()
