"""An in-memory store, for tests and replay.

>>> db = MemoryStore()
>>> db.records("gemm")
[]
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from kgen.db.base import Database, best_order, canonical, matches, record_key, record_order, scope, usable_time
from kgen.db.conflicts import Held
from kgen.measurement import Record


class MemoryStore(Database):
    """Records kept in a list, indexed by family."""

    def __init__(self, records: Iterable[Record] = ()):
        self._rows: dict[str, list[tuple[Record, str]]] = defaultdict(list)
        self._texts: dict[tuple, list[str]] = {}        # by record_key: the conflict rule's index
        self._n = 0
        self.commit(records)

    def _add_rows(self, rows: list[tuple[Record, str]]) -> None:
        for record, text in rows:
            self._rows[record.family].append((record, text))
        self._n += len(rows)

    def commit(self, records: Iterable[Record]) -> int:
        batch = [(record_key(r), text, (r, text)) for r in records for text in (canonical(r),)]  # all or nothing
        held = Held(self._texts)
        rows = held.admit(batch)
        self._add_rows(rows)
        for key, old, new, (record, _) in held.upgrades:     # a held import now trusted
            family_rows = self._rows[key[0]]
            at = next(i for i, (_, text) in enumerate(family_rows) if text == old)
            family_rows[at] = (record, new)
        return len(rows)

    def _select(self, family, problem_key, device, template_digest, cc=None):
        return [(r, t) for r, t in self._rows.get(family, ())
                if matches(r, family, problem_key, device, template_digest, cc)]

    def records(self, family, problem_key=None, device=None, template_digest=None):
        rows = self._select(family, problem_key, device, template_digest)
        return [r for r, _ in sorted(rows, key=lambda rt: record_order(*rt))]

    def best(self, family, problem_key, device, template_digest=None, *, policy="device", cc=None):
        device, cc = scope(policy, device, cc)
        rows = [rt for rt in self._select(family, problem_key, device, template_digest, cc)
                if usable_time(rt[0]) is not None]
        return min(rows, key=lambda rt: best_order(*rt))[0] if rows else None

    def problems(self, family, device=None, template_digest=None, *, policy="device", cc=None):
        device, cc = scope(policy, device, cc)
        return sorted({r.measurement.problem_key
                       for r, _ in self._select(family, None, device, template_digest, cc)
                       if usable_time(r) is not None})

    def families(self):
        return sorted(f for f, rows in self._rows.items() if rows)

    def count(self):
        return self._n
