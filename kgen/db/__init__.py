"""The tuning database: one interface, several stores, layered reads.

>>> from kgen.db import MemoryStore, LayeredStore
>>> LayeredStore(MemoryStore()).best("gemm", "gemm|m=1", "NVIDIA H200") is None
True
"""

from __future__ import annotations

from kgen.db.base import Database
from kgen.db.jsonl import JsonlStore, read_jsonl, write_jsonl
from kgen.db.layered import LayeredStore
from kgen.db.memory import MemoryStore
from kgen.db.sqlite import SqlStore

__all__ = ["Database", "JsonlStore", "LayeredStore", "MemoryStore", "SqlStore",
           "open_default", "read_jsonl", "write_jsonl"]


def open_default() -> LayeredStore:
    """The local store (KGEN_DB_URL, else SQLite under KGEN_HOME), then the shipped records."""
    from kgen.knobs import knobs

    local = SqlStore(knobs.db_url) if knobs.db_url else SqlStore.default()
    layers: list[Database] = []
    if knobs.use_shipped_db:
        from kgen.render import data_root

        shipped = data_root() / "tuning_db"
        if shipped.is_dir() and any(shipped.rglob("*.jsonl")):
            layers.append(JsonlStore(shipped))
    return LayeredStore(local, *layers)
