"""SQLite specifics of the SQL store: WAL, busy timeout, write transactions, and the refusal
of network filesystems (where SQLite's locks are unreliable and a shared file corrupts).

>>> mounts = "srv:/export /home nfs4 rw 0 0\\n/dev/sda1 / ext4 rw 0 0\\n"
>>> network_fs("/home/ana/.kgen/kgen.db", mounts)
'nfs4'
>>> network_fs("/tmp/kgen.db", mounts) is None
True
"""

from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy as sa

from kgen.errors import DatabaseError

BUSY_TIMEOUT_S = 30.0
CACHE_KIB = 65536      # page cache per connection, allocated as used: a large import then spills no pages
NETWORK_FS = frozenset({
    "nfs", "nfs4", "cifs", "smb", "smb2", "smb3", "smbfs", "ncpfs", "9p", "afs", "coda",
    "ceph", "glusterfs", "lustre", "gpfs", "beegfs", "orangefs", "pvfs2", "ocfs2", "gfs2",
    "davfs", "sshfs", "fuse.sshfs", "fuse.glusterfs", "fuse.ceph", "fuse.ceph-fuse", "fuse.s3fs",
    "fuse.gcsfuse", "fuse.rclone", "fuse.davfs2", "fuse.juicefs", "fuse.mfs", "fuse.lizardfs",
})


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_type(path: str | Path, mounts_text: str) -> str | None:
    """Filesystem type of the mount holding absolute ``path``: the longest mount point that
    prefixes it in ``mounts_text`` (the format of /proc/mounts; a later line wins a tie)."""
    path = str(path)
    best, kind = -1, None
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = _unescape(fields[1]).rstrip("/") or "/"
        inside = point == "/" or path == point or path.startswith(point + "/")
        if inside and len(point) >= best:
            best, kind = len(point), fields[2]
    return kind


def network_fs(path: str | Path, mounts_text: str | None = None) -> str | None:
    """The network filesystem type holding ``path`` (resolved), or None when it is local or
    unknown. ``mounts_text`` defaults to /proc/mounts."""
    if mounts_text is None:
        try:
            mounts_text = Path("/proc/mounts").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    kind = mount_type(Path(path).expanduser().resolve(), mounts_text)
    return kind if kind in NETWORK_FS else None


def refuse_network_fs(database: str | None, mounts_text: str | None = None) -> None:
    """Raise DatabaseError when the SQLite file ``database`` would live on a network filesystem."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    kind = network_fs(database, mounts_text)
    if kind is not None:
        raise DatabaseError(
            f"{database} is on a network filesystem ({kind}); SQLite's locking is not reliable there "
            "and concurrent writers can corrupt the file",
            remedy="share a PostgreSQL database instead (KGEN_DB_URL=postgresql+psycopg://user:pass@host/db, "
                   "or KGEN_TEAM_DB_URL for a team store), or set KGEN_HOME to a local folder",
            path=database, fs=kind)


def sqlite_events(engine: sa.Engine) -> None:
    """WAL + busy timeout on each connection; BEGIN IMMEDIATE for writes, BEGIN otherwise."""

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record):
        dbapi_conn.isolation_level = None          # the "begin" event below opens transactions
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")  # safe against crashes in WAL mode
        cur.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        cur.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn):
        write = conn.get_execution_options().get("kgen_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


class ChangeProbe:
    """Tells cheaply whether any connection committed to a SQLite file since the last ask.

    ``PRAGMA data_version`` on a connection of its own changes whenever another connection
    commits. An in-memory database has no other writers: it never reports a change (its
    store clears its caches on its own commits).
    """

    def __init__(self, database: str | None):
        import sqlite3
        import threading

        self._lock = threading.Lock()
        self._conn = None
        if database and database != ":memory:":
            self._conn = sqlite3.connect(database, check_same_thread=False, isolation_level=None)
        self._version = self._read()

    def _read(self):
        if self._conn is None:
            return 0
        with self._lock:
            return self._conn.execute("PRAGMA data_version").fetchone()[0]

    def changed(self) -> bool:
        version = self._read()
        if version == self._version:
            return False
        self._version = version
        return True

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
