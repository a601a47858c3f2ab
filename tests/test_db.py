"""The tuning database: one conformance suite over every store (PostgreSQL when
KGEN_TEST_PG_URL is set), record-use policies, layered reads, SQLite robustness."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import sqlite3
import uuid

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings, strategies as st

from kgen.db import (Database, JsonlStore, LayeredStore, MemoryStore, SqlStore, open_default,
                     upgrade, write_jsonl)
from kgen.db.base import canonical
from kgen.db.base import ROW_COLUMNS, row_of
from kgen.db.sqlite import mount_type, network_fs, refuse_network_fs
from kgen.errors import DatabaseError
from kgen.measurement import Failure, Measurement, Provenance, Record

H200 = "NVIDIA H200"
H100 = "NVIDIA H100"
A100 = "NVIDIA A100"
P1 = "gemm|align=4|dtype=float32|k=64|layout=NN|m=128|n=128"
P2 = "gemm|align=4|dtype=float32|k=64|layout=NN|m=256|n=256"
PG_URL = os.environ.get("KGEN_TEST_PG_URL", "")
PG_SKIP = ("KGEN_TEST_PG_URL is not set: set it to postgresql+psycopg://user:password@host/db "
           "to run the PostgreSQL tests (bash scripts/test.sh sets up a local server)")


def rec(config="gemm_a", times=(1.0, 1.0, 1.0), problem=P1, device=H200, failure=None,
        digest="d1", created="2025-01-01T00:00:00Z", family="gemm", cc=None) -> Record:
    m = Measurement(config_name=config, config={"tile": 64, "name": config}, problem_key=problem,
                    times_ms=tuple(times) if times is not None else None,
                    failure=Failure(failure, "why") if failure else None,
                    resources={"registers": 64})
    cc = cc or ("8.0" if device == A100 else "9.0")
    p = Provenance(device=device, cc=cc, driver=12080, nvrtc="13.0", kgen_version="0.1.0",
                   template_digest=digest, created=created)
    return Record(family=family, measurement=m, provenance=p)


@contextlib.contextmanager
def pg_schema():
    """A fresh PostgreSQL schema, dropped afterwards; yields a URL whose connections use it."""
    if not PG_URL:
        pytest.skip(PG_SKIP)
    name = f"kgen_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_URL)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
    try:
        url = sa.engine.make_url(PG_URL).update_query_dict({"options": f"-csearch_path={name}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA "{name}" CASCADE')
        admin.dispose()


@pytest.fixture
def pg_url():
    with pg_schema() as url:
        yield url


# ---------------------------------------------------------------- store factories

def _sqlite(tmp_path, records):
    db = SqlStore(f"sqlite:///{tmp_path / 'kgen.db'}")
    db.commit(records)
    return db


def _postgresql(tmp_path, records, url):
    db = SqlStore(url)
    db.commit(records)
    return db


def _jsonl(tmp_path, records):
    write_jsonl(tmp_path / "shipped" / "gemm.jsonl", records)
    return JsonlStore(tmp_path / "shipped")


def _layered(tmp_path, records):
    """Records spread round-robin over a SQLite write layer, a memory and a jsonl layer."""
    parts = [records[i::3] for i in range(3)]
    write_jsonl(tmp_path / "layer" / "x.jsonl", parts[2])
    db = LayeredStore(_sqlite(tmp_path, []), MemoryStore(parts[1]), JsonlStore(tmp_path / "layer"))
    db.commit(parts[0])
    return db


FACTORIES = {
    "memory": lambda tmp_path, records: MemoryStore(records),
    "sqlite": _sqlite,
    "postgresql": _postgresql,
    "layered": _layered,
    "jsonl": _jsonl,
}
WRITABLE = ["memory", "sqlite", "postgresql", "layered"]


@pytest.fixture(params=list(FACTORIES))
def make(request, tmp_path):
    opened: list[Database] = []
    extra = (request.getfixturevalue("pg_url"),) if request.param == "postgresql" else ()

    def build(records=()) -> Database:
        db = FACTORIES[request.param](tmp_path, list(records), *extra)
        opened.append(db)
        return db

    build.kind = request.param
    yield build
    for db in opened:
        db.close()


def needs_write(make):
    if make.kind not in WRITABLE:
        pytest.skip("read-only store")


# ---------------------------------------------------------------- conformance

class TestConformance:
    def test_empty(self, make):
        db = make()
        assert db.count() == 0
        assert db.records("gemm") == []
        assert db.best("gemm", P1, H200) is None
        assert db.problems("gemm") == []
        assert db.families() == []

    def test_round_trip_and_count(self, make):
        rs = [rec("gemm_b"), rec("gemm_a", failure="compile", times=None), rec("gemm_c", problem=P2)]
        db = make(rs)
        assert db.count() == 3
        assert sorted(db.records("gemm"), key=lambda r: r.measurement.config_name) == sorted(
            rs, key=lambda r: r.measurement.config_name)
        assert db.families() == ["gemm"]

    def test_commit_returns_number_written(self, make):
        needs_write(make)
        db = make()
        assert db.commit([]) == 0
        assert db.commit(iter([rec("x"), rec("y")])) == 2
        assert db.commit([rec("x")]) == 0          # identical: held once (kgen.db.conflicts)
        assert db.commit([rec("x", times=(2.0,)), rec("x", times=(2.0,))]) == 1   # same key, another time: kept
        assert db.count() == 3
        assert [r.measurement.config_name for r in db.records("gemm")] == ["x", "x", "y"]
        assert sorted(r.measurement.time_ms for r in db.records("gemm") if r.measurement.config_name == "x") \
            == [1.0, 2.0]

    def test_read_only_commit_raises(self, make):
        if make.kind != "jsonl":
            pytest.skip("writable store")
        with pytest.raises(DatabaseError, match="read-only"):
            make().commit([rec()])

    def test_records_order_config_then_created(self, make):
        rs = [rec("b", created="2025-01-02"), rec("a", created="2025-01-03"),
              rec("b", created="2025-01-01"), rec("a", created="2025-01-01", problem=P2)]
        got = make(rs).records("gemm")
        assert [(r.measurement.config_name, r.provenance.created) for r in got] == [
            ("a", "2025-01-01"), ("a", "2025-01-03"), ("b", "2025-01-01"), ("b", "2025-01-02")]

    def test_records_filters(self, make):
        rs = [rec("a"), rec("b", problem=P2), rec("c", device="NVIDIA A100"), rec("d", digest="d2"),
              rec("e", family="conv")]
        db = make(rs)
        names = lambda got: [r.measurement.config_name for r in got]   # noqa: E731
        assert names(db.records("gemm")) == ["a", "b", "c", "d"]
        assert names(db.records("gemm", problem_key=P2)) == ["b"]
        assert names(db.records("gemm", device="NVIDIA A100")) == ["c"]
        assert names(db.records("gemm", template_digest="d2")) == ["d"]
        assert names(db.records("gemm", P1, H200, "d1")) == ["a"]
        assert names(db.records("conv")) == ["e"]
        assert db.families() == ["conv", "gemm"]

    def test_best_is_fastest_median(self, make):
        rs = [rec("slow", times=(3.0, 0.1, 3.0)), rec("fast", times=(2.0, 2.0, 9.0)),
              rec("other_device", times=(0.5,), device="NVIDIA A100"),
              rec("other_problem", times=(0.5,), problem=P2)]
        db = make(rs)
        assert db.best("gemm", P1, H200).measurement.config_name == "fast"
        assert db.best("gemm", P1, "NVIDIA A100").measurement.config_name == "other_device"
        assert db.best("gemm", P2, H200).measurement.config_name == "other_problem"
        assert db.best("conv", P1, H200) is None

    def test_failures_stored_never_best(self, make):
        rs = [rec("bad", times=(0.001,), failure="correctness"), rec("timeout", times=None, failure="timeout"),
              rec("ok", times=(5.0,)), rec("empty", times=()),
              rec("only_bad", times=(0.1,), failure="runtime", problem=P2)]
        db = make(rs)
        assert db.count() == 5
        assert db.best("gemm", P1, H200).measurement.config_name == "ok"
        assert db.best("gemm", P2, H200) is None
        assert db.problems("gemm") == [P1]
        kinds = {r.measurement.config_name: r.measurement.failure for r in db.records("gemm")}
        assert kinds["bad"] == Failure("correctness", "why") and kinds["ok"] is None

    def test_best_tie_broken_by_config_name(self, make):
        rs = [rec("zeta", times=(1.5,)), rec("alpha", times=(1.5,)), rec("mid", times=(1.5,))]
        assert make(rs).best("gemm", P1, H200).measurement.config_name == "alpha"
        assert make(list(reversed(rs))).best("gemm", P1, H200).measurement.config_name == "alpha"

    def test_best_template_digest(self, make):
        rs = [rec("new", times=(2.0,), digest="d2"), rec("old", times=(1.0,), digest="d1")]
        db = make(rs)
        assert db.best("gemm", P1, H200).measurement.config_name == "old"
        assert db.best("gemm", P1, H200, template_digest="d2").measurement.config_name == "new"
        assert db.best("gemm", P1, H200, template_digest="d3") is None

    def test_problems(self, make):
        rs = [rec("a", problem=P2), rec("b", problem=P1), rec("c", problem=P1),
              rec("d", problem="gemm|m=1", device="NVIDIA A100"),
              rec("e", problem="gemm|m=2", digest="d9"),
              rec("f", problem="gemm|m=3", failure="compile", times=None)]
        db = make(rs)
        assert db.problems("gemm") == sorted([P1, P2, "gemm|m=1", "gemm|m=2"])
        assert db.problems("gemm", device="NVIDIA A100") == ["gemm|m=1"]
        assert db.problems("gemm", template_digest="d9") == ["gemm|m=2"]
        assert db.problems("conv") == []

    def test_context_manager(self, make):
        with make([rec()]) as db:
            assert db.count() == 1

    def test_best_policies(self, make):
        rs = [rec("h200", times=(3.0,)), rec("h100", times=(2.0,), device=H100),
              rec("a100", times=(1.0,), device=A100), rec("h100_p2", times=(1.0,), device=H100, problem=P2)]
        db = make(rs)
        best = lambda **kw: db.best("gemm", P1, H200, **kw).measurement.config_name   # noqa: E731
        assert best() == best(policy="device") == "h200"
        assert best(policy="arch", cc="9.0") == "h100"
        assert best(policy="arch", cc=(8, 0)) == "a100"
        assert best(policy="any") == "a100"
        assert db.best("gemm", P2, H200) is None
        assert db.best("gemm", P2, H200, policy="arch", cc="9.0").measurement.config_name == "h100_p2"
        assert db.best("gemm", P2, H200, policy="arch", cc="8.0") is None
        assert db.best("gemm", P1, H200, "d2", policy="any") is None      # the digest still binds

    def test_problems_policies(self, make):
        rs = [rec("a", problem=P1), rec("b", problem=P2, device=H100), rec("c", problem="gemm|m=1", device=A100)]
        db = make(rs)
        assert db.problems("gemm", H200) == [P1]
        assert db.problems("gemm", H200, policy="arch", cc="9.0") == [P1, P2]
        assert db.problems("gemm", H200, policy="any") == sorted([P1, P2, "gemm|m=1"])
        assert db.problems("gemm", H200, "d9", policy="any") == []

    def test_policy_errors(self, make):
        db = make([rec()])
        with pytest.raises(DatabaseError, match="needs the target's compute capability") as info:
            db.best("gemm", P1, H200, policy="arch")
        assert "cc=" in info.value.remedy
        with pytest.raises(DatabaseError, match="unknown record-use policy"):
            db.problems("gemm", H200, policy="nearby")


# ---------------------------------------------------------------- stores agree (property)

_names = st.sampled_from(["a", "b", "B", "_c", "a-b", "a_b", "\u00e4"])   # collation-sensitive
_record = st.builds(
    lambda c, t, f, p, created: rec(c, times=t, failure=f, problem=p, created=created),
    _names, st.one_of(st.none(), st.lists(st.sampled_from([0.5, 1.0, 1.5, 2.0]), min_size=0, max_size=3)),
    st.one_of(st.none(), st.sampled_from(["compile", "runtime"])), st.sampled_from([P1, P2]),
    st.sampled_from(["2025-01-01", "2025-01-02"]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_record, max_size=12), st.integers(0, 2))
def test_stores_agree(rs, split):
    rs = list({canonical(r): r for r in rs}.values())   # layers show a shared record once
    mem = MemoryStore(rs)
    with SqlStore("sqlite://") as sql, LayeredStore(MemoryStore(rs[:split]), MemoryStore(rs[split:])) as lay:
        sql.commit(rs)
        for db in (sql, lay):
            assert db.records("gemm") == mem.records("gemm")
            assert db.problems("gemm") == mem.problems("gemm")
            for p in (P1, P2):
                assert db.best("gemm", p, H200) == mem.best("gemm", p, H200)


@pytest.fixture(scope="module")
def pg_module_url():
    with pg_schema() as url:
        yield url


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(rs=st.lists(_record, max_size=12))
def test_postgresql_agrees(pg_module_url, rs):
    """Same answers as memory, whatever the server's collation (text columns sort as "C")."""
    mem = MemoryStore(rs)
    with SqlStore(pg_module_url) as db:
        with db._engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM kgen_records_v1")
        db.commit(rs)
        assert db.records("gemm") == mem.records("gemm")
        assert db.problems("gemm") == mem.problems("gemm")
        for p in (P1, P2):
            assert db.best("gemm", p, H200) == mem.best("gemm", p, H200)


