"""Sharing tuning records: checked import, export, merge, prune and stats.

The exchange format is JSON lines, one ``record_to_dict`` per line (sorted keys), in the
order ``write_jsonl`` writes; gzip is read too, and T4 results documents. Files are data
only: every record is checked against the schema and against its family (``kgen.db.validity``:
a valid config of its space, a plausible time) before anything is stored, and a file with
any bad record imports nothing; ``skip_invalid`` (``--skip-invalid``) leaves out, and counts,
well-formed records that are invalid here instead. Records that share a key follow one rule
(``kgen.db.conflicts``) in import, merge and commit alike. ``provenance.origin`` is local:
export leaves it out, import sets ``import:<file name>``, or ``trusted:<file name>`` with
``trust`` (``--trust``); dispatch uses imported records only once ``kgen db verify`` confirmed
them, or when trusted (``kgen.db.trust``).

>>> import tempfile, pathlib
>>> from kgen.db import MemoryStore
>>> path = pathlib.Path(tempfile.mkdtemp()) / "none.jsonl"
>>> export(MemoryStore(), path)
0
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from kgen.db.base import Database, canonical, record_key, row_of
from kgen.db.conflicts import Held, Tally
from kgen.db.jsonl import write_texts
from kgen.db.lines import INVALID_REMEDY
from kgen.db.reading import (FORMATS, gc_paused, read_chunks, read_records, read_rows, sniff,  # noqa: F401
                             with_origin)
from kgen.db.trust import import_origin
from kgen.errors import DatabaseError
from kgen.measurement import Record

EXAMPLES = 3                    # invalid records a summary names


# ---------------------------------------------------------------- import


@dataclass(frozen=True)
class ImportReport:
    path: str
    read: int                    # records in the file (or given)
    imported: int                # records stored, conflicts included
    skipped: int                 # identical to a record already held: stored once (kgen.db.conflicts)
    conflicts: int = 0           # stored beside a record of the same key with other content
    invalid: int = 0             # invalid here, left out by skip_invalid
    examples: tuple[str, ...] = ()   # the first of those, "file:line: why"
    trusted: bool = False        # imported with trust: dispatch uses them without a verdict
    now_trusted: int = 0         # of the skipped, imports held without trust that trust made trusted

    def summary(self) -> str:
        """The one line ``kgen db import`` prints."""
        parts = [f"{self.skipped} already stored" + (f", {self.now_trusted} of them now trusted"
                                                     if self.now_trusted else "")]
        if self.conflicts:
            parts.append(f"{self.conflicts} conflicting records kept")
        if self.invalid:
            parts.append(f"{self.invalid} invalid records left out")
        use = ("trusted: dispatch uses them now" if self.trusted else
               "dispatch uses them once `kgen db verify` confirms them on this GPU (or import with --trust)")
        line = f"imported {self.imported} records from {self.path} ({', '.join(parts)}); {use}"
        return line + "".join(f"\n  left out: {e}" for e in self.examples)


class _Counted:
    """Passes chunks on, counting their items."""

    def __init__(self, chunks):
        self.chunks, self.items = chunks, 0

    def __iter__(self):
        for chunk in self.chunks:
            self.items += len(chunk)
            yield chunk


def _held_texts(db: Database, families: set[str]) -> dict[tuple, list[str]]:
    """The texts of every record of ``families`` held by ``db`` (all its layers), by key."""
    from kgen.db.layered import LayeredStore

    layers = db.layers if isinstance(db, LayeredStore) else (db,)
    texts: dict[tuple, list[str]] = {}
    for layer in layers:
        for family in sorted(families):
            for r in layer.records(family):
                texts.setdefault(record_key(r), []).append(canonical(r))
    return texts


def _store(records: list[Record], db: Database) -> Tally:
    """Store records under the conflict rule; the tally of what was kept."""
    from kgen.db.sql import SqlStore

    if isinstance(db, SqlStore):
        return db.add_rows([row_of(r) for r in records])
    held = Held(_held_texts(db, {r.family for r in records}))
    kept = held.admit((record_key(r), text, r) for r in records for text in (canonical(r),))
    db.commit(kept + [r for *_, r in held.upgrades])      # the store's own rule rewrites held imports
    return held.tally


def _report(path: str, read: int, tally: Tally, skipped: list[str], trust: bool) -> ImportReport:
    return ImportReport(path, read, tally.written, tally.duplicates, tally.conflicts, len(skipped),
                        tuple(skipped[:EXAMPLES]), trust, tally.trusted)


def import_file(path: str | os.PathLike, db: Database, fmt: str = "auto", *, skip_invalid: bool = False,
                trust: bool = False, **t4_keys) -> ImportReport:
    """Check every record of ``path``, then store them in one transaction, or nothing.

    A record that is invalid here (``kgen.db.validity``) stops the import with its file and
    line, or with ``skip_invalid`` is left out and counted. Records that share a key with a
    held one follow ``kgen.db.conflicts`` (importing a file twice stores nothing the second
    time). Each record's origin becomes ``import:<file name>`` (``trusted:<file name>`` with
    ``trust``). A SQL store gets rows built (in parallel for large files) and inserted chunk
    by chunk, while the next chunks are parsed, in one transaction that a bad line rolls back.
    """
    from kgen.db.sql import SqlStore

    origin = import_origin(Path(path).name, trust)
    skipped: list[str] = []
    with gc_paused():
        if isinstance(db, SqlStore):
            counted = _Counted(read_chunks(Path(path), fmt, origin, t4_keys, True, True, skip_invalid, skipped))
            tally = db.add_rows(counted)
            return _report(str(path), counted.items + len(skipped), tally, skipped, trust)
        records = read_records(path, fmt, origin, skip_invalid=skip_invalid, skipped=skipped, **t4_keys)
        return _report(str(path), len(records) + len(skipped), _store(records, db), skipped, trust)


def import_records(records: Iterable[Record], db: Database, source: str = "python", *,
                   skip_invalid: bool = False, trust: bool = False) -> ImportReport:
    """``import_file`` for records in memory (read from elsewhere, built by a script): each is
    checked against its family (``kgen.db.validity``), given the origin ``import:<source>``
    (``trusted:<source>`` with ``trust``) and stored under ``kgen.db.conflicts``, all in one
    transaction, or none.

    >>> from kgen.db import MemoryStore
    >>> import_records([], MemoryStore()).imported
    0
    """
    from kgen.db.validity import Validator

    validator, origin = Validator(), import_origin(source, trust)
    kept: list[Record] = []
    skipped: list[str] = []
    records = list(records)
    for i, r in enumerate(records):
        why = validator.record(r)
        if why is None:
            kept.append(with_origin(r, origin))
        elif skip_invalid:
            skipped.append(f"{source}[{i}]: {why}")
        else:
            raise DatabaseError(f"{source}[{i}]: {why}", remedy=INVALID_REMEDY, index=i)
    with gc_paused():
        return _report(source, len(records), _store(kept, db), skipped, trust)


# ---------------------------------------------------------------- export and merge


def unique(records: Iterable[Record]) -> tuple[list[tuple[Record, str]], Tally]:
    """Records without origin, with their texts, under the conflict rule: identical ones once,
    conflicting ones all; and the tally."""
    held = Held()
    batch = []
    for r in records:
        r = with_origin(r, "") if r.provenance.origin else r
        text = canonical(r)
        batch.append((record_key(r), text, (r, text)))
    return held.admit(batch), held.tally


def collect(db: Database, device: str | None = None, family: str | None = None) -> list[Record]:
    """Every record of the store (one family and/or device, if given)."""
    with gc_paused():
        return [r for f in ([family] if family else db.families()) for r in db.records(f, device=device)]


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_records(path: str | os.PathLike, records: Iterable[Record], fmt: str = "jsonl") -> int:
    """Write records as JSON lines (``write_jsonl``) or one T4 results document; return count."""
    with gc_paused():
        return _write_records(Path(path), records, fmt)


def _write_records(path: Path, records: Iterable[Record], fmt: str) -> int:
    rows, _ = unique(records)
    if fmt == "jsonl":
        return write_texts(path, rows)
    if fmt == "t4":
        from kgen.db.t4 import to_t4

        rows.sort(key=lambda rt: (rt[0].family, rt[0].provenance.device, rt[0].measurement.problem_key,
                                  rt[0].measurement.config_name, rt[0].provenance.created, rt[1]))
        _write_text(path, json.dumps(to_t4([r for r, _ in rows]), sort_keys=True) + "\n")
        return len(rows)
    raise DatabaseError(f"unknown export format {fmt!r}", remedy="use jsonl or t4")


def export(db: Database, path: str | os.PathLike, device: str | None = None, family: str | None = None,
           fmt: str = "jsonl") -> int:
    """Write the store's records (origin left out; identical ones once) to ``path``; return count."""
    return write_records(path, collect(db, device, family), fmt)


