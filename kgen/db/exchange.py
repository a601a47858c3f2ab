"""Sharing tuning records: validated import, export, merge, prune and stats.

The exchange format is JSON lines, one ``record_to_dict`` per line (sorted keys), in the
order ``write_jsonl`` writes; gzip is read too. Files are data only: every line is checked
against the schema before anything is stored, and a file with any bad line imports nothing.
``provenance.origin`` is local: export leaves it out, import sets ``import:<file name>``, or
``trusted:<file name>`` with ``trust`` (``--trust``); dispatch uses imported records only once
``kgen db verify`` confirmed them, or when trusted (``kgen.db.trust``).

>>> import tempfile, pathlib
>>> from kgen.db import MemoryStore
>>> path = pathlib.Path(tempfile.mkdtemp()) / "none.jsonl"
>>> export(MemoryStore(), path)
0
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import gzip
import io
import json
import os
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from kgen.db.base import KEY_COLUMNS, Database, canonical, row_key, row_of
from kgen.db.jsonl import write_jsonl
from kgen.db.lines import REMEDY, parse_lines
from kgen.db.trust import import_origin
from kgen.errors import DatabaseError
from kgen.measurement import Record

FORMATS = ("auto", "jsonl", "t4")

# ---------------------------------------------------------------- reading files


@contextlib.contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector: records hold no cycles, and its passes over a
    large heap of them cost about 40 % of an import."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def record_key(r: Record) -> tuple[str, ...]:
    """The identity of a record in exchange files: (family, problem, device, digest, config, created)."""
    m, p = r.measurement, r.provenance
    return (r.family, m.problem_key, p.device, p.template_digest, m.config_name, p.created)


def _lines(path: Path) -> list[bytes]:
    """The file's lines as bytes (gzip by its magic number); truncated gzip names the line."""
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        if not gz:
            return io.BytesIO(Path(path).read_bytes()).readlines()     # lines end at "\n" only
        lines: list[bytes] = []
        try:
            with gzip.open(path, "rb") as f:
                lines.extend(f)
        except (EOFError, OSError, zlib.error) as exc:
            raise DatabaseError(f"{path}:{len(lines) + 1}: compressed data is cut short or corrupt ({exc})",
                                remedy="copy or download the file again; nothing was imported",
                                path=str(path), line=len(lines) + 1) from None
        return lines
    except OSError as exc:
        raise DatabaseError(f"cannot read {path}: {exc.strerror or exc}",
                            remedy="give the path of a file written by `kgen db export`", path=str(path)) from None


def sniff(lines: list[bytes]) -> str:
    """"t4" when the content is one JSON object with ``results``, else "jsonl"."""
    first = next((line for line in lines if line.strip()), b"")
    try:
        obj = json.loads(first)
    except (ValueError, RecursionError):
        obj = None
    if isinstance(obj, dict):
        return "t4" if "results" in obj or "schema_version" in obj else "jsonl"
    try:
        whole = json.loads(b"".join(lines))
    except (ValueError, RecursionError):        # the line reader names what is wrong
        return "jsonl"
    return "t4" if isinstance(whole, dict) and "results" in whole else "jsonl"


def _t4(path: Path, lines: list[bytes], **keys) -> list[tuple[int, Record]]:
    from kgen.db.t4 import from_t4

    try:
        doc = json.loads(b"".join(lines).decode("utf-8"))
    except UnicodeDecodeError:
        raise DatabaseError(f"{path}: not UTF-8 text (binary data?)", remedy=REMEDY, path=str(path)) from None
    except json.JSONDecodeError as exc:
        raise DatabaseError(f"{path}:{exc.lineno}: not JSON ({exc.msg})", remedy=REMEDY,
                            path=str(path), line=exc.lineno) from None
    except RecursionError:
        raise DatabaseError(f"{path}: JSON nested too deeply for a T4 file", remedy=REMEDY, path=str(path)) from None
    try:
        return list(enumerate(from_t4(doc, **keys), 1))
    except (OverflowError, RecursionError) as exc:
        raise DatabaseError(f"{path}: a value out of range ({type(exc).__name__})", remedy=REMEDY,
                            path=str(path)) from None
    except DatabaseError as exc:
        raise DatabaseError(f"{path}: {exc.message}", remedy=exc.remedy or REMEDY, path=str(path)) from None


def read_records(path: str | os.PathLike, fmt: str = "auto", origin: str = "", **t4_keys) -> list[Record]:
    """Every record of an exchange file, all validated; duplicate keys are an error.

    ``origin``, when given, replaces each record's ``provenance.origin``.

    ``t4_keys`` (family, problem_key, device, template_digest) name what a foreign T4
    file does not say itself.
    """
    with _gc_paused():
        return [r for chunk in read_chunks(Path(path), fmt, origin, t4_keys, as_rows=False) for r in chunk]


def read_rows(path: str | os.PathLike, fmt: str = "auto", origin: str = "", **t4_keys) -> list[tuple]:
    """As ``read_records``, each record as its SQL row (``kgen.db.base.row_of``)."""
    with _gc_paused():
        return [r for chunk in read_chunks(Path(path), fmt, origin, t4_keys, as_rows=True) for r in chunk]


