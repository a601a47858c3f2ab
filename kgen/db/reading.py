"""Reading exchange files (JSON lines, gzip, T4) into checked Records or SQL rows.

Every record is checked against the schema (``kgen.db.schema``) and, unless ``check=False``,
against its family (``kgen.db.validity``). The first bad record stops the file with a
DatabaseError naming the file and line (a T4 file: the result); with ``skip_invalid`` a
well-formed record that is invalid here is left out instead, and its ``"file:line: why"``
goes to the list ``skipped``. A line that is no record always stops the file.

>>> sniff([b'{"schema_version": "1.0.0", "results": []}']), sniff([b'{"family": "gemm"}'])
('t4', 'jsonl')
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import gzip
import io
import json
import os
import zlib
from pathlib import Path

from kgen.db.base import row_of
from kgen.db.lines import INVALID_REMEDY, REMEDY, parse_lines
from kgen.errors import DatabaseError
from kgen.measurement import Record

FORMATS = ("auto", "jsonl", "t4")


@contextlib.contextmanager
def gc_paused():
    """Pause the cyclic garbage collector: records hold no cycles, and its passes over a
    large heap of them cost about 40 % of an import."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def with_origin(r: Record, origin: str) -> Record:
    return dataclasses.replace(r, provenance=dataclasses.replace(r.provenance, origin=origin))


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
        return list(enumerate(from_t4(doc, **keys)))
    except (OverflowError, RecursionError) as exc:
        raise DatabaseError(f"{path}: a value out of range ({type(exc).__name__})", remedy=REMEDY,
                            path=str(path)) from None
    except DatabaseError as exc:
        raise DatabaseError(f"{path}: {exc.message}", remedy=exc.remedy or REMEDY, path=str(path)) from None


def _checked_t4(path: Path, numbered: list[tuple[int, Record]], skip_invalid: bool,
                skipped: list) -> list[tuple[int, Record]]:
    """The T4 results that pass ``kgen.db.validity``; a foreign result's config (named
    ``t4_<hash>``, having no name of its own) takes the name its family gives it."""
    from kgen.db.t4 import config_name_of
    from kgen.db.validity import Validator

    validator, out = Validator(), []
    for i, r in numbered:
        m = r.measurement
        if m.timing.method == "t4" and m.config_name == config_name_of(m.config):
            name = validator.name(r)
            if name is not None:
                r = dataclasses.replace(r, measurement=dataclasses.replace(m, config_name=name))
        why = validator.record(r)
        if why is None:
            out.append((i, r))
        elif skip_invalid:
            skipped.append((i, why))
        else:
            raise DatabaseError(f"{path}: results[{i}]: {why}", remedy=INVALID_REMEDY, path=str(path), line=i)
    return out


def read_records(path: str | os.PathLike, fmt: str = "auto", origin: str = "", *, check: bool = True,
                 skip_invalid: bool = False, skipped: list | None = None, **t4_keys) -> list[Record]:
    """Every record of an exchange file, each checked (see the module's text); a record may
    repeat (``kgen.db.conflicts`` decides what is kept).

    ``origin``, when given, replaces each record's ``provenance.origin``. ``t4_keys``
    (family, problem_key, device, template_digest) name what a foreign T4 file does not say
    itself.
    """
    with gc_paused():
        return [r for chunk in read_chunks(Path(path), fmt, origin, t4_keys, False, check, skip_invalid, skipped)
                for r in chunk]


def read_rows(path: str | os.PathLike, fmt: str = "auto", origin: str = "", *, check: bool = True,
              skip_invalid: bool = False, skipped: list | None = None, **t4_keys) -> list[tuple]:
    """As ``read_records``, each record as its SQL row (``kgen.db.base.row_of``)."""
    with gc_paused():
        return [r for chunk in read_chunks(Path(path), fmt, origin, t4_keys, True, check, skip_invalid, skipped)
                for r in chunk]


def read_chunks(path: Path, fmt: str, origin: str, t4_keys: dict, as_rows: bool, check: bool = True,
                skip_invalid: bool = False, skipped: list | None = None):
    """The file's records (or ``row_of`` rows), checked, as lists in file order, each yielded
    once parsed; DatabaseError at the first bad record (a reader that stores chunks as they
    come does so in a transaction it rolls back then). The records ``skip_invalid`` leaves
    out go to ``skipped`` as ``"file:line: why"``."""
    if fmt not in FORMATS:
        raise DatabaseError(f"unknown format {fmt!r}", remedy=f"use one of {', '.join(FORMATS)}")
    lines = _lines(path)
    fmt = sniff(lines) if fmt == "auto" else fmt
    left_out: list[tuple[int, str]] = []
    if fmt == "t4":
        numbered = [(n, with_origin(r, origin) if origin else r) for n, r in _t4(path, lines, **t4_keys)]
        if check:
            numbered = _checked_t4(path, numbered, skip_invalid, left_out)
        chunks = iter([[(n, row_of(r)) for n, r in numbered] if as_rows else numbered])
        where = "{path}: results[{n}]"
    else:
        chunks = parse_lines(str(path), lines, origin, as_rows, check, skip_invalid, left_out)
        where = "{path}:{n}"
    del lines
    found = 0
    for chunk in chunks:
        found += len(chunk)
        if chunk:
            yield [item for _, item in chunk]
    if skipped is not None:
        skipped.extend(f"{where.format(path=path, n=n)}: {why}" for n, why in left_out)
    if not found and not left_out:
        raise DatabaseError(f"{path} holds no records", remedy="export again; the file is empty", path=str(path))