def test_postgresql_text_sorts_as_c(pg_url):
    with SqlStore(pg_url) as db, db._engine.connect() as conn:
        got = dict(conn.exec_driver_sql(
            "SELECT column_name, collation_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = 'kgen_records_v1'").all())
    assert got["config_name"] == got["data"] == got["cc"] == "C"


# ---------------------------------------------------------------- schema versions

_V0 = ("CREATE TABLE kgen_records_v0 (id INTEGER PRIMARY KEY, family TEXT NOT NULL, problem_key TEXT NOT NULL,"
       " device TEXT NOT NULL, template_digest TEXT NOT NULL, config_name TEXT NOT NULL, time_ms FLOAT,"
       " failure_kind TEXT, created TEXT NOT NULL, data TEXT NOT NULL)")


def _url_of(kind, tmp_path, request) -> str:
    return request.getfixturevalue("pg_url") if kind == "postgresql" else _url(tmp_path / "kgen.db")


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_upgrade_from_v0(kind, tmp_path, request):
    url = _url_of(kind, tmp_path, request)
    rs = [rec("h200", times=(2.0,)), rec("h100", times=(1.0,), device=H100), rec("a100", times=(0.5,), device=A100),
          rec("bad", failure="compile", times=None)]
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql(_V0)
        old = sa.Table("kgen_records_v0", sa.MetaData(), autoload_with=conn)
        conn.execute(sa.insert(old), [{k: v for k, v in zip(ROW_COLUMNS, row_of(r)) if k != "cc"} | {"id": i}
                                      for i, r in enumerate(rs, 1)])
    engine.dispose()
    with SqlStore(url) as db:                                       # copies v0 in, once
        assert db.count() == 4
        assert sorted(db.records("gemm"), key=canonical) == sorted(rs, key=canonical)
        assert db.best("gemm", P1, H200, policy="arch", cc="9.0").measurement.config_name == "h100"
        assert db.best("gemm", P1, H200, policy="arch", cc="8.0").measurement.config_name == "a100"
        with db._engine.connect() as conn:
            assert sorted(conn.exec_driver_sql("SELECT DISTINCT cc FROM kgen_records_v1").scalars()) == ["8.0", "9.0"]
            assert conn.exec_driver_sql("SELECT count(*) FROM kgen_records_v0").scalar() == 4   # left in place
    with SqlStore(url) as db:
        assert db.count() == 4


