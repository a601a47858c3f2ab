"""A SQLAlchemy Core store: SQLite (WAL) by default, PostgreSQL (psycopg 3) by URL.

The schema version is in the table name (``kgen_records_v1``). Opening a database creates
the table when missing (race-safe), copies the rows of an older table in (``upgrade``), and
refuses a newer one.

>>> db = SqlStore("sqlite://")
>>> db.count()
0
"""

from __future__ import annotations

import functools
import json
import logging
import re
from typing import Iterable

import sqlalchemy as sa

from kgen.db.base import KEY_COLUMNS, ROW_COLUMNS, Database, row_key, row_of, scope
from kgen.db.conflicts import Held, Tally
from kgen.db.sqlite import ChangeProbe, refuse_network_fs, sqlite_events
from kgen.errors import DatabaseError
from kgen.measurement import Record, record_from_dict

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
TABLE = f"kgen_records_v{SCHEMA_VERSION}"
_SCHEMA_LOCK = 0x6B67656E            # PostgreSQL advisory lock held while creating the schema
_SQLITE_REMEDY = "move the file aside (it is created again), or point KGEN_HOME / KGEN_DB_URL elsewhere"
_URL_HELP = "sqlite:///path/to/kgen.db or postgresql+psycopg://user:password@host/database"


def _text(kind=sa.String):
    """A text column that sorts by code point everywhere (PostgreSQL: collation "C")."""
    return kind().with_variant(kind(collation="C"), "postgresql")


_meta = sa.MetaData()
_t = sa.Table(
    TABLE, _meta,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("family", _text(), nullable=False),
    sa.Column("problem_key", _text(), nullable=False),
    sa.Column("device", _text(), nullable=False),
    sa.Column("cc", _text(), nullable=False, server_default=""),
    sa.Column("template_digest", _text(), nullable=False),
    sa.Column("config_name", _text(), nullable=False),
    sa.Column("time_ms", sa.Float, nullable=True),
    sa.Column("failure_kind", _text(), nullable=True),
    sa.Column("created", _text(), nullable=False),
    sa.Column("data", _text(sa.Text), nullable=False),
    # Few indexes keep imports fast: two serve best() by device / by architecture (and
    # records() of a problem), one serves listings by device.
    sa.Index(f"ix_{TABLE}_best", "family", "problem_key", "device", "time_ms", "config_name"),
    sa.Index(f"ix_{TABLE}_best_cc", "family", "problem_key", "cc", "time_ms", "config_name"),
    sa.Index(f"ix_{TABLE}_device", "family", "device", "template_digest"),
)


def _version(table: str) -> int | None:
    m = re.fullmatch(r"kgen_records_v(\d+)", table)
    return int(m.group(1)) if m else None


def _cc_of(data: str) -> str:
    try:
        return str(json.loads(data)["provenance"]["cc"])
    except (ValueError, KeyError, TypeError):
        return ""


def upgrade(conn: sa.Connection, old: str) -> int:
    """Copy every row of the older table ``old`` into the current one; return how many.

    Known: ``kgen_records_v0`` (the v1 columns without ``cc``, which is read from ``data``).
    The old table is left in place for older kgen versions.
    """
    if _version(old) != 0:
        raise DatabaseError(f"no upgrade is known from table {old} to {TABLE}",
                            remedy="export the old records with the kgen that wrote them and import them",
                            table=old)
    src = sa.Table(old, sa.MetaData(), autoload_with=conn)
    cols = [c.name for c in _t.c if c.name not in ("id", "cc") and c.name in src.c]
    n = 0
    for part in conn.execute(sa.select(*(src.c[c] for c in cols)).order_by(src.c.id)).partitions(1000):
        rows = [dict(zip(cols, row), cc=_cc_of(row[cols.index("data")])) for row in part]
        conn.execute(sa.insert(_t), rows)
        n += len(rows)
    log.info("copied %d records from %s into %s", n, old, TABLE)
    return n


_FEW_ROWS = 1000          # a commit of more rows reads the stored keys of its families at once
_KEYS_PER_QUERY = 50      # keys looked up by one query (6 parameters each)


def _texts_of(conn: sa.Connection, keys: list[tuple]) -> dict[tuple, list[str]]:
    """The stored texts (``data``) under each of ``keys`` (``KEY_COLUMNS`` tuples) that has any."""
    c = _t.c
    cols = [c[k] for k in KEY_COLUMNS]
    out: dict[tuple, list[str]] = {}
    for i in range(0, len(keys), _KEYS_PER_QUERY):
        match = sa.or_(*(sa.and_(*(col == v for col, v in zip(cols, key))) for key in keys[i:i + _KEYS_PER_QUERY]))
        for row in conn.execute(sa.select(*cols, c.data).where(match)):
            out.setdefault(tuple(row[:-1]), []).append(row[-1])
    return out