@dataclass(frozen=True)
class MergeReport:
    read: int                    # records in all inputs (invalid ones included)
    written: int
    conflicts: int               # kept beside a record of the same key with other content
    duplicates: int = 0          # identical to a record kept: written once
    invalid: int = 0             # invalid here, left out by skip_invalid
    examples: tuple[str, ...] = ()

    def summary(self, inputs: int, output: str) -> str:
        """The one line ``kgen db merge`` prints."""
        parts = [f"{self.duplicates} identical"]
        if self.conflicts:
            parts.append(f"{self.conflicts} conflicting records kept")
        if self.invalid:
            parts.append(f"{self.invalid} invalid records left out")
        line = f"merged {self.read} records from {inputs} files into {self.written} in {output} ({', '.join(parts)})"
        return line + "".join(f"\n  left out: {e}" for e in self.examples)


def merge(inputs: Iterable[str | os.PathLike], output: str | os.PathLike, *, skip_invalid: bool = False) -> MergeReport:
    """Union of exchange files under ``kgen.db.conflicts`` (identical records once, conflicting
    ones all, origins left out), each record checked as an import checks it: deterministic,
    idempotent, order-independent."""
    skipped: list[str] = []
    with gc_paused():
        records = [r for path in inputs for r in read_records(path, skip_invalid=skip_invalid, skipped=skipped)]
        rows, tally = unique(records)
        return MergeReport(len(records) + len(skipped), write_texts(output, rows), tally.conflicts,
                           tally.duplicates, len(skipped), tuple(skipped[:EXAMPLES]))