def test_upgrade_refuses_an_unknown_table(tmp_path):
    with SqlStore(_url(tmp_path / "kgen.db")) as db, db._engine.begin() as conn:
        with pytest.raises(DatabaseError, match="no upgrade is known from table kgen_records_v7"):
            upgrade(conn, "kgen_records_v7")


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_newer_schema_refused(kind, tmp_path, request):
    url = _url_of(kind, tmp_path, request)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE kgen_records_v2 (id INTEGER PRIMARY KEY, data TEXT)")
    engine.dispose()
    with pytest.raises(DatabaseError, match="kgen_records_v2") as info:
        SqlStore(url)
    assert "upgrade kgen" in info.value.remedy


# ---------------------------------------------------------------- network filesystems

MOUNTS = """\
/dev/vda / ext4 rw,relatime 0 0
srv:/export/home /home nfs4 rw,vers=4.2 0 0
//nas/share /mnt/nas cifs rw 0 0
/dev/vdb /home/ana/local ext4 rw 0 0
ana@box:/data /mnt/my\\040drive fuse.sshfs rw 0 0
tmpfs /mnt/nas tmpfs rw 0 0
"""


@pytest.mark.parametrize("path, kind", [
    ("/tmp/kgen.db", "ext4"), ("/home", "nfs4"), ("/home/ana/.kgen/kgen.db", "nfs4"),
    ("/home/ana/local/kgen.db", "ext4"), ("/homes/x", "ext4"), ("/mnt/my drive/kgen.db", "fuse.sshfs"),
    ("/mnt/nas/kgen.db", "tmpfs"),                      # a later mount on the same point wins
])
def test_mount_type(path, kind):
    assert mount_type(path, MOUNTS) == kind


