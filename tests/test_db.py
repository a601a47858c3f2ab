"""The tuning database: one conformance suite over every store, plus SQLite robustness."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import sqlite3
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kgen.db import (Database, JsonlStore, LayeredStore, MemoryStore, SqlStore, open_default,
                     write_jsonl)
from kgen.db.base import canonical
from kgen.errors import DatabaseError
from kgen.measurement import Failure, Measurement, Provenance, Record

H200 = "NVIDIA H200"
P1 = "gemm|align=4|dtype=float32|k=64|layout=NN|m=128|n=128"
P2 = "gemm|align=4|dtype=float32|k=64|layout=NN|m=256|n=256"


def rec(config="gemm_a", times=(1.0, 1.0, 1.0), problem=P1, device=H200, failure=None,
        digest="d1", created="2025-01-01T00:00:00Z", family="gemm") -> Record:
    m = Measurement(config_name=config, config={"tile": 64, "name": config}, problem_key=problem,
                    times_ms=tuple(times) if times is not None else None,
                    failure=Failure(failure, "why") if failure else None,
                    resources={"registers": 64})
    p = Provenance(device=device, cc="9.0", driver=12080, nvrtc="13.0", kgen_version="0.1.0",
                   template_digest=digest, created=created)
    return Record(family=family, measurement=m, provenance=p)


# ---------------------------------------------------------------- store factories

def _sqlite(tmp_path, records):
    db = SqlStore(f"sqlite:///{tmp_path / 'kgen.db'}")
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
    "layered": _layered,
    "jsonl": _jsonl,
}
WRITABLE = ["memory", "sqlite", "layered"]


@pytest.fixture(params=list(FACTORIES))
def make(request, tmp_path):
    opened: list[Database] = []

    def build(records=()) -> Database:
        db = FACTORIES[request.param](tmp_path, list(records))
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
        assert db.commit([rec("x")]) == 1          # duplicates are kept
        assert db.count() == 3
        assert [r.measurement.config_name for r in db.records("gemm")] == ["x", "x", "y"]

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


# ---------------------------------------------------------------- stores agree (property)

_names = st.sampled_from(["a", "b", "c", "d"])
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


# ---------------------------------------------------------------- SQLite specifics

def _url(path) -> str:
    return f"sqlite:///{path}"


def _writer(url: str, worker: int, n: int) -> None:
    db = SqlStore(url)
    for i in range(n):
        if i % 10 == 9:
            db.commit([rec(f"w{worker}_{i}_{j}", times=(float(j + 1),)) for j in range(3)])
        else:
            db.commit([rec(f"w{worker}_{i}", times=(float(i + 1),))])
    db.close()


def _forever(url: str) -> None:
    db = SqlStore(url)
    i = 0
    while True:
        db.commit([rec(f"k{i}_{j}") for j in range(5)])
        i += 1


def test_concurrent_writers(tmp_path):
    """Writers racing on a fresh file (creating it and the table, too) lose nothing."""
    url, workers, n = _url(tmp_path / "kgen.db"), 4, 200
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(url, w, n)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with SqlStore(url) as db:
        names = [r.measurement.config_name for r in db.records("gemm")]
    per_worker = (n - n // 10) + 3 * (n // 10)
    assert len(names) == workers * per_worker == len(set(names))
    for w in range(workers):
        assert f"w{w}_0" in names and f"w{w}_199_2" in names


def test_sigkill_while_writing(tmp_path):
    path = tmp_path / "kgen.db"
    SqlStore(_url(path)).close()
    proc = mp.get_context("spawn").Process(target=_forever, args=(_url(path),))
    proc.start()
    try:
        deadline = time.monotonic() + 20
        with SqlStore(_url(path)) as db:
            while db.count() < 100 and time.monotonic() < deadline:
                time.sleep(0.02)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)
    assert proc.exitcode == -signal.SIGKILL
    with SqlStore(_url(path)) as db:
        n = db.count()
        assert n >= 100 and n % 5 == 0          # whole transactions only
        assert len(db.records("gemm")) == n
        assert db.best("gemm", P1, H200) is not None
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    con.close()


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


def test_newer_schema(tmp_path):
    path = tmp_path / "kgen.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE kgen_records_v2 (id INTEGER PRIMARY KEY, data TEXT)")
    con.commit()
    con.close()
    with pytest.raises(DatabaseError, match="kgen_records_v2") as info:
        SqlStore(_url(path))
    assert "upgrade kgen" in info.value.remedy


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
    with caplog.at_level(logging.WARNING, logger="kgen.db.sqlite"), SqlStore(_url(path)) as db:
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
    db = LayeredStore(MemoryStore([r, r]), MemoryStore([r]))
    assert db.records("gemm") == [r, r]
    assert db.count() == 3


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
