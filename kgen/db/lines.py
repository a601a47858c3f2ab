"""Exchange-file lines to validated Records or SQL rows; large files in parallel processes.

Each line is parsed, given its ``origin`` and checked by ``validate_line`` (the schema), then,
with ``check``, its record by ``kgen.db.validity`` (its family's space, a plausible time); a
row's config is then checked once: ``Validator.passed`` vouches for a config of declared choices,
and the schema checks any other before its record (``_checked_rows``). The
first bad line stops the file with a DatabaseError naming it; with ``skip_invalid`` a line
whose record is well-formed but invalid here is left out and reported instead (a line that is
no record still stops the file). Files of ``PARALLEL_MIN_LINES`` lines
or more are split into chunks parsed by worker processes (``KGEN_DB_WORKERS``); a
chunk reports a bad line as data, and the chunks are read back in file order, so the error
names the same line either way. Workers are forked (reading the parent's lines in place)
from a single-threaded process, else spawned; this module does not import SQLAlchemy, so
spawned workers start fast.

>>> list(parse_lines("x.jsonl", [b"\\n", b"[1]\\n"], origin=""))  # doctest: +ELLIPSIS
Traceback (most recent call last):
kgen.errors.DatabaseError: x.jsonl:2: field 'record' must be an object, got array...
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kgen.db.base import row_of_dict
from kgen.db.codec import loads
from kgen.db.schema import check_config, check_line, validate_line
from kgen.errors import DatabaseError

CHUNK_LINES = 2000            # lines per task sent to a worker
CHECK_LINES = 64              # lines parsed before their records are checked (parse_chunk)
PARALLEL_MIN_LINES = 20_000   # smaller files are parsed here: starting workers costs more
log = logging.getLogger(__name__)
REMEDY = "fix or delete that line (or export the file again); nothing was imported"
INVALID_REMEDY = ("leave such records out and import the rest with --skip-invalid (skip_invalid=True), "
                  "which counts them; nothing was imported")
_VALIDATOR = None             # this process's kgen.db.validity.Validator while a file is parsed


def _validator():
    global _VALIDATOR
    if _VALIDATOR is None:            # a spawned worker: its own
        from kgen.db.validity import Validator

        _VALIDATOR = Validator()
    return _VALIDATOR


def _why(exc: Exception, cut: bool) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "the last line is cut short (truncated file)" if cut else "not UTF-8 text (binary data?)"
    if isinstance(exc, json.JSONDecodeError):
        return "the last line is cut short (truncated file)" if cut else f"not JSON ({exc.msg} at column {exc.colno})"
    if isinstance(exc, DatabaseError):
        return exc.message
    if isinstance(exc, OverflowError):
        return "a number too large for a time or a count"
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply for a kgen record"
    return f"not a kgen record ({type(exc).__name__}: {exc})"


def parse_chunk(lines: list[bytes], first: int, total: int, origin: str, as_rows: bool, check: bool = False,
                skip_invalid: bool = False) -> tuple[list[tuple[int, Any]], tuple | None, list[tuple[int, str]]]:
    """``(parsed, error, skipped)`` for lines numbered from ``first`` of a file of ``total``
    lines: ``parsed`` holds ``(number, Record)`` (or ``(number, row_of(record))`` with
    ``as_rows``) up to the first bad line; ``error`` is ``(number, why, invalid)`` of that line
    (``invalid``: a well-formed record ``check`` refused), or None; ``skipped`` the
    ``(number, why)`` of the invalid records ``skip_invalid`` left out.

    With ``check``, every ``CHECK_LINES`` lines are parsed, then their records checked in one
    run (the family's code stays in the CPU's caches from one check to the next, the records
    still in them); the first bad line, malformed or invalid, is the one line by line finds.
    A row's config is then checked by the schema only where ``Validator.passed`` does not
    vouch for it (a config of declared choices is an object of scalars)."""
    if not check:
        out, _, error = _parsed(lines, first, total, origin, as_rows, False)
        return out, error, []
    out: list[tuple[int, Any]] = []
    skipped: list[tuple[int, str]] = []
    for start in range(0, len(lines), CHECK_LINES):
        parsed, fields, error = _parsed(lines[start:start + CHECK_LINES], first + start, total, origin, as_rows, True)
        if as_rows:
            error = _checked_rows(parsed, fields, error, skip_invalid, out, skipped)
        else:
            error = _checked(parsed, error, skip_invalid, out, skipped)
        if error is not None:
            return out, error, skipped
    return out, None, skipped


_LINE_ERRORS = (UnicodeDecodeError, ValueError, DatabaseError, TypeError, KeyError, OverflowError, RecursionError)


def _parsed(lines: list[bytes], first: int, total: int, origin: str, as_rows: bool,
            check: bool) -> tuple[list[tuple[int, Any]], list[tuple], tuple | None]:
    """``(parsed, fields, error)``: ``parse_chunk``'s ``parsed`` and ``error`` without the
    check; with ``check`` and ``as_rows``, ``fields`` holds each parsed record's arguments to
    Validator.why, its line checked by the schema but for what its config holds
    (``_checked_rows`` has that checked)."""
    from kgen.knobs import knobs

    out: list[tuple[int, Any]] = []
    fields: list[tuple] = []
    limit = knobs.db_max_line_bytes
    for number, raw in enumerate(lines, first):
        if len(raw) > limit:
            return out, fields, (number, f"a line of {len(raw)} bytes, over the limit of {limit} "
                                         "(KGEN_DB_MAX_LINE_BYTES)", False)
        if not raw.strip():
            continue
        try:
            obj = loads(raw)
            if origin and isinstance(obj, dict) and isinstance(obj.get("provenance"), dict):
                obj["provenance"]["origin"] = origin
            if as_rows and check:            # the row straight from the line, its config checked later
                try:
                    check_line(obj, config=False)
                    item = row_of_dict(obj)
                except _LINE_ERRORS:         # the schema's whole check says why first, as it did
                    check_line(obj)          # before the row was made
                    raise
                fields.append((item[0], item[1], item[5], obj["config"], item[6], item[2], item[3], item[4],
                               item[7]))
            elif as_rows:
                check_line(obj)
                item = row_of_dict(obj)
            else:
                item = validate_line(obj)
        except _LINE_ERRORS as exc:
            cut = number == total and not raw.endswith(b"\n") and raw.lstrip().startswith(b"{")
            return out, fields, (number, _why(exc, cut), False)
        out.append((number, item))
    return out, fields, None


def _checked(parsed: list[tuple[int, Any]], error: tuple | None, skip_invalid: bool,
             out: list[tuple[int, Any]], skipped: list[tuple[int, str]]) -> tuple | None:
    """Check the ``parsed`` Records in file order, adding the valid ones to ``out`` and those
    ``skip_invalid`` leaves out to ``skipped``; the error that ends the chunk (the first invalid
    record, else ``error``, the one that ended the parse), or None."""
    validator = _validator()
    for number, item in parsed:
        try:
            why = validator.record(item)
        except (ValueError, DatabaseError, TypeError, KeyError, OverflowError, RecursionError) as exc:
            return number, _why(exc, False), False
        if why:
            if not skip_invalid:
                return number, why, True
            skipped.append((number, why))
            continue
        out.append((number, item))
    return error


def _checked_rows(parsed: list[tuple[int, Any]], fields: list[tuple], error: tuple | None, skip_invalid: bool,
                  out: list[tuple[int, Any]], skipped: list[tuple[int, str]]) -> tuple | None:
    """``_checked`` for rows, whose ``fields`` are their arguments to Validator.why, their lines
    checked by the schema but for what their configs hold: the rows ``Validator.passed``
    vouches for go straight to ``out``; each other one has its config checked by the schema
    (a line that fails it is malformed, as it was before its row was made), then its record
    by ``Validator.why``."""
    validator, at, end = _validator(), 0, len(parsed)
    while at < end:
        stop = validator.passed(fields, at)
        out.extend(parsed[at:stop])
        if stop == end:
            break
        number, item = parsed[stop]
        try:
            check_config(fields[stop][3])
            why = validator.why(*fields[stop])
        except _LINE_ERRORS as exc:
            return number, _why(exc, False), False
        if why:
            if not skip_invalid:
                return number, why, True
            skipped.append((number, why))
        else:
            out.append((number, item))
        at = stop + 1
    return error


_FORKED_LINES: list[bytes] = []     # the file's lines, read by forked workers without a copy


def _parse_task(task: tuple) -> tuple[list[tuple[int, Any]], tuple | None, list[tuple[int, str]]]:
    lines, first, total, *options = task
    if lines is None:                 # a forked worker: its chunk of the parent's lines
        lines = _FORKED_LINES[first - 1:first - 1 + CHUNK_LINES]
    return parse_chunk(lines, first, total, *options)


def _chunks(lines: list[bytes], options: tuple, forked: bool = False):
    total = len(lines)
    for start in range(0, total, CHUNK_LINES):
        yield (None if forked else lines[start:start + CHUNK_LINES], start + 1, total, *options)


def _workers(lines: int) -> int:
    from kgen.knobs import knobs

    if lines < PARALLEL_MIN_LINES:
        return 1
    return max(1, min(knobs.db_workers, -(-lines // CHUNK_LINES)))


def _start_method() -> str:
    """fork in a single-threaded process (no start-up, the lines shared); spawn otherwise,
    where a fork could copy a lock another thread holds."""
    import multiprocessing
    import threading

    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return "fork"
    return "spawn"


def parse_lines(path: str, lines: list[bytes], origin: str, as_rows: bool = False, check: bool = False,
                skip_invalid: bool = False, skipped: list | None = None):
    """Every line of the file ``path`` parsed (see ``parse_chunk``), as lists of
    ``(number, item)`` in file order, one per chunk, each yielded as soon as it is parsed (so
    a caller can store one while the workers parse the next); DatabaseError at the first bad
    line. The ``(number, why)`` of records ``skip_invalid`` left out go to ``skipped``."""
    global _VALIDATOR
    options = (origin, as_rows, check, skip_invalid)
    skipped = [] if skipped is None else skipped
    workers = _workers(len(lines))
    method = _start_method() if workers > 1 else "fork"
    if check:
        from kgen.db.validity import Validator
        from kgen.registry import registered_in_process

        _VALIDATOR = Validator()          # this import's: forked workers start with it
        _warm(_VALIDATOR, lines)
        if method == "spawn" and registered_in_process():
            workers = 1                   # a spawned worker would not know the families register() added here
    try:
        if workers == 1:
            yield from _collect(path, map(_parse_task, _chunks(lines, options)), skipped)
            return
        yield from _parallel(path, lines, options, workers, method, skipped)
    finally:
        _VALIDATOR = None


def _warm(validator, lines: list[bytes]) -> None:
    """Load the family of the first record before any worker is forked, so each need not."""
    for raw in lines[:10]:
        try:
            family = loads(raw).get("family")
        except (ValueError, AttributeError, RecursionError, UnicodeDecodeError):
            continue
        if isinstance(family, str):
            validator.spec(family)
            return


def _parallel(path: str, lines: list[bytes], options: tuple, workers: int, method: str, skipped: list):
    global _FORKED_LINES
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    tasks = _chunks(lines, options, forked=method == "fork")
    done = [0]                               # chunks already handed on
    try:
        _FORKED_LINES = lines if method == "fork" else []
        from kgen.lifetime import exit_with_parent

        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method),
                                 initializer=exit_with_parent) as pool:
            try:
                yield from _collect(path, pool.map(_parse_task, tasks), skipped, done)
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    except BrokenProcessPool as exc:      # e.g. a __main__ script without its `if __name__ == "__main__":`
        log.warning("parsing %s in this process: its worker processes failed (%s); "
                    "KGEN_DB_WORKERS=1 skips them", path, exc)
        rest = list(_chunks(lines, options))[done[0]:]
        yield from _collect(path, map(_parse_task, rest), skipped)
    finally:
        _FORKED_LINES = []


def _collect(path: str, results, skipped: list, done: list | None = None):
    """The parsed chunks of ``results``; DatabaseError at the first error; ``done[0]`` counts
    the results handed on."""
    for parsed, error, left_out in results:
        skipped.extend(left_out)
        if parsed:
            yield parsed
        if error is not None:
            number, why, invalid = error
            raise DatabaseError(f"{path}:{number}: {why}", remedy=INVALID_REMEDY if invalid else REMEDY,
                                path=str(path), line=number)
        if done is not None:
            done[0] += 1