def test_network_fs(tmp_path):
    assert network_fs("/home/ana/.kgen/kgen.db", MOUNTS) == "nfs4"
    assert network_fs("/mnt/my drive/x.db", MOUNTS) == "fuse.sshfs"
    assert network_fs("/home/ana/local/kgen.db", MOUNTS) is None
    assert network_fs(tmp_path / "kgen.db") is None                  # this machine's real mounts
    link = tmp_path / "link"
    link.symlink_to("/home/ana")
    mounts = MOUNTS + f"/dev/vdc {tmp_path} ext4 rw 0 0\n"
    assert network_fs(link / "kgen.db", mounts) == "nfs4"           # resolved before the look-up


def test_sqlite_on_a_network_filesystem_is_refused(tmp_path, monkeypatch):
    with pytest.raises(DatabaseError, match=r"network filesystem \(nfs4\)") as info:
        refuse_network_fs("/home/ana/.kgen/kgen.db", MOUNTS)
    assert "KGEN_DB_URL=postgresql+psycopg://" in info.value.remedy and "KGEN_HOME" in info.value.remedy
    refuse_network_fs(":memory:", MOUNTS)
    refuse_network_fs(None, MOUNTS)
    import kgen.db.sqlite

    monkeypatch.setattr(kgen.db.sqlite, "network_fs", lambda path, mounts_text=None: "nfs")
    with pytest.raises(DatabaseError, match="network filesystem"):
        SqlStore(_url(tmp_path / "kgen.db"))
    assert not (tmp_path / "kgen.db").exists()                      # refused before opening


