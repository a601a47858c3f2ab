"""JSON-lines files of records: the shipped ``tuning_db/`` format (read-only store + writer).

One ``json.dumps(record_to_dict(r), sort_keys=True)`` per line.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "gemm.jsonl"
>>> write_jsonl(path, [])
0
>>> JsonlStore(path).count()
0
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Iterable

from kgen.db.base import Database, canonical
from kgen.db.memory import MemoryStore
from kgen.errors import DatabaseError
from kgen.measurement import Record, record_from_dict


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(p for p in path.rglob("*.jsonl") if p.is_file())
    raise DatabaseError(f"{path} does not exist",
                        remedy="give a folder of .jsonl files or one .jsonl file", path=str(path))


def read_jsonl(path: Path) -> list[Record]:
    """Every record of one file; a bad line raises DatabaseError naming file and line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(record_from_dict(json.loads(line)))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise DatabaseError(f"{path}:{lineno}: not a kgen record ({type(exc).__name__}: {exc})",
                                    remedy="fix or delete that line, or export the file again",
                                    path=str(path), line=lineno) from None
    return out


class JsonlStore(Database):
    """Read-only store over a folder (searched recursively) or one file of ``*.jsonl``."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._mem: MemoryStore | None = None

    def _store(self) -> MemoryStore:
        if self._mem is None:
            mem = MemoryStore()
            for file in _files(self.path):
                mem.commit(read_jsonl(file))
            self._mem = mem
        return self._mem

    def commit(self, records: Iterable[Record]) -> int:
        raise DatabaseError(f"{self.path} is a read-only JSON-lines store",
                            remedy="commit to a SqlStore (kgen.db.open_default())")

    def records(self, family, problem_key=None, device=None, template_digest=None):
        return self._store().records(family, problem_key, device, template_digest)

    def best(self, family, problem_key, device, template_digest=None, *, policy="device", cc=None):
        return self._store().best(family, problem_key, device, template_digest, policy=policy, cc=cc)

    def problems(self, family, device=None, template_digest=None, *, policy="device", cc=None):
        return self._store().problems(family, device, template_digest, policy=policy, cc=cc)

    def families(self):
        return self._store().families()

    def count(self):
        return self._store().count()

    def close(self) -> None:
        self._mem = None


def _write_order(rt: tuple[Record, str]) -> tuple:
    r, text = rt
    m, p = r.measurement, r.provenance
    return (r.family, p.device, m.problem_key, m.config_name, p.created, text)


def write_jsonl(path: str | os.PathLike, records: Iterable[Record]) -> int:
    """Write records sorted (family, device, problem_key, config_name), atomically; return count."""
    return write_texts(path, [(r, canonical(r)) for r in records])


def write_texts(path: str | os.PathLike, rows: list[tuple[Record, str]]) -> int:
    """``write_jsonl`` of records given with their canonical texts."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = sorted(rows, key=_write_order)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.writelines(text + "\n" for _, text in rows)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)   # a shared file: readable like any other
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(rows)
