"""The tuning database interface, and the ordering and policy rules every store shares.

Record-use policy (``policy=`` of ``best`` and ``problems``): ``"device"`` uses records of
the same device name only (dispatch's default); ``"arch"`` those of the same compute
capability (``provenance.cc``, any device name; ``cc=`` required); ``"any"`` those of every
device (warm starts only).

>>> from kgen.db import MemoryStore
>>> with MemoryStore() as db:
...     db.count()
0
"""

from __future__ import annotations

import math
import operator
from abc import ABC, abstractmethod
from typing import Iterable

from kgen.db.codec import dumps_sorted
from kgen.errors import DatabaseError
from kgen.measurement import Record, normalized_dict, record_to_dict

POLICIES = ("device", "arch", "any")


class Database(ABC):
    """Stores Records; answers the fastest successful config per problem and device."""

    @abstractmethod
    def commit(self, records: Iterable[Record]) -> int:
        """Write all records in one transaction under the conflict rule (``kgen.db.conflicts``:
        a record identical to one held, origin aside, is not written again; one with other
        content under a held key is written beside it); return how many were written.

        For records measured here (a tune, ``kgen db verify``): they are not checked against
        their family's space. Records from elsewhere go through ``kgen.db.exchange``
        (``import_file``, ``import_records``), which checks them (``kgen.db.validity``)."""

    @abstractmethod
    def records(self, family: str, problem_key: str | None = None, device: str | None = None,
                template_digest: str | None = None) -> list[Record]:
        """Matching records, ordered by config_name, then created (then the rest of the record)."""

    @abstractmethod
    def best(self, family: str, problem_key: str, device: str, template_digest: str | None = None,
             *, policy: str = "device", cc: str | None = None) -> Record | None:
        """The successful record with the lowest time_ms (ties: lowest config_name) that
        ``policy`` admits for ``device`` / ``cc``, or None."""

    @abstractmethod
    def problems(self, family: str, device: str | None = None, template_digest: str | None = None,
                 *, policy: str = "device", cc: str | None = None) -> list[str]:
        """Sorted distinct problem keys with at least one successful record that ``policy``
        admits (``device=None`` with policy "device": every device)."""

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


def cc_text(cc) -> str | None:
    """A compute capability as stored in provenance: (9, 0) or "9.0" -> "9.0"."""
    if cc is None or isinstance(cc, str):
        return cc
    major, minor = cc
    return f"{major}.{minor}"


def scope(policy: str, device: str | None, cc) -> tuple[str | None, str | None]:
    """The (device, cc) filters a policy stands for; None means no filter on that field.

    >>> scope("arch", "NVIDIA H200", (9, 0))
    (None, '9.0')
    """
    if policy == "device":
        return device, None
    if policy == "any":
        return None, None
    if policy == "arch":
        if cc is None:
            raise DatabaseError("record-use policy 'arch' needs the target's compute capability",
                                remedy="pass cc='9.0' (Target.cc) along with policy='arch'")
        return None, cc_text(cc)
    raise DatabaseError(f"unknown record-use policy {policy!r}",
                        remedy=f"use one of {', '.join(POLICIES)}", policy=policy)


def canonical(record: Record) -> str:
    """The record's stored text: sorted-key JSON of record_to_dict."""
    return dumps_sorted(record_to_dict(record))


ROW_COLUMNS = ("family", "problem_key", "device", "cc", "template_digest", "config_name", "time_ms",
               "failure_kind", "created", "data")
KEY_COLUMNS = ("family", "problem_key", "device", "template_digest", "config_name", "created")
_KEY_AT = tuple(ROW_COLUMNS.index(c) for c in KEY_COLUMNS)
_row_key = operator.itemgetter(*_KEY_AT)


def record_key(r: Record) -> tuple[str, ...]:
    """The identity of a record (``KEY_COLUMNS``): (family, problem, device, digest, config, created)."""
    m, p = r.measurement, r.provenance
    return (r.family, m.problem_key, p.device, p.template_digest, m.config_name, p.created)


def row_of(record: Record) -> tuple:
    """The record as a SQL row, values in ``ROW_COLUMNS`` order (``data`` is its canonical text)."""
    m, p = record.measurement, record.provenance
    return (record.family, m.problem_key, p.device, p.cc, p.template_digest, m.config_name,
            usable_time(record), m.failure.kind if m.failure else None, p.created, canonical(record))


def row_of_dict(d: dict) -> tuple:
    """``row_of(record_from_dict(d))`` for a validated exchange line ``d``, without the Record."""
    d = normalized_dict(d)
    p, failure = d["provenance"], d["failure"]
    t = d["time_ms"]
    return (d["family"], d["problem_key"], p["device"], p["cc"], p["template_digest"], d["config_name"],
            t if t is not None and math.isfinite(t) else None, failure["kind"] if failure else None,
            p["created"], dumps_sorted(d))


def row_key(row: tuple) -> tuple:
    """The identity (``KEY_COLUMNS``) of a row from ``row_of``: the same tuple as the record's key."""
    return _row_key(row)


def usable_time(record: Record) -> float | None:
    """time_ms of a successful measurement with a finite time, else None."""
    t = record.measurement.time_ms
    return t if t is not None and math.isfinite(t) else None


def is_replayed(record: Record) -> bool:
    """A trial a replay answered from a recording (timing method ``replay``): stored so a tune
    resumes, never a measurement of this machine, so dispatch never uses it."""
    return record.measurement.timing.method == "replay"


def record_order(record: Record, text: str) -> tuple:
    """Sort key of records(): config_name, created, then the rest, then the full text."""
    m, p = record.measurement, record.provenance
    return (m.config_name, p.created, m.problem_key, p.device, p.template_digest, text)


def best_order(record: Record, text: str) -> tuple:
    """Sort key of best() among usable records: time_ms, config_name, created, full text."""
    return (usable_time(record), record.measurement.config_name, record.provenance.created, text)


def matches(record: Record, family: str, problem_key: str | None, device: str | None,
            template_digest: str | None, cc: str | None = None) -> bool:
    m, p = record.measurement, record.provenance
    return (record.family == family
            and (problem_key is None or m.problem_key == problem_key)
            and (device is None or p.device == device)
            and (cc is None or p.cc == cc)
            and (template_digest is None or p.template_digest == template_digest))