def test_bad_urls():
    with pytest.raises(DatabaseError, match="not a database URL") as info:
        SqlStore("not a url")
    assert "postgresql+psycopg://" in info.value.remedy
    with pytest.raises(DatabaseError, match="no driver") as info:
        SqlStore("postgresql+nosuchdriver://u:secret@localhost/db")
    assert "secret" not in str(info.value)


def test_unreachable_server():
    with pytest.raises(DatabaseError, match="cannot open") as info:
        SqlStore("postgresql+psycopg://kgen:secret@127.0.0.1:9/nothing?connect_timeout=2")
    assert "server is up" in info.value.remedy and "secret" not in str(info.value)


# ---------------------------------------------------------------- SQLite specifics

def _url(path) -> str:
    return f"sqlite:///{path}"


def test_wal_and_busy_timeout(tmp_path):
    with SqlStore(_url(tmp_path / "kgen.db")) as db:
        with db._engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 10_000


def test_best_uses_index(tmp_path):
    with SqlStore(_url(tmp_path / "kgen.db")) as db:
        db.commit([rec(f"c{i}", times=(float(i),)) for i in range(1, 50)])
        stmt = db._best_stmt("gemm", P1, H200, None).limit(1)
        sql = str(stmt.compile(db._engine, compile_kwargs={"literal_binds": True}))
        with db._engine.connect() as conn:
            plan = " ".join(row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql))
    assert "ix_kgen_records_v1_best" in plan and "SCAN" not in plan.replace("SCAN CONSTANT", "")


def test_corrupt_file(tmp_path):
    path = tmp_path / "kgen.db"
    path.write_bytes(b"this is not a sqlite database\n" * 200)
    with pytest.raises(DatabaseError) as info:
        SqlStore(_url(path))
    assert "KGEN_HOME" in str(info.value) and "aside" in info.value.remedy


def test_corrupt_rows_skipped(tmp_path, caplog):
    path = tmp_path / "kgen.db"
    with SqlStore(_url(path)) as db:
        db.commit([rec("good", times=(2.0,))])
    con = sqlite3.connect(path)
    con.execute("INSERT INTO kgen_records_v1 (family, problem_key, device, template_digest, config_name,"
                " time_ms, created, data) VALUES ('gemm', ?, ?, 'd1', 'aaa', 0.1, '', '{not json')", (P1, H200))
    con.execute("INSERT INTO kgen_records_v1 (family, problem_key, device, template_digest, config_name,"
                " time_ms, created, data) VALUES ('gemm', ?, ?, 'd1', 'aab', 0.2, '', '{\"x\": 1}')", (P1, H200))
    con.commit()
    con.close()
    with caplog.at_level(logging.WARNING, logger="kgen.db.sql"), SqlStore(_url(path)) as db:
        assert [r.measurement.config_name for r in db.records("gemm")] == ["good"]
        assert db.best("gemm", P1, H200).measurement.config_name == "good"
    assert "corrupt row" in caplog.text


def test_default_creates_home(tmp_path, monkeypatch):
    home = tmp_path / "a" / "home"
    monkeypatch.setenv("KGEN_HOME", str(home))
    with SqlStore.default() as db:
        db.commit([rec()])
    assert (home / "kgen.db").is_file()


