"""The tuning database: one interface, several stores, layered reads.

>>> from kgen.db import MemoryStore, LayeredStore
>>> LayeredStore(MemoryStore()).best("gemm", "gemm|m=1", "NVIDIA H200") is None
True
"""

from __future__ import annotations

from kgen.db.base import POLICIES, Database
from kgen.db.jsonl import JsonlStore, read_jsonl, write_jsonl
from kgen.db.layered import LayeredStore
from kgen.db.memory import MemoryStore
from kgen.db.sql import SCHEMA_VERSION, SqlStore, upgrade
from kgen.errors import DatabaseError

__all__ = ["Database", "JsonlStore", "LayeredStore", "MemoryStore", "POLICIES", "SCHEMA_VERSION",
           "SqlStore", "open_default", "read_jsonl", "upgrade", "write_jsonl"]


def _shipped() -> list[Database]:
    from kgen.knobs import knobs
    from kgen.render import data_root

    if not knobs.use_shipped_db:
        return []
    shipped = data_root() / "tuning_db"
    return [JsonlStore(shipped)] if shipped.is_dir() and any(shipped.rglob("*.jsonl")) else []


def open_default(write: str | None = None) -> LayeredStore:
    """Reads local (KGEN_DB_URL, else SQLite under KGEN_HOME) -> team (KGEN_TEAM_DB_URL) ->
    shipped records; writes go to ``write``: "local" or "team" (default: "team" when
    KGEN_WRITE_TO_TEAM=1, else "local")."""
    from kgen.knobs import knobs

    write = write or ("team" if knobs.write_to_team else "local")
    if write not in ("local", "team"):
        raise DatabaseError(f"open_default(write={write!r}): expected 'local' or 'team'",
                            remedy="pass write='local' or write='team'")
    if write == "team" and not knobs.team_db_url:
        raise DatabaseError("writing to the team database, but KGEN_TEAM_DB_URL is not set",
                            remedy="set KGEN_TEAM_DB_URL=postgresql+psycopg://user:password@host/db, "
                                   "or unset KGEN_WRITE_TO_TEAM")
    local = SqlStore(knobs.db_url) if knobs.db_url else SqlStore.default()
    layers: list[Database] = [local]
    try:
        if knobs.team_db_url:
            layers.append(SqlStore(knobs.team_db_url))
        layers += _shipped()
    except BaseException:
        for layer in layers:
            layer.close()
        raise
    return LayeredStore(*layers, write=layers[1] if write == "team" else local)