def _rewrite(conn: sa.Connection, upgrades: list[tuple]) -> None:
    """Give each held row of ``upgrades`` ((key, held text, new text, _)) its new text."""
    c = _t.c
    key = sa.and_(*(c[k] == sa.bindparam(f"k_{k}") for k in KEY_COLUMNS), c.data == sa.bindparam("old"))
    conn.execute(sa.update(_t).where(key).values(data=sa.bindparam("new")),
                 [{**{f"k_{k}": v for k, v in zip(KEY_COLUMNS, held_key)}, "old": old, "new": new}
                  for held_key, old, new, _ in upgrades])


def _where(family, problem_key=None, device=None, template_digest=None, cc=None):
    conds = [_t.c.family == family]
    for col, value in (("problem_key", problem_key), ("device", device), ("cc", cc),
                       ("template_digest", template_digest)):
        if value is not None:
            conds.append(_t.c[col] == value)
    return conds


def _make_engine(url: str, engine_kw: dict) -> sa.Engine:
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise DatabaseError(f"{url!r} is not a database URL: {exc}", remedy=f"give a URL like {_URL_HELP}",
                            url=url) from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        refuse_network_fs(parsed.database)
    elif backend == "postgresql":
        engine_kw = {"pool_pre_ping": True, **engine_kw}
    try:
        engine = sa.create_engine(parsed, **engine_kw)
    except (ImportError, sa.exc.NoSuchModuleError) as exc:
        raise DatabaseError(f"no driver for {parsed.render_as_string(hide_password=True)}: {exc}",
                            remedy="for PostgreSQL use postgresql+psycopg://... and pip install 'kgen[pg]'",
                            url=parsed.render_as_string(hide_password=True)) from None
    if backend == "sqlite":
        sqlite_events(engine)
    return engine