def test_open_default_layers(tmp_path, monkeypatch):
    import kgen.render

    monkeypatch.setenv("KGEN_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KGEN_DB_URL", raising=False)
    monkeypatch.setattr(kgen.render, "data_root", lambda: tmp_path / "data")
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "1")
    with open_default() as db:                      # no shipped files yet: local only
        assert len(db.layers) == 1
    write_jsonl(tmp_path / "data" / "tuning_db" / "nvidia-h200" / "gemm.jsonl", [rec("shipped", times=(3.0,))])
    with open_default() as db:
        assert len(db.layers) == 2
        db.commit([rec("local", times=(1.0,))])
        assert db.best("gemm", P1, H200).measurement.config_name == "local"
        assert [r.measurement.config_name for r in db.records("gemm")] == ["local", "shipped"]
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    monkeypatch.setenv("KGEN_DB_URL", _url(tmp_path / "other.db"))
    with open_default() as db:
        assert len(db.layers) == 1 and db.count() == 0


def test_layered_shows_shared_record_once(tmp_path):
    r = rec("same")
    other = rec("same", times=(2.0,))                # same key, another time: a second measurement
    db = LayeredStore(MemoryStore([r, r, other]), MemoryStore([r]))
    assert db.records("gemm") == [r, other]
    assert db.count() == 3


@pytest.mark.parametrize("team", ["sqlite", "postgresql"])
def test_layered_best_whatever_the_order(team, tmp_path, request):
    """local SQLite, team (SQLite or PostgreSQL), shipped JSON lines, memory: every order agrees."""
    team_url = request.getfixturevalue("pg_url") if team == "postgresql" else _url(tmp_path / "team.db")
    tie = rec("tie_b", times=(1.0,))
    local = [rec("tie_c", times=(1.0,)), tie, rec("slow", times=(4.0,)), rec("x", times=(0.2,), problem=P2)]
    teamr = [rec("tie_a", times=(1.0,), created="2025-02-01"), tie, rec("h100", times=(0.1,), device=H100),
             rec("y", times=(0.3,), problem=P2, digest="d2")]
    shipped = [rec("tie_a", times=(1.0,), created="2025-01-01"), rec("a100", times=(0.05,), device=A100),
               rec("z", times=(0.1,), problem="gemm|m=1")]
    mem = [rec("w", times=(0.2,), problem=P2), tie, tie]        # held once
    write_jsonl(tmp_path / "shipped" / "gemm.jsonl", shipped)
    stores = [SqlStore(_url(tmp_path / "local.db")), SqlStore(team_url), JsonlStore(tmp_path / "shipped"),
              MemoryStore(mem)]
    stores[0].commit(local)
    stores[1].commit(teamr)
    queries = [((P1, H200), {}), ((P1, H200), {"policy": "arch", "cc": "9.0"}), ((P1, H200), {"policy": "any"}),
               ((P2, H200), {}), ((P2, H200, "d2"), {}), (("gemm|m=1", H200), {"policy": "any"})]

    def answers(db):
        return ([db.best("gemm", *args, **kw) for args, kw in queries],
                db.problems("gemm", H200), db.problems("gemm", H200, policy="any"), db.records("gemm"))

    try:
        first = answers(LayeredStore(*stores))
        assert first[0][0].measurement.config_name == "tie_a" and first[0][0].provenance.created == "2025-01-01"
        assert [b.measurement.config_name for b in first[0][1:]] == ["h100", "a100", "w", "y", "z"]   # w ties x
        assert sum(r == tie for r in first[3]) == 1              # every layer holds it once
        for order in itertools.permutations(stores):
            assert answers(LayeredStore(*order)) == first
    finally:
        for db in stores:
            db.close()


def test_layered_write_store_must_be_a_layer():
    a, b = MemoryStore(), MemoryStore()
    assert LayeredStore(a, b, write=b).write is b
    with pytest.raises(DatabaseError, match="must be one of its layers"):
        LayeredStore(a, write=b)


