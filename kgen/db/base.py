"""The tuning database interface, and the ordering rules every store shares.

>>> from kgen.db import MemoryStore
>>> with MemoryStore() as db:
...     db.count()
0
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from typing import Iterable

from kgen.measurement import Record, record_to_dict


class Database(ABC):
    """Stores Records; answers the fastest successful config per problem and device."""

    @abstractmethod
    def commit(self, records: Iterable[Record]) -> int:
        """Write all records in one transaction; return how many were written."""

    @abstractmethod
    def records(self, family: str, problem_key: str | None = None, device: str | None = None,
                template_digest: str | None = None) -> list[Record]:
        """Matching records, ordered by config_name, then created (then the rest of the record)."""

    @abstractmethod
    def best(self, family: str, problem_key: str, device: str,
             template_digest: str | None = None) -> Record | None:
        """The successful record with the lowest time_ms (ties: lowest config_name), or None."""

    @abstractmethod
    def problems(self, family: str, device: str | None = None,
                 template_digest: str | None = None) -> list[str]:
        """Sorted distinct problem keys with at least one successful record."""

    @abstractmethod
    def families(self) -> list[str]:
        """Sorted distinct families present."""

    @abstractmethod
    def count(self) -> int:
        """Number of records stored."""

    def close(self) -> None:
        """Release connections and files; the store is not used afterwards."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def canonical(record: Record) -> str:
    """The record's stored text: sorted-key JSON of record_to_dict."""
    return json.dumps(record_to_dict(record), sort_keys=True)


def usable_time(record: Record) -> float | None:
    """time_ms of a successful measurement with a finite time, else None."""
    t = record.measurement.time_ms
    return t if t is not None and math.isfinite(t) else None


def record_order(record: Record, text: str) -> tuple:
    """Sort key of records(): config_name, created, then the rest, then the full text."""
    m, p = record.measurement, record.provenance
    return (m.config_name, p.created, m.problem_key, p.device, p.template_digest, text)


def best_order(record: Record, text: str) -> tuple:
    """Sort key of best() among usable records: time_ms, config_name, created, full text."""
    return (usable_time(record), record.measurement.config_name, record.provenance.created, text)


def matches(record: Record, family: str, problem_key: str | None, device: str | None,
            template_digest: str | None) -> bool:
    m, p = record.measurement, record.provenance
    return (record.family == family
            and (problem_key is None or m.problem_key == problem_key)
            and (device is None or p.device == device)
            and (template_digest is None or p.template_digest == template_digest))