class SqlStore(Database):
    """Records in table ``kgen_records_v1`` of the database at a SQLAlchemy URL."""

    def __init__(self, url: str, **engine_kw):
        self.url = str(url)
        self._engine = _make_engine(self.url, engine_kw)
        self._sqlite = self._engine.dialect.name == "sqlite"
        self._shown = self._engine.url.render_as_string(hide_password=True)
        self._open_schema()
        self._best_cache: dict = {}
        self._changes = ChangeProbe(self._engine.url.database) if self._sqlite else None

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
        remedy = _SQLITE_REMEDY if self._sqlite else (
            "check that the server is up and reachable and that the URL's user, password and "
            "database are right (KGEN_DB_URL, KGEN_TEAM_DB_URL or --db)")
        return DatabaseError(f"cannot {what} the tuning database {self._shown}: {exc.orig}",
                             remedy=remedy, url=self._shown)

    def _create(self, conn: sa.Connection) -> None:
        """Create the table (and copy an older one in) unless present; refuse a newer one."""
        if not self._sqlite:
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_SCHEMA_LOCK)))
        names = set(sa.inspect(conn).get_table_names())
        if TABLE in names:
            return
        versions = sorted((v, n) for n in names if (v := _version(n)) is not None)
        if versions and versions[-1][0] > SCHEMA_VERSION:
            raise DatabaseError(
                f"{self._shown} holds table {versions[-1][1]}, a newer schema than this kgen reads "
                f"({TABLE})", remedy="upgrade kgen (pip install -U kgen), or point "
                "KGEN_HOME / KGEN_DB_URL at another database", url=self._shown)
        _meta.create_all(conn)
        if versions:
            upgrade(conn, versions[-1][1])

    def _open_schema(self) -> None:
        try:
            with self._write() as conn, conn.begin():
                self._create(conn)
        except sa.exc.DBAPIError as exc:
            try:
                if not self._sqlite and sa.inspect(self._engine).has_table(TABLE):
                    return      # another process created it first
            except sa.exc.DBAPIError:
                pass
            self._engine.dispose()
            raise self._fail(exc, "open") from None
        except DatabaseError:
            self._engine.dispose()
            raise

    def commit(self, records: Iterable[Record]) -> int:
        rows = [row_of(r) for r in records]
        return self.add_rows(rows).written if rows else 0

    def add_rows(self, rows: list[tuple] | Iterable[list[tuple]]) -> Tally:
        """Store rows (``row_of`` tuples) under the conflict rule (``kgen.db.conflicts``: a row
        identical to a stored one is not stored again, one with other content under a stored
        key is stored beside it), in one transaction; return the tally. ``rows`` may instead be
        an iterable of lists of rows, stored as they come; an exception it raises rolls
        everything back."""
        if isinstance(rows, list):
            if not rows:
                return Tally()
            chunks, by_family = [rows], len(rows) > _FEW_ROWS
        else:
            chunks, by_family = rows, True

        def insert(conn: sa.Connection) -> Tally:
            held = Held(fetch=lambda keys: _texts_of(conn, keys))
            families: set[str] = set()
            for chunk in chunks:
                fresh = {row[0] for row in chunk} - families
                if by_family and fresh:           # every stored key of the chunk's new families, once
                    c = _t.c
                    keys = sa.select(*(c[k] for k in KEY_COLUMNS)).where(c.family.in_(sorted(fresh)))
                    held.hold(tuple(key) for key in conn.execute(keys))
                    families |= fresh
                elif not by_family:               # a few rows: the texts of their keys
                    for key, texts in _texts_of(conn, sorted({row_key(row) for row in chunk})).items():
                        held.texts.setdefault(key, []).extend(texts)
                self._insert(conn, held.admit((row_key(row), row[-1], row) for row in chunk))
                if held.upgrades:                 # held imports a --trust import makes trusted
                    _rewrite(conn, held.upgrades)
                    held.upgrades.clear()
            return held.tally

        return self._in_transaction(insert)

    def _in_transaction(self, write):
        try:
            with self._write() as conn, conn.begin():
                return write(conn)
        except sa.exc.DBAPIError as exc:
            raise self._fail(exc, "write to") from None
        finally:
            self._best_cache.clear()

    def _insert(self, conn: sa.Connection, rows: list[tuple]) -> None:
        """One executemany of the driver: no per-row work by SQLAlchemy."""
        if not rows:
            return
        sql, order = self._insert_statement
        if order is None:
            rows = [dict(zip(ROW_COLUMNS, row)) for row in rows]
        elif order != list(range(len(ROW_COLUMNS))):
            rows = [tuple(row[i] for i in order) for row in rows]
        conn.exec_driver_sql(sql, rows)

    @functools.cached_property
    def _insert_statement(self) -> tuple[str, list[int] | None]:
        """The INSERT of ``ROW_COLUMNS`` in the driver's parameter style, and the row positions
        of its parameters (None: named parameters, rows go as dicts)."""
        compiled = sa.insert(_t).values({c: sa.bindparam(c) for c in ROW_COLUMNS}).compile(dialect=self._engine.dialect)
        if not self._engine.dialect.positional:
            return str(compiled), None
        return str(compiled), [ROW_COLUMNS.index(name) for name in compiled.positiontup]

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
                log.warning("skipping corrupt row id=%s of %s in %s: %s", row_id, TABLE, self._shown, exc)
        return out

    def records(self, family, problem_key=None, device=None, template_digest=None):
        c = _t.c
        stmt = (sa.select(c.id, c.data).where(*_where(family, problem_key, device, template_digest))
                .order_by(c.config_name, c.created, c.problem_key, c.device, c.template_digest, c.data))
        return self._decode(self._query(stmt))

    def _best_stmt(self, family, problem_key, device, template_digest, cc=None):
        c = _t.c
        return (sa.select(c.id, c.data)
                .where(*_where(family, problem_key, device, template_digest, cc), c.time_ms.is_not(None))
                .order_by(c.time_ms, c.config_name, c.created, c.data))

    def best(self, family, problem_key, device, template_digest=None, *, policy="device", cc=None):
        """The fastest record; answered from memory while the database is unchanged (SQLite)."""
        key = (family, problem_key, device, template_digest, policy, cc)
        if self._changes is not None and self._changes.changed():
            self._best_cache.clear()
        try:
            return self._best_cache[key]
        except KeyError:
            pass
        found = self._best_uncached(family, problem_key, device, template_digest, policy, cc)
        if self._changes is not None:
            self._best_cache[key] = found
        return found

    def _best_uncached(self, family, problem_key, device, template_digest, policy, cc):
        device, cc = scope(policy, device, cc)
        stmt = self._best_stmt(family, problem_key, device, template_digest, cc)
        rows = self._query(stmt.limit(1))
        found = self._decode(rows) if rows else []
        if rows and not found:                      # the fastest row was corrupt: rare path
            found = self._decode(self._query(stmt))
        return found[0] if found else None

    def problems(self, family, device=None, template_digest=None, *, policy="device", cc=None):
        device, cc = scope(policy, device, cc)
        c = _t.c
        stmt = (sa.select(c.problem_key).distinct()
                .where(*_where(family, None, device, template_digest, cc), c.time_ms.is_not(None))
                .order_by(c.problem_key))
        return [k for (k,) in self._query(stmt)]

    def families(self):
        return [f for (f,) in self._query(sa.select(_t.c.family).distinct().order_by(_t.c.family))]

    def count(self):
        return int(self._query(sa.select(sa.func.count()).select_from(_t))[0][0])

    def close(self) -> None:
        if self._changes is not None:
            self._changes.close()
        self._engine.dispose()
