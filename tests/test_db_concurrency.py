"""Many processes writing one database (SQLite, PostgreSQL) lose nothing, and a writer killed
with SIGKILL mid-transaction leaves a readable database holding whole transactions only."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sqlite3
import time

import pytest

from kgen.db import SqlStore
from kgen.measurement import Measurement, Provenance, Record

PROCS, BATCHED, BATCH, SINGLE = 8, 500, 50, 40      # per process: 10 commits of 50, then 40 of 1
KILL_BATCH = 100
PROBLEM = "gemm|align=4|dtype=float32|k=64|layout=NN|m=128|n=128"
DEVICE = "NVIDIA H200"


def _record(name: str, t: float = 1.0) -> Record:
    return Record("gemm", Measurement(name, {"name": name}, PROBLEM, times_ms=(t,)),
                  Provenance(device=DEVICE, cc="9.0", template_digest="d1", created="2025-01-01"))


def _writer(urls: list[str], worker: int, go) -> None:
    go.wait(120)                                 # all open (and create the table) at once
    for url in urls:
        db = SqlStore(url)
        rs = [_record(f"w{worker}_b{i}", 1.0 + i) for i in range(BATCHED)]
        for j in range(0, BATCHED, BATCH):
            assert db.commit(rs[j:j + BATCH]) == BATCH
        for i in range(SINGLE):
            db.commit([_record(f"w{worker}_s{i}")])
        db.close()


def _forever(url: str) -> None:
    db = SqlStore(url)
    i = 0
    while True:
        db.commit([_record(f"k{i}_{j}") for j in range(KILL_BATCH)])
        i += 1


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'kgen.db'}"
        return
    from test_db import pg_schema

    with pg_schema() as pg_url:
        yield pg_url


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """One run of the writers, into a fresh SQLite file and (when set up) a fresh PostgreSQL
    schema: process start-up is paid once. Yields ({kind: url}, exit codes)."""
    from test_db import PG_URL, pg_schema

    urls = {"sqlite": f"sqlite:///{tmp_path_factory.mktemp('many') / 'kgen.db'}"}
    with contextlib.ExitStack() as stack:
        if PG_URL:
            urls["postgresql"] = stack.enter_context(pg_schema())
        ctx = mp.get_context("spawn")
        go = ctx.Event()
        procs = [ctx.Process(target=_writer, args=(list(urls.values()), w, go)) for w in range(PROCS)]
        for p in procs:
            p.start()
        go.set()
        for p in procs:
            p.join(180)
        yield urls, [p.exitcode for p in procs]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_many_writers_lose_nothing(written, kind):
    urls, exitcodes = written
    if kind not in urls:
        from test_db import PG_SKIP

        pytest.skip(PG_SKIP)
    assert exitcodes == [0] * PROCS
    expected = {f"w{w}_b{i}" for w in range(PROCS) for i in range(BATCHED)}
    expected |= {f"w{w}_s{i}" for w in range(PROCS) for i in range(SINGLE)}
    with SqlStore(urls[kind]) as db:
        names = [r.measurement.config_name for r in db.records("gemm")]
        assert db.count() == len(names) == PROCS * (BATCHED + SINGLE)
        assert set(names) == expected
        assert db.best("gemm", PROBLEM, DEVICE).measurement.config_name == "w0_b0"  # ties: lowest name


def test_writer_killed_mid_run(url, tmp_path):
    SqlStore(url).close()
    proc = mp.get_context("spawn").Process(target=_forever, args=(url,))
    proc.start()
    try:
        deadline = time.monotonic() + 30
        with SqlStore(url) as db:
            while db.count() < 5 * KILL_BATCH and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)
    assert proc.exitcode == -signal.SIGKILL
    with SqlStore(url) as db:
        n = db.count()
        assert n >= 5 * KILL_BATCH and n % KILL_BATCH == 0          # whole transactions only
        names = {r.measurement.config_name for r in db.records("gemm")}
        assert names == {f"k{i}_{j}" for i in range(n // KILL_BATCH) for j in range(KILL_BATCH)}
        assert db.best("gemm", PROBLEM, DEVICE) is not None
        assert db.commit([_record("after")]) == 1                    # still writable
        assert db.count() == n + 1
    if url.startswith("sqlite"):
        con = sqlite3.connect(tmp_path / "kgen.db")
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        con.close()
