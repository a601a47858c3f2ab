"""A SQLAlchemy Core store: SQLite (WAL, one writer at a time) by default, any URL otherwise.

>>> db = SqlStore("sqlite://")
>>> db.count()
0
"""

from __future__ import annotations

import json
import logging
import re
from typing import Iterable

import sqlalchemy as sa

from kgen.db.base import Database, canonical, usable_time
from kgen.errors import DatabaseError
from kgen.measurement import Record, record_from_dict

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
TABLE = f"kgen_records_v{SCHEMA_VERSION}"
BUSY_TIMEOUT_S = 30.0
_REMEDY = "move the file aside (it is created again), or point KGEN_HOME / KGEN_DB_URL elsewhere"

_meta = sa.MetaData()
_t = sa.Table(
    TABLE, _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("family", sa.String, nullable=False, index=True),
    sa.Column("problem_key", sa.String, nullable=False, index=True),
    sa.Column("device", sa.String, nullable=False, index=True),
    sa.Column("template_digest", sa.String, nullable=False, index=True),
    sa.Column("config_name", sa.String, nullable=False, index=True),
    sa.Column("time_ms", sa.Float, nullable=True, index=True),
    sa.Column("failure_kind", sa.String, nullable=True, index=True),
    sa.Column("created", sa.String, nullable=False, index=True),
    sa.Column("data", sa.Text, nullable=False),
    sa.Index(f"ix_{TABLE}_best", "family", "problem_key", "device", "time_ms", "config_name"),
)


def _sqlite_events(engine: sa.Engine) -> None:
    """WAL + busy timeout on each connection; BEGIN IMMEDIATE for writes, BEGIN otherwise."""

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None          # the "begin" event below opens transactions
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")  # safe against crashes in WAL mode
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn):
        write = conn.get_execution_options().get("kgen_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _row(r: Record) -> dict:
    m, p = r.measurement, r.provenance
    return {"family": r.family, "problem_key": m.problem_key, "device": p.device,
            "template_digest": p.template_digest, "config_name": m.config_name,
            "time_ms": usable_time(r), "failure_kind": m.failure.kind if m.failure else None,
            "created": p.created, "data": canonical(r)}


def _where(family, problem_key=None, device=None, template_digest=None):
    conds = [_t.c.family == family]
    for col, value in (("problem_key", problem_key), ("device", device),
                       ("template_digest", template_digest)):
        if value is not None:
            conds.append(_t.c[col] == value)
    return conds


class SqlStore(Database):
    """Records in table ``kgen_records_v1`` of the database at a SQLAlchemy URL."""

    def __init__(self, url: str, **engine_kw):
        self.url = str(url)
        self._engine = sa.create_engine(self.url, **engine_kw)
        if self._engine.dialect.name == "sqlite":
            _sqlite_events(self._engine)
        self._open_schema()

    @classmethod
    def default(cls) -> "SqlStore":
        """The SQLite file ``{KGEN_HOME}/kgen.db`` (the folder is created)."""
        from kgen.knobs import knobs

        home = knobs.home
        home.mkdir(parents=True, exist_ok=True)
        return cls(f"sqlite:///{home / 'kgen.db'}")

    def _write(self) -> sa.Connection:
        return self._engine.connect().execution_options(kgen_write=True)

    def _fail(self, exc: sa.exc.DBAPIError, what: str) -> DatabaseError:
        return DatabaseError(f"cannot {what} the tuning database {self.url}: {exc.orig}",
                             remedy=_REMEDY, url=self.url)

    def _open_schema(self) -> None:
        try:
            with self._write() as conn, conn.begin():
                names = set(sa.inspect(conn).get_table_names())
                if TABLE not in names:
                    newer = sorted(n for n in names if (m := re.fullmatch(r"kgen_records_v(\d+)", n))
                                   and int(m.group(1)) > SCHEMA_VERSION)
                    if newer:
                        raise DatabaseError(
                            f"{self.url} holds table {newer[-1]}, a newer schema than this kgen reads "
                            f"({TABLE})", remedy="upgrade kgen (pip install -U kgen), or point "
                            "KGEN_HOME / KGEN_DB_URL at another database", url=self.url)
                    _meta.create_all(conn)
        except sa.exc.DBAPIError as exc:
            if self._engine.dialect.name != "sqlite" and sa.inspect(self._engine).has_table(TABLE):
                return      # another process created it first
            self._engine.dispose()
            raise self._fail(exc, "open") from None
        except DatabaseError:
            self._engine.dispose()
            raise

    def commit(self, records: Iterable[Record]) -> int:
        rows = [_row(r) for r in records]
        if not rows:
            return 0
        try:
            with self._write() as conn, conn.begin():
                conn.execute(sa.insert(_t), rows)
        except sa.exc.DBAPIError as exc:
            raise self._fail(exc, "write to") from None
        return len(rows)

    def _query(self, stmt) -> list:
        try:
            with self._engine.connect() as conn:
                return conn.execute(stmt).all()
        except sa.exc.DBAPIError as exc:
            raise self._fail(exc, "read") from None

    def _decode(self, rows) -> list[Record]:
        out = []
        for row_id, data in rows:
            try:
                out.append(record_from_dict(json.loads(data)))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                log.warning("skipping corrupt row id=%s of %s in %s: %s", row_id, TABLE, self.url, exc)
        return out

    def records(self, family, problem_key=None, device=None, template_digest=None):
        c = _t.c
        stmt = (sa.select(c.id, c.data).where(*_where(family, problem_key, device, template_digest))
                .order_by(c.config_name, c.created, c.problem_key, c.device, c.template_digest, c.data))
        return self._decode(self._query(stmt))

    def _best_stmt(self, family, problem_key, device, template_digest):
        c = _t.c
        return (sa.select(c.id, c.data)
                .where(*_where(family, problem_key, device, template_digest), c.time_ms.is_not(None))
                .order_by(c.time_ms, c.config_name, c.created, c.data))

    def best(self, family, problem_key, device, template_digest=None):
        stmt = self._best_stmt(family, problem_key, device, template_digest)
        rows = self._query(stmt.limit(1))
        found = self._decode(rows) if rows else []
        if rows and not found:                      # the fastest row was corrupt: rare path
            found = self._decode(self._query(stmt))
        return found[0] if found else None

    def problems(self, family, device=None, template_digest=None):
        c = _t.c
        stmt = (sa.select(c.problem_key).distinct()
                .where(*_where(family, None, device, template_digest), c.time_ms.is_not(None))
                .order_by(c.problem_key))
        return [k for (k,) in self._query(stmt)]

    def families(self):
        return [f for (f,) in self._query(sa.select(_t.c.family).distinct().order_by(_t.c.family))]

    def count(self):
        return int(self._query(sa.select(sa.func.count()).select_from(_t))[0][0])

    def close(self) -> None:
        self._engine.dispose()