def read_chunks(path: Path, fmt: str, origin: str, t4_keys: dict, as_rows: bool):
    """The file's records (or ``row_of`` rows), validated, each key once, as lists in file
    order, each yielded once parsed; DatabaseError at the first bad or duplicate line (a
    reader that stores chunks as they come does so in a transaction it rolls back then)."""
    if fmt not in FORMATS:
        raise DatabaseError(f"unknown format {fmt!r}", remedy=f"use one of {', '.join(FORMATS)}")
    lines = _lines(path)
    fmt = sniff(lines) if fmt == "auto" else fmt
    if fmt == "t4":
        numbered = [(n, with_origin(r, origin) if origin else r) for n, r in _t4(path, lines, **t4_keys)]
        chunks = iter([[(n, row_of(r)) for n, r in numbered] if as_rows else numbered])
    else:
        chunks = parse_lines(str(path), lines, origin, as_rows)
    del lines
    seen: dict[tuple, int] = {}
    what = "line" if fmt == "jsonl" else "result"
    key = row_key if as_rows else record_key
    for chunk in chunks:
        for number, item in chunk:
            first = seen.setdefault(key(item), number)
            if first != number:
                raise DatabaseError(f"{path}:{number}: duplicate of {what} {first} (same {', '.join(KEY_COLUMNS)})",
                                    remedy="merge files with `kgen db merge`, which removes duplicates; "
                                           "nothing was imported", path=str(path), line=number)
        if chunk:
            yield [item for _, item in chunk]
    if not seen:
        raise DatabaseError(f"{path} holds no records", remedy="export again; the file is empty", path=str(path))


# ---------------------------------------------------------------- import


@dataclass(frozen=True)
class ImportReport:
    path: str
    read: int          # records in the file
    imported: int      # new records stored
    skipped: int       # already in the database (same key)
    trusted: bool = False   # imported with trust: dispatch uses them without a verdict


class _Counted:
    """Passes chunks on, counting their items."""

    def __init__(self, chunks):
        self.chunks, self.items = chunks, 0

    def __iter__(self):
        for chunk in self.chunks:
            self.items += len(chunk)
            yield chunk


def with_origin(r: Record, origin: str) -> Record:
    return dataclasses.replace(r, provenance=dataclasses.replace(r.provenance, origin=origin))


def _stored_keys(db: Database, families: set[str]) -> set[tuple]:
    from kgen.db.layered import LayeredStore

    if isinstance(db, LayeredStore):
        return set().union(*(_stored_keys(layer, families) for layer in db.layers))
    return {record_key(r) for f in families for r in db.records(f)}


def import_file(path: str | os.PathLike, db: Database, fmt: str = "auto", *, trust: bool = False,
                **t4_keys) -> ImportReport:
    """Validate every record of ``path``, then store the new ones in one transaction.

    Records whose key is already stored are skipped, so importing a file twice is harmless.
    Each record's origin becomes ``import:<file name>`` (``trusted:<file name>`` with ``trust``).
    A SQL store gets rows built (in parallel for large files) and inserted chunk by chunk,
    while the next chunks are parsed, in one transaction that a bad line rolls back.
    """
    from kgen.db.sql import SqlStore

    origin = import_origin(Path(path).name, trust)
    with _gc_paused():
        if isinstance(db, SqlStore):
            counted = _Counted(read_chunks(Path(path), fmt, origin, t4_keys, as_rows=True))
            imported = db.insert_new(counted)
            return ImportReport(str(path), counted.items, imported, counted.items - imported, trust)
        records = read_records(path, fmt, origin, **t4_keys)
        stored = _stored_keys(db, {r.family for r in records})
        new = [r for r in records if record_key(r) not in stored]
        db.commit(new)
    return ImportReport(str(path), len(records), len(new), len(records) - len(new), trust)


# ---------------------------------------------------------------- export and merge


def unique(records: Iterable[Record]) -> tuple[list[Record], int]:
    """Records without origin, one per key (of two different ones, the smaller text); and how
    many differed from the one kept."""
    kept: dict[tuple, Record] = {}
    conflicts = 0
    for r in records:
        r = with_origin(r, "") if r.provenance.origin else r
        old = kept.setdefault(record_key(r), r)
        if old is not r:                                # rare: texts only for a repeated key
            new_text, old_text = canonical(r), canonical(old)
            conflicts += new_text != old_text
            if new_text < old_text:
                kept[record_key(r)] = r
    return list(kept.values()), conflicts


def collect(db: Database, device: str | None = None, family: str | None = None) -> list[Record]:
    """Every record of the store (one family and/or device, if given)."""
    with _gc_paused():
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
    with _gc_paused():
        return _write_records(Path(path), records, fmt)


def _write_records(path: Path, records: Iterable[Record], fmt: str) -> int:
    rows, _ = unique(records)
    if fmt == "jsonl":
        return write_jsonl(path, rows)
    if fmt == "t4":
        from kgen.db.t4 import to_t4

        rows.sort(key=lambda r: (r.family, r.provenance.device, r.measurement.problem_key,
                                 r.measurement.config_name, r.provenance.created, canonical(r)))
        _write_text(path, json.dumps(to_t4(rows), sort_keys=True) + "\n")
        return len(rows)
    raise DatabaseError(f"unknown export format {fmt!r}", remedy="use jsonl or t4")


def export(db: Database, path: str | os.PathLike, device: str | None = None, family: str | None = None,
           fmt: str = "jsonl") -> int:
    """Write the store's records (one per key, origin left out) to ``path``; return count."""
    return write_records(path, collect(db, device, family), fmt)


@dataclass(frozen=True)
class MergeReport:
    read: int          # records in all inputs
    written: int
    conflicts: int     # same key, different content: the smaller text was kept


def merge(inputs: Iterable[str | os.PathLike], output: str | os.PathLike) -> MergeReport:
    """Union of exchange files, one record per key: deterministic, idempotent, order-independent."""
    with _gc_paused():
        records = [r for path in inputs for r in read_records(path)]
        rows, conflicts = unique(records)
        return MergeReport(len(records), write_jsonl(output, rows), conflicts)


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