@pytest.mark.parametrize("team", ["sqlite", "postgresql"])
def test_open_default_team(team, tmp_path, monkeypatch, request):
    import kgen.render

    team_url = request.getfixturevalue("pg_url") if team == "postgresql" else _url(tmp_path / "team.db")
    monkeypatch.setattr(kgen.render, "data_root", lambda: tmp_path / "data")
    write_jsonl(tmp_path / "data" / "tuning_db" / "gemm.jsonl", [rec("shipped", times=(3.0,))])
    monkeypatch.setenv("KGEN_DB_URL", _url(tmp_path / "local.db"))
    monkeypatch.setenv("KGEN_TEAM_DB_URL", team_url)
    monkeypatch.delenv("KGEN_WRITE_TO_TEAM", raising=False)
    with open_default() as db:                                   # local -> team -> shipped
        assert [type(x).__name__ for x in db.layers] == ["SqlStore", "SqlStore", "JsonlStore"]
        assert db.layers[1].url == team_url and db.write is db.layers[0]
        db.commit([rec("local", times=(2.0,))])
    with open_default(write="team") as db:
        assert db.write is db.layers[1]
        db.commit([rec("team", times=(1.0,))])
    monkeypatch.setenv("KGEN_WRITE_TO_TEAM", "1")
    with open_default() as db:
        assert db.write is db.layers[1]
        assert db.best("gemm", P1, H200).measurement.config_name == "team"
        assert [r.measurement.config_name for r in db.records("gemm")] == ["local", "shipped", "team"]
        assert (db.layers[0].count(), db.layers[1].count()) == (1, 1)
    with open_default(write="local") as db:
        assert db.write is db.layers[0]
    monkeypatch.delenv("KGEN_TEAM_DB_URL")
    with pytest.raises(DatabaseError, match="KGEN_TEAM_DB_URL is not set") as info:
        open_default()
    assert "KGEN_WRITE_TO_TEAM" in info.value.remedy
    with pytest.raises(DatabaseError, match="expected 'local' or 'team'"):
        open_default(write="shipped")


# ---------------------------------------------------------------- policy in dispatch and warm starts

def _gemm_records(device, cc, problem, configs, time_ms):
    from kgen.kernels.gemm.simt import GemmSimt

    digest = GemmSimt().template_digest()
    prov = Provenance(device=device, cc=cc, template_digest=digest, created="2025-01-01")
    return [Record("gemm", Measurement(c.name, c.as_dict(), problem.key, times_ms=(time_ms + i,)), prov)
            for i, c in enumerate(configs)]


@pytest.fixture(scope="module")
def gemm_setup():
    from kgen.kernels.gemm.simt import GemmSimt
    from kgen.kernels.gemm.problem import gemm_problem
    from kgen.problem import Target

    spec, target = GemmSimt(), Target.h200()
    problem, near = gemm_problem(32, 32, 64), gemm_problem(32, 32, 128)
    default = spec.default_config(problem, target).name
    space = spec.space(problem, target)
    configs = [c for c in spec.space(near, target).configs()[::97]
               if space.is_valid(c.as_dict()) and c.name != default][:4]
    assert len(configs) == 4
    return spec, target, problem, near, configs


@pytest.mark.parametrize("policy, how, picked", [
    ("device", "default", None), ("arch", "nearest", 0), ("any", "nearest", 1)])
def test_dispatch_policy(gemm_setup, monkeypatch, policy, how, picked):
    from kgen.dispatch import Dispatcher

    monkeypatch.setenv("KGEN_UNTUNED", "nearest")       # the policy scopes the nearest problem's records
    monkeypatch.setenv("KGEN_SAME_ARCH_RECORDS", "0")   # (near's own H100 record would serve it first)
    spec, target, problem, near, configs = gemm_setup
    db = MemoryStore(_gemm_records(H100, "9.0", near, configs[:1], 2.0)
                     + _gemm_records(A100, "8.0", near, configs[1:2], 1.0)
                     + _gemm_records(H100, "9.0", problem, configs[2:3], 0.5)
                     + _gemm_records(A100, "8.0", problem, configs[3:4], 0.1))
    monkeypatch.setenv("KGEN_DISPATCH_POLICY", policy)
    choice = Dispatcher(db=db, targets={0: target}).choose(spec, near, target)
    assert choice.how == how
    if picked is not None:
        assert choice.config.name == configs[picked].name and choice.from_problem == near.key
    db.commit(_gemm_records(target.name, "9.0", near, configs[3:4], 9.0))
    tuned = Dispatcher(db=db, targets={0: target}).choose(spec, near, target)
    assert tuned.how == "tuned" and tuned.config.name == configs[3].name   # exact: this device only