# ---------------------------------------------------------------- maintenance


def prune(db: Database, keep: int) -> int:
    """Keep the ``keep`` fastest successful records per (family, problem, device, digest);
    delete the rest, failures included. SQL stores only; returns how many were deleted."""
    import sqlalchemy as sa

    from kgen.db.sql import SqlStore, _t

    if not isinstance(db, SqlStore):
        raise DatabaseError(f"prune works on a SQL store, not {type(db).__name__}",
                            remedy="export, filter and write a new file instead")
    if keep < 1:
        raise DatabaseError(f"--keep must be >= 1 (got {keep})", remedy="give how many records to keep")
    c = _t.c
    rank = sa.func.row_number().over(partition_by=[c.family, c.problem_key, c.device, c.template_digest],
                                     order_by=[c.time_ms, c.config_name, c.created, c.data]).label("rank")
    ranked = sa.select(c.id, rank).where(c.time_ms.is_not(None)).subquery()
    kept = sa.select(ranked.c.id).where(ranked.c.rank <= keep)
    try:
        with db._engine.connect().execution_options(kgen_write=True) as conn, conn.begin():
            deleted = conn.execute(sa.delete(_t).where(c.id.not_in(kept))).rowcount
        if db._engine.dialect.name == "sqlite" and deleted:
            raw = db._engine.raw_connection()
            try:
                raw.execute("VACUUM")
                raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                raw.close()
    except sa.exc.DBAPIError as exc:
        raise db._fail(exc, "prune") from None
    return int(deleted)


def _sql_stats(db) -> dict[str, Any]:
    import sqlalchemy as sa

    from kgen.db.sql import _t

    c = _t.c
    one = lambda stmt: [tuple(row) for row in db._query(stmt)]   # noqa: E731
    like = lambda kind: sa.func.sum(sa.case((c.data.like(f'%"origin": "{kind}:%'), 1), else_=0))  # noqa: E731
    n, imported, trusted, verified = one(sa.select(sa.func.count(), like("import"), like("trusted"),
                                                   like("verify")).select_from(_t))[0]
    problems = one(sa.select(sa.func.count()).select_from(sa.select(c.family, c.problem_key).distinct().subquery()))
    local = n - (imported or 0) - (trusted or 0) - (verified or 0)
    origins = {"import": imported or 0, "local": local, "trusted": trusted or 0, "verify": verified or 0}
    return {"records": n, "problems": problems[0][0],
            "devices": [d for (d,) in one(sa.select(c.device).distinct().order_by(c.device))],
            "families": [f for (f,) in one(sa.select(c.family).distinct().order_by(c.family))],
            "failures": dict(one(sa.select(c.failure_kind, sa.func.count()).where(c.failure_kind.is_not(None))
                                 .group_by(c.failure_kind).order_by(c.failure_kind))),
            "origins": {k: v for k, v in origins.items() if v}}


def _origin_kind(origin: str) -> str:
    kind = origin.split(":")[0]
    return kind if kind in ("import", "trusted", "verify") else "local"


def stats(db: Database) -> dict[str, Any]:
    """Records, problems, devices, families, failures by kind, origins (import, trusted,
    verify; the rest local), and the file's size."""
    from collections import Counter

    from kgen.db.sql import SqlStore

    if isinstance(db, SqlStore):
        out = _sql_stats(db)
    else:
        records = collect(db)
        kinds = Counter(r.measurement.failure.kind for r in records if r.measurement.failure)
        origins = Counter(_origin_kind(r.provenance.origin) for r in records)
        out = {"records": len(records),
               "problems": len({(r.family, r.measurement.problem_key) for r in records}),
               "devices": sorted({r.provenance.device for r in records}),
               "families": sorted({r.family for r in records}),
               "failures": dict(sorted(kinds.items())), "origins": dict(sorted(origins.items()))}
    url, size = getattr(db, "url", ""), None
    file = Path(url[len("sqlite:///"):]) if url.startswith("sqlite:///") else None
    if file is not None and file.is_file():
        size = sum(p.stat().st_size for p in (file, Path(f"{file}-wal")) if p.is_file())
    return {**out, "file_bytes": size}
