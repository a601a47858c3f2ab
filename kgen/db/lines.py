"""Exchange-file lines to validated Records or SQL rows; large files in parallel processes.

Each line is parsed, given its ``origin`` and checked by ``validate_line``. The first bad
line stops the file with a DatabaseError naming it. Files of ``PARALLEL_MIN_LINES`` lines
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
from kgen.db.schema import check_line, validate_line
from kgen.errors import DatabaseError

CHUNK_LINES = 2000            # lines per task sent to a worker
PARALLEL_MIN_LINES = 20_000   # smaller files are parsed here: starting workers costs more
log = logging.getLogger(__name__)
REMEDY = "fix or delete that line (or export the file again); nothing was imported"


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


def parse_chunk(lines: list[bytes], first: int, total: int, origin: str,
                as_rows: bool) -> tuple[list[tuple[int, Any]], tuple[int, str] | None]:
    """``(parsed, error)`` for lines numbered from ``first`` of a file of ``total`` lines:
    ``parsed`` holds ``(number, Record)`` (or ``(number, row_of(record))`` with ``as_rows``)
    up to the first bad line; ``error`` is ``(number, why)`` of that line, or None."""
    from kgen.knobs import knobs

    out: list[tuple[int, Any]] = []
    limit = knobs.db_max_line_bytes
    for number, raw in enumerate(lines, first):
        if len(raw) > limit:
            return out, (number, f"a line of {len(raw)} bytes, over the limit of {limit} (KGEN_DB_MAX_LINE_BYTES)")
        if not raw.strip():
            continue
        try:
            obj = loads(raw)
            if origin and isinstance(obj, dict) and isinstance(obj.get("provenance"), dict):
                obj["provenance"]["origin"] = origin
            if as_rows:                      # the row straight from the checked line
                check_line(obj)
                out.append((number, row_of_dict(obj)))
            else:
                out.append((number, validate_line(obj)))
        except (UnicodeDecodeError, ValueError, DatabaseError, TypeError, KeyError, OverflowError,
                RecursionError) as exc:
            cut = number == total and not raw.endswith(b"\n") and raw.lstrip().startswith(b"{")
            return out, (number, _why(exc, cut))
    return out, None


_FORKED_LINES: list[bytes] = []     # the file's lines, read by forked workers without a copy


def _parse_task(task: tuple) -> tuple[list[tuple[int, Any]], tuple[int, str] | None]:
    lines, first, total, origin, as_rows = task
    if lines is None:                 # a forked worker: its chunk of the parent's lines
        lines = _FORKED_LINES[first - 1:first - 1 + CHUNK_LINES]
    return parse_chunk(lines, first, total, origin, as_rows)


def _chunks(lines: list[bytes], origin: str, as_rows: bool, forked: bool = False):
    total = len(lines)
    for start in range(0, total, CHUNK_LINES):
        yield None if forked else lines[start:start + CHUNK_LINES], start + 1, total, origin, as_rows


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


def parse_lines(path: str, lines: list[bytes], origin: str, as_rows: bool = False):
    """Every line of the file ``path`` parsed (see ``parse_chunk``), as lists of
    ``(number, item)`` in file order, one per chunk, each yielded as soon as it is parsed (so
    a caller can store one while the workers parse the next); DatabaseError at the first bad
    line."""
    global _FORKED_LINES
    workers = _workers(len(lines))
    if workers == 1:
        yield from _collect(path, map(_parse_task, _chunks(lines, origin, as_rows)))
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    method = _start_method()
    tasks = _chunks(lines, origin, as_rows, forked=method == "fork")
    done = 0                                 # chunks already handed on
    try:
        _FORKED_LINES = lines if method == "fork" else []
        from kgen.lifetime import exit_with_parent

        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method),
                                 initializer=exit_with_parent) as pool:
            try:
                for chunk in _collect(path, pool.map(_parse_task, tasks)):
                    done += 1
                    yield chunk
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    except BrokenProcessPool as exc:      # e.g. a __main__ script without its `if __name__ == "__main__":`
        log.warning("parsing %s in this process: its worker processes failed (%s); "
                    "KGEN_DB_WORKERS=1 skips them", path, exc)
        rest = list(_chunks(lines, origin, as_rows))[done:]
        yield from _collect(path, map(_parse_task, rest))
    finally:
        _FORKED_LINES = []


def _collect(path: str, results):
    for parsed, error in results:
        if parsed:
            yield parsed
        if error is not None:
            number, why = error
            raise DatabaseError(f"{path}:{number}: {why}", remedy=REMEDY, path=str(path), line=number)