@pytest.mark.parametrize("untuned", ["model", "nearest"])
def test_same_arch_record_serves_an_untuned_problem(gemm_setup, monkeypatch, untuned):
    """A problem measured only on another card of this compute capability runs that card's best
    before any model or nearest guess; another architecture's record, a record faster than any
    GPU and the knob turned off leave the untuned fallbacks; this device's own record wins."""
    from kgen.dispatch import Dispatcher

    monkeypatch.setenv("KGEN_UNTUNED", untuned)
    spec, target, problem, near, configs = gemm_setup

    def choose(*records):
        return Dispatcher(db=MemoryStore(list(records)), targets={0: target}).choose(spec, problem, target)

    h100 = _gemm_records(H100, "9.0", problem, configs[:2], 0.5)
    borrowed = choose(*h100, *_gemm_records(A100, "8.0", problem, configs[2:3], 0.1))
    assert borrowed.how == "arch" and borrowed.config.name == configs[0].name
    assert borrowed.time_ms is None and borrowed.predicted_ms == 0.5 and borrowed.from_problem == problem.key
    model = Dispatcher(db=MemoryStore(), targets={0: target}).choose(spec, problem, target)
    assert model.how != "arch" and borrowed.rank < model.rank
    assert choose(*_gemm_records(A100, "8.0", problem, configs[2:3], 0.1)).how != "arch"
    assert choose(*_gemm_records(H100, "9.0", problem, configs[:1], 1e-9)).how != "arch"     # under the floor
    own = choose(*h100, *_gemm_records(target.name, "9.0", problem, configs[3:4], 9.0))
    assert own.how == "tuned" and own.config.name == configs[3].name
    monkeypatch.setenv("KGEN_SAME_ARCH_RECORDS", "0")
    assert choose(*h100).how != "arch"


def test_dispatch_policy_setting(monkeypatch):
    from kgen.errors import SettingError
    from kgen.knobs import knobs

    assert knobs.dispatch_policy == "device"
    monkeypatch.setenv("KGEN_DISPATCH_POLICY", "elsewhere")
    with pytest.raises(SettingError, match="KGEN_DISPATCH_POLICY"):
        knobs.dispatch_policy


def test_warm_start_arch_then_any(gemm_setup):
    from kgen.search import Tuner

    spec, target, problem, near, configs = gemm_setup

    class Runner:
        def measurable(self, key):
            return None

    def warm(db):
        tuner = Tuner(spec, problem, target, Runner(), db)
        return [spec.space(problem, target).make(v).name for v in tuner._warm_start_configs()]

    names = [c.name for c in configs]
    h100 = _gemm_records(H100, "9.0", near, configs[:1], 2.0)
    a100 = _gemm_records(A100, "8.0", near, configs[1:2], 1.0) + _gemm_records(A100, "8.0", problem, configs[2:3], 1.0)
    assert warm(MemoryStore(h100 + a100)) == [names[0], names[2], names[1]]   # arch first, then any by distance
    assert warm(MemoryStore(a100)) == [names[2], names[1]]
    assert warm(MemoryStore()) == []


# ---------------------------------------------------------------- JSON lines

def test_jsonl_round_trip_byte_identical(tmp_path):
    rs = [rec("b", problem=P2), rec("a", times=(1.0, 2.0)), rec("c", failure="timeout", times=None),
          rec("a", device="NVIDIA A100"), rec("z", family="conv"), rec("a", created="2024-12-31")]
    first, second = tmp_path / "one" / "gemm.jsonl", tmp_path / "two" / "gemm.jsonl"
    assert write_jsonl(first, reversed(rs)) == len(rs)
    store = JsonlStore(first)
    back = [r for f in store.families() for r in store.records(f)]
    write_jsonl(second, back)
    assert first.read_bytes() == second.read_bytes()
    lines = first.read_text().splitlines()
    assert len(lines) == len(rs) and lines[0].startswith('{"compile_s"')
    assert not list(first.parent.glob(".*tmp"))


def test_jsonl_bad_line(tmp_path):
    path = tmp_path / "db" / "gemm.jsonl"
    write_jsonl(path, [rec("a"), rec("b")])
    path.write_text(path.read_text() + "\n{\"family\": \"gemm\"}\n")
    store = JsonlStore(tmp_path / "db")
    with pytest.raises(DatabaseError, match=r"gemm\.jsonl:4") as info:
        store.records("gemm")
    assert info.value.fields["line"] == 4


def test_jsonl_missing_path(tmp_path):
    with pytest.raises(DatabaseError, match="does not exist"):
        JsonlStore(tmp_path / "nope").count()


def test_sqlite_best_answers_from_memory_until_another_connection_writes(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    reader, writer = SqlStore(url), SqlStore(url)
    writer.commit([rec("gemm_slow", times=(2.0, 2.0, 2.0))])
    assert reader.best("gemm", P1, H200).measurement.config_name == "gemm_slow"
    assert reader.best("gemm", P1, H200) is reader.best("gemm", P1, H200)   # served from memory
    writer.commit([rec("gemm_fast", times=(1.0, 1.0, 1.0))])
    assert reader.best("gemm", P1, H200).measurement.config_name == "gemm_fast"
    reader.commit([rec("gemm_fastest", times=(0.5, 0.5, 0.5))])
    assert reader.best("gemm", P1, H200).measurement.config_name == "gemm_fastest"
    reader.close()
    writer.close()
