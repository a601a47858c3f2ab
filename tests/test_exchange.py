"""Sharing tuning records: validated import (all or nothing), export, merge, T4, prune,
stats, verify, and the `kgen db` commands."""

from __future__ import annotations

import functools
import gzip
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from typer.testing import CliRunner

from kgen.cli import app
from kgen.db import MemoryStore, SqlStore, write_jsonl
from kgen.db.exchange import export, import_file, merge, prune, read_records, record_key, stats, with_origin
from kgen.db.base import canonical
from kgen.db.schema import validate_line
from kgen.db.t4 import from_t4, to_t4
from kgen.db.verify import is_trusted, trusted_best, verify
from kgen.errors import DatabaseError
from kgen.measurement import Failure, Measurement, Provenance, Record, record_from_dict, record_to_dict
from kgen.kernels.gemm.problem import gemm_problem
from kgen.problem import Problem, Target
from kgen.registry import get_spec
from kgen.runners import Recording, ReplayRunner

H200 = "NVIDIA H200"
SPEC = get_spec("gemm")
DIGEST = SPEC.template_digest()
P1 = gemm_problem(128, 128, 64).key
P2 = gemm_problem(256, 256, 64).key
# Labels the tests use for configs; each stands for a distinct valid config of both problems.
LABELS = ([f"gemm_{c}" for c in "abcdfiqvxyz"] + [f"gemm_{i}" for i in range(5)]
          + [f"gemm_{i:04d}" for i in range(130)])


@functools.lru_cache(maxsize=1)
def _configs() -> dict:
    target = Target.h200()
    first, second = (SPEC.space(Problem.from_key(k), target) for k in (P1, P2))
    both = [c for c in first.configs() if second.is_valid(c.as_dict())]
    assert len(both) >= len(LABELS)
    return dict(zip(LABELS, both[::len(both) // len(LABELS)]))


def name(label: str) -> str:
    """The procedural name of the config a label stands for."""
    return _configs()[label].name


def rec(config="gemm_a", times=(1.0, 1.0, 1.0), problem=P1, device=H200, failure=None, digest=DIGEST,
        created="2025-01-01T00:00:00Z", error=1e-7, origin="") -> Record:
    """A valid gemm record (the config a label stands for); ``kgen.db.validity`` accepts it."""
    chosen = _configs()[config]
    m = Measurement(config_name=chosen.name, config=chosen.as_dict(), problem_key=problem,
                    times_ms=tuple(times) if times is not None else None,
                    failure=Failure(failure, "why") if failure else None, error=error,
                    resources={"registers": 64}, compile_s=0.5, measure_s=0.1)
    p = Provenance(device=device, cc="9.0", driver=12080, nvrtc="13.0", kgen_version="0.1.0",
                   template_digest=digest, created=created, origin=origin)
    return Record(family="gemm", measurement=m, provenance=p)


SAMPLE = [rec("gemm_a"), rec("gemm_b", (2.0, 2.5, 2.0)), rec("gemm_c", None, failure="compile"),
          rec("gemm_d", (0.5,), failure="correctness", error=float("nan")), rec("gemm_a", (0.9,), problem=P2),
          rec("gemm_a", (3.0,), device="NVIDIA A100", created="2025-02-01T00:00:00Z")]


@pytest.fixture(params=["sqlite", "memory"])
def store(request, tmp_path):
    db = SqlStore(f"sqlite:///{tmp_path / 'kgen.db'}") if request.param == "sqlite" else MemoryStore()
    yield db
    db.close()


def lines(records) -> list[str]:
    return [json.dumps(record_to_dict(r), sort_keys=True) for r in records]


def write_lines(path: Path, texts, end="\n") -> Path:
    path.write_bytes("".join(t + end for t in texts).encode())
    return path


# ---------------------------------------------------------------- round trips


def test_export_import_export_is_byte_identical(store, tmp_path):
    store.commit(SAMPLE)
    export(store, tmp_path / "one.jsonl")
    other = MemoryStore()
    report = import_file(tmp_path / "one.jsonl", other)
    assert (report.read, report.imported, report.skipped) == (6, 6, 0)
    assert all(r.provenance.origin == "import:one.jsonl" for r in other.records("gemm"))
    export(other, tmp_path / "two.jsonl")
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()
    assert b'"origin"' not in (tmp_path / "one.jsonl").read_bytes()     # origin stays local


def test_gzipped_files_import_and_a_second_import_adds_nothing(store, tmp_path):
    write_jsonl(tmp_path / "a.jsonl", SAMPLE)
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress((tmp_path / "a.jsonl").read_bytes()))
    assert import_file(tmp_path / "a.jsonl.gz", store).imported == 6
    again = import_file(tmp_path / "a.jsonl", store)
    assert (again.imported, again.skipped, store.count()) == (0, 6, 6)


def test_validate_line_round_trips_and_accepts_records_without_origin():
    for r in SAMPLE:
        d = record_to_dict(r)
        assert "origin" not in d["provenance"]
        assert canonical_text(validate_line(json.loads(json.dumps(d)))) == canonical_text(r)
    marked = with_origin(SAMPLE[0], "import:x.jsonl")
    assert validate_line(record_to_dict(marked)).provenance.origin == "import:x.jsonl"
    assert record_from_dict(record_to_dict(SAMPLE[0])).provenance.origin == ""


def canonical_text(r: Record) -> str:
    return json.dumps(record_to_dict(r), sort_keys=True)


# ---------------------------------------------------------------- bad files import nothing


def _edit(change):
    d = record_to_dict(rec("gemm_z", created="2025-03-01T00:00:00Z"))
    change(d)
    return json.dumps(d)


GOOD = lines([rec("gemm_x"), rec("gemm_y")])
BAD_LINES = {
    "wrong type of line": ("[1, 2, 3]", "must be an object"),
    "times as text": (_edit(lambda d: d.update(times_ms="1.0")), "'times_ms' must be null or an array"),
    "driver as text": (_edit(lambda d: d["provenance"].update(driver="12080")), "'provenance.driver' must be an integer"),
    "boolean warmup": (_edit(lambda d: d["timing"].update(warmup=True)), "'timing.warmup' must be an integer"),
    "nested config": (_edit(lambda d: d["config"].update(tile=[64, 64])), "'config.tile'"),
    "unknown field": (_edit(lambda d: d.update(colour="red")), "unknown field 'colour'"),
    "unknown provenance field": (_edit(lambda d: d["provenance"].update(gpu_clock=1980)),
                                 "unknown field 'provenance.gpu_clock'"),
    "unknown failure kind": (_edit(lambda d: d.update(failure={"kind": "segfault", "detail": ""})),
                             "not a failure kind"),
    "negative time": (_edit(lambda d: d.update(times_ms=[1.0, -1.0])), "'times_ms[1]' must be a finite number >= 0"),
    "NaN time": (_edit(lambda d: d.update(times_ms=[float("nan")])), "'times_ms[0]' must be a finite number"),
    "missing key": (_edit(lambda d: d.pop("provenance")), "missing field 'provenance'"),
    "missing provenance key": (_edit(lambda d: d["provenance"].pop("device")), "missing field 'provenance.device'"),
    "not JSON": ('{"family": "gemm", ', "not JSON"),
    "binary garbage": (b"\x89PNG\r\x1a\x00\xff\xfe\x00\x00".decode("latin-1"), "not UTF-8"),
}


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_a_bad_line_imports_nothing_and_is_named(store, tmp_path, case):
    store.commit(SAMPLE[:2])
    bad, words = BAD_LINES[case]
    path = tmp_path / "bad.jsonl"
    body = (GOOD[0] + "\n").encode() + bad.encode("latin-1" if case == "binary garbage" else "utf-8") \
        + ("\n" + GOOD[1] + "\n").encode()
    path.write_bytes(body)
    with pytest.raises(DatabaseError) as info:
        import_file(path, store)
    assert "bad.jsonl:2: " in info.value.message and words in info.value.message, info.value.message
    assert info.value.fields["line"] == 2 and info.value.remedy
    assert store.count() == 2


@pytest.mark.parametrize("case, make, words", [
    ("truncated", lambda p: p.write_bytes("\n".join(GOOD).encode()[:-40]), "bad.jsonl:2: the last line is cut short"),
    ("truncated gzip", lambda p: p.write_bytes(gzip.compress("".join(t + "\n" for t in GOOD * 50).encode())[:-30]),
     "compressed data is cut short"),
    ("invalid config", lambda p: write_lines(p, [GOOD[0], GOOD[1], _edit(lambda d: d["config"].update(GM="K"))]),
     "bad.jsonl:3: config 'gemm_simt_"),
    ("empty", lambda p: p.write_bytes(b""), "holds no records"),
    ("binary file", lambda p: p.write_bytes(bytes(range(256)) * 4), "bad.jsonl:1: not JSON"),
    ("binary blob", lambda p: p.write_bytes(b"\x89PNG\r\x1a" + bytes(range(128, 256)) * 8), "bad.jsonl:1: not UTF-8"),
    ("T4 of a newer schema", lambda p: p.write_text(json.dumps({"schema_version": "2.0.0", "results": []})),
     "schema_version '2.0.0' is not supported"),
    ("T4 results not a list", lambda p: p.write_text(json.dumps({"schema_version": "1.0.0", "results": {}})),
     "'results' must be an array"),
])
def test_a_bad_file_imports_nothing(store, tmp_path, case, make, words):
    store.commit(SAMPLE[:2])
    make(tmp_path / "bad.jsonl")
    with pytest.raises(DatabaseError) as info:
        import_file(tmp_path / "bad.jsonl", store)
    assert words in info.value.message, info.value.message
    assert store.count() == 2


def _many(n: int) -> list[Record]:
    return [rec(f"gemm_{i:04d}", (1.0 + i / n, 1.0 + i / n), problem=P1 if i % 2 else P2) for i in range(n)]


def test_parallel_parsing_imports_what_one_process_does(store, tmp_path, parallel_parse):
    records = _many(130)
    write_jsonl(tmp_path / "many.jsonl", records)
    assert parallel_parse._workers(130) == 2
    assert import_file(tmp_path / "many.jsonl", store).imported == 130
    with MemoryStore() as alone:
        parallel_parse.PARALLEL_MIN_LINES = 10**9
        import_file(tmp_path / "many.jsonl", alone)
        assert [canonical(r) for r in store.records("gemm")] == [canonical(r) for r in alone.records("gemm")]
    assert all(r.provenance.origin == "import:many.jsonl" for r in store.records("gemm"))


@pytest.mark.parametrize("at", [1, 57, 130])
def test_parallel_parsing_names_the_first_bad_line(store, tmp_path, parallel_parse, at):
    texts = lines(_many(130))
    texts[at - 1] = '{"family": 3}'
    texts.insert(at + 30, "not json")              # a later bad line, in another chunk, is not the one named
    write_lines(tmp_path / "bad.jsonl", texts)
    with pytest.raises(DatabaseError) as info:
        import_file(tmp_path / "bad.jsonl", store)
    assert info.value.fields["line"] == at and f"bad.jsonl:{at}: " in info.value.message
    assert store.count() == 0


def test_chunks_stored_before_a_late_invalid_record_are_rolled_back(store, tmp_path, parallel_parse):
    store.commit(SAMPLE[:2])
    texts = lines(_many(130))
    late = json.loads(texts[3])
    late["times_ms"], late["time_ms"] = [1e-6], 1e-6          # faster than any GPU
    late["provenance"]["created"] = "2026-01-01T00:00:00Z"
    texts.append(json.dumps(late, sort_keys=True))            # line 131, six chunks later
    write_lines(tmp_path / "late.jsonl", texts)
    with pytest.raises(DatabaseError, match="late.jsonl:131: time 1e-06 ms is faster than any GPU") as info:
        import_file(tmp_path / "late.jsonl", store)
    assert "--skip-invalid" in info.value.remedy
    assert store.count() == 2
    texts[-1] = texts[3]                                      # a line repeated: one record
    write_lines(tmp_path / "ok.jsonl", texts)
    report = import_file(tmp_path / "ok.jsonl", store)
    assert (report.read, report.imported, report.skipped, report.conflicts) == (131, 130, 1, 0)
    assert import_file(tmp_path / "ok.jsonl", store).skipped == 131


def test_parallel_parsing_sees_a_truncated_last_line(store, tmp_path, parallel_parse):
    body = "".join(t + "\n" for t in lines(_many(60))).encode()[:-40]
    (tmp_path / "cut.jsonl").write_bytes(body)
    with pytest.raises(DatabaseError, match="cut.jsonl:60: the last line is cut short"):
        import_file(tmp_path / "cut.jsonl", store)
    assert store.count() == 0


def test_workers_are_forked_only_from_a_single_threaded_process():
    import threading

    from kgen.db.lines import _start_method

    if threading.active_count() == 1:
        assert _start_method() == "fork"
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert _start_method() == "spawn"
    finally:
        release.set()
        other.join()


def test_a_broken_worker_pool_falls_back_to_this_process(store, tmp_path, parallel_parse, monkeypatch, caplog):
    import concurrent.futures
    from concurrent.futures.process import BrokenProcessPool

    class BrokenPool:                  # as when __main__ re-runs in a child and fails
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def map(self, *args, **kwargs):
            raise BrokenProcessPool("a child process terminated abruptly")

        def shutdown(self, **kwargs):
            pass

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", BrokenPool)
    write_jsonl(tmp_path / "many.jsonl", _many(50))
    assert import_file(tmp_path / "many.jsonl", store).imported == 50
    assert "KGEN_DB_WORKERS=1" in caplog.text


def test_a_missing_file_is_a_database_error(store, tmp_path):
    with pytest.raises(DatabaseError, match="cannot read"):
        import_file(tmp_path / "nope.jsonl", store)


# ---------------------------------------------------------------- merge

_record = st.builds(
    lambda config, problem, device, created, times, failed: rec(
        config, None if failed else times, problem, device, "compile" if failed else None, created=created),
    st.sampled_from(["gemm_a", "gemm_b", "gemm_c"]), st.sampled_from([P1, P2]),
    st.sampled_from([H200, "NVIDIA A100"]), st.sampled_from(["2025-01-01T00:00:00Z", "2025-02-01T00:00:00Z"]),
    st.lists(st.floats(0.01, 10.0), min_size=1, max_size=3), st.booleans())
_file = st.lists(_record, max_size=8, unique_by=record_key)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=_file, b=_file)
def test_merge_is_commutative_idempotent_and_deterministic(a, b):
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        write_jsonl(d / "a.jsonl", a)
        write_jsonl(d / "b.jsonl", b)
        if not a or not b:
            return
        merge([d / "a.jsonl", d / "b.jsonl"], d / "ab.jsonl")
        merge([d / "b.jsonl", d / "a.jsonl"], d / "ba.jsonl")
        assert (d / "ab.jsonl").read_bytes() == (d / "ba.jsonl").read_bytes()
        merge([d / "ab.jsonl", d / "b.jsonl"], d / "abb.jsonl")
        merge([d / "ab.jsonl"], d / "ab2.jsonl")
        merge([d / "a.jsonl", d / "a.jsonl"], d / "aa.jsonl")
        merge([d / "a.jsonl"], d / "a2.jsonl")
        assert (d / "abb.jsonl").read_bytes() == (d / "ab.jsonl").read_bytes() == (d / "ab2.jsonl").read_bytes()
        assert (d / "aa.jsonl").read_bytes() == (d / "a2.jsonl").read_bytes() == (d / "a.jsonl").read_bytes()
        merged = read_records(d / "ab.jsonl")
        assert {record_key(r) for r in merged} == {record_key(r) for r in a + b}


def test_merge_collapses_identical_and_reports_conflicts(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [rec("gemm_a"), rec("gemm_b")])
    write_jsonl(tmp_path / "b.jsonl", [rec("gemm_a"), rec("gemm_b", (9.0,))])
    report = merge([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], tmp_path / "m.jsonl")
    assert (report.read, report.written, report.duplicates, report.conflicts) == (4, 3, 1, 1)
    kept = read_records(tmp_path / "m.jsonl")
    assert sorted(r.measurement.time_ms for r in kept if r.measurement.config_name == name("gemm_b")) == [1.0, 9.0]


# ---------------------------------------------------------------- T4


def test_t4_round_trip_keeps_config_times_and_failure_kind(tmp_path):
    doc = json.loads(json.dumps(to_t4(SAMPLE)))
    back = from_t4(doc)
    assert lines(back) == lines(SAMPLE)
    first = doc["results"][0]
    assert doc["schema_version"] == "1.0.0"
    assert first["invalidity"] == "correct" and first["times"]["runtimes"] == [0.001] * 3
    assert first["measurements"][0] == {"name": "time", "value": 1.0, "unit": "ms"}
    assert [r["invalidity"] for r in doc["results"]][2:4] == ["compile", "correctness"]
    assert first["kgen"]["problem_key"] == P1 and first["kgen"]["config_name"] == name("gemm_a")

    db = MemoryStore(SAMPLE)
    export(db, tmp_path / "t4.json", fmt="t4")
    export(db, tmp_path / "a.jsonl")
    other = MemoryStore()
    assert import_file(tmp_path / "t4.json", other).imported == len(SAMPLE)
    export(other, tmp_path / "b.jsonl")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def _foreign(*extra) -> dict:
    """A T4 document as another tool writes it: configurations with no kgen name or keys."""
    values = {label: _configs()[label].as_dict() for label in ("gemm_a", "gemm_b", "gemm_c", "gemm_d", "gemm_f")}
    return {"schema_version": "1.0.0", "results": [
        {"configuration": values["gemm_a"], "times": {"runtimes": [0.0012, 0.0011, 0.0013]},
         "invalidity": "correct", "correctness": 1, "tool_specific": {"x": 1}},
        {"configuration": values["gemm_b"], "invalidity": "compile", "correctness": 0},
        {"configuration": values["gemm_c"], "timestamp": "2024-05-01T10:00:00Z",
         "measurements": [{"name": "time", "value": 0.9, "unit": "ms"}], "invalidity": "correct", "correctness": 1},
        {"configuration": values["gemm_d"], "times": {"runtimes": [2.0, 2.2]},        # Kernel Tuner: ms
         "measurements": [{"name": "time", "value": 2.1, "unit": "ms"}], "invalidity": "correct", "correctness": 1},
        {"configuration": values["gemm_f"], "times": {"runtimes": [1.0]}, "correctness": 0},
        *extra]}


def test_a_foreign_t4_file_imports_leniently_and_its_configs_take_the_family_names(tmp_path):
    path = tmp_path / "kt.json"
    path.write_text(json.dumps(_foreign(), indent=2))
    db = MemoryStore()
    report = import_file(path, db, problem_key=P1, device=H200)
    assert report.imported == 5
    got = {r.measurement.config_name: r for r in db.records("gemm")}
    assert sorted(got) == sorted(name(label) for label in ("gemm_a", "gemm_b", "gemm_c", "gemm_d", "gemm_f"))
    assert got[name("gemm_a")].measurement.times_ms == pytest.approx((1.2, 1.1, 1.3))
    assert got[name("gemm_b")].measurement.failure.kind == "compile"
    assert got[name("gemm_c")].measurement.times_ms == (0.9,)
    assert got[name("gemm_c")].provenance.created == "2024-05-01T10:00:00Z"
    assert got[name("gemm_d")].measurement.times_ms == pytest.approx((2.0, 2.2))
    assert got[name("gemm_f")].measurement.failure.kind == "correctness"
    assert db.best("gemm", P1, H200).measurement.config_name == name("gemm_c")


def test_a_foreign_t4_result_that_is_no_config_of_the_family_is_refused_or_skipped(tmp_path):
    path = tmp_path / "kt.json"
    path.write_text(json.dumps(_foreign({"configuration": {"block_size_x": 128}, "times": {"runtimes": [0.001]}})))
    db = MemoryStore()
    with pytest.raises(DatabaseError, match=r"kt.json: results\[5\]: config 't4_\w+' is not one of the family's: "
                                            r"unknown parameter 'block_size_x'; missing parameter 'BM'"):
        import_file(path, db, problem_key=P1, device=H200)
    assert db.count() == 0
    report = import_file(path, db, problem_key=P1, device=H200, skip_invalid=True)
    assert (report.read, report.imported, report.invalid) == (6, 5, 1)
    assert report.examples[0].startswith(f"{path}: results[5]: config 't4_")


def test_a_foreign_t4_file_needs_the_problem_and_device(tmp_path):
    path = tmp_path / "kt.json"
    path.write_text(json.dumps(_foreign()))
    db = MemoryStore()
    with pytest.raises(DatabaseError, match=r"results\[0\]: this result has no kgen keys"):
        import_file(path, db)
    bad = {"schema_version": "1.0.0", "results": [_foreign()["results"][0], {"configuration": {}, "invalidity": "oops"}]}
    path.write_text(json.dumps(bad))
    with pytest.raises(DatabaseError, match=r"results\[1\]: invalidity 'oops'"):
        import_file(path, db, problem_key=P1, device=H200)
    assert db.count() == 0


# ---------------------------------------------------------------- prune, stats


def test_prune_keeps_the_fastest_per_problem(tmp_path):
    db = SqlStore(f"sqlite:///{tmp_path / 'kgen.db'}")
    db.commit([rec(f"gemm_{i}", (float(i + 1),)) for i in range(5)] + [rec("gemm_f", None, failure="runtime")]
              + [rec("gemm_0", (1.0,), problem=P2), rec("gemm_0", (1.0,), digest="d2")])
    assert prune(db, 2) == 4
    assert sorted(r.measurement.config_name for r in db.records("gemm", P1, H200, DIGEST)) == sorted(
        [name("gemm_0"), name("gemm_1")])
    assert db.count() == 4
    with pytest.raises(DatabaseError, match="SQL store"):
        prune(MemoryStore(), 1)
    s = stats(db)
    assert (s["records"], s["problems"], s["devices"], s["failures"]) == (4, 2, [H200], {})
    assert s["file_bytes"] > 0
    db.close()


def test_stats_counts_failures_by_kind():
    s = stats(MemoryStore(SAMPLE))
    assert s["failures"] == {"compile": 1, "correctness": 1}
    assert s["devices"] == ["NVIDIA A100", H200] and s["records"] == 6 and s["problems"] == 2


# ---------------------------------------------------------------- verify


def _imported_and_replay():
    theirs = [rec("gemm_a", (1.0,) * 5, problem=P1), rec("gemm_b", (1.0,) * 5, problem=P2),
              rec("gemm_c", (1.5,) * 5, problem=P2)]
    here = [rec("gemm_a", (1.05,) * 5, problem=P1), rec("gemm_b", (2.0,) * 5, problem=P2),
            rec("gemm_c", (1.6,) * 5, problem=P2)]
    return [with_origin(r, "import:theirs.jsonl") for r in theirs], Recording.from_records(here)


def test_verify_keeps_a_reproduced_config_and_rejects_a_slower_one():
    imported, recording = _imported_and_replay()
    db = MemoryStore(imported)
    verdicts = verify(db, ReplayRunner(recording), Target.h200())
    assert [(v.problem_key, v.config_name, v.verdict) for v in verdicts] == [
        (P1, name("gemm_a"), "verified"), (P2, name("gemm_b"), "rejected")]
    assert verdicts[1].measured_ms == 2.0 and "2.00x" in verdicts[1].detail
    origins = sorted(r.provenance.origin for r in db.records("gemm"))
    assert origins.count("verify:verified") == 1 and origins.count("verify:rejected") == 1
    p1, p2 = db.records("gemm", P1), db.records("gemm", P2)
    assert is_trusted(imported[0], p1) and not is_trusted(imported[1], p2)
    assert db.best("gemm", P2, H200).measurement.config_name == name("gemm_b")    # untrusted, fastest
    assert trusted_best(db, "gemm", P2, H200).provenance.origin == "verify:rejected"   # measured here
    again = verify(db, ReplayRunner(recording), Target.h200())                  # the next imported config
    assert [(v.config_name, v.verdict) for v in again] == [(name("gemm_c"), "verified")]
    assert trusted_best(db, "gemm", P2, H200).measurement.config_name == name("gemm_c")
    assert verify(db, ReplayRunner(recording), Target.h200()) == []


@pytest.mark.gpu
def test_verify_re_measures_shipped_records_on_this_gpu(tmp_path):
    """Two shipped Hopper records (one split-K) imported into a fresh store, then measured here:
    the fastest shipped record of each of two problems (a problem tuned again ships both runs)."""
    from kgen.db import read_jsonl
    from kgen.runners import LocalGPURunner

    shipped = MemoryStore()
    shipped.commit(read_jsonl(Path(__file__).resolve().parents[1] / "tuning_db" / "nvidia-h200_gemm_wgmma.jsonl"))
    wanted = [shipped.best("gemm_wgmma", key, None, policy="any")
              for key in shipped.problems("gemm_wgmma", policy="any")
              if ("|m=1000|" in key or "|m=64|n=4096|" in key) and "dtype=bfloat16" in key]
    assert len(wanted) == 2 and any("_k" in r.measurement.config_name for r in wanted)
    target = Target.detect(0)
    if target.name != "NVIDIA H200":      # verify re-measures this device's imported records: another
        import dataclasses                # Hopper's names them as its own (the configs are the same)

        wanted = [dataclasses.replace(r, provenance=dataclasses.replace(r.provenance, device=target.name))
                  for r in wanted]
    write_jsonl(tmp_path / "two.jsonl", wanted)
    with SqlStore(f"sqlite:///{tmp_path / 'kgen.db'}") as db:
        assert import_file(tmp_path / "two.jsonl", db).imported == 2
        with LocalGPURunner((0,), target.l2_bytes) as runner:
            verdicts = verify(db, runner, target, "gemm_wgmma")
        assert sorted(v.config_name for v in verdicts) == sorted(r.measurement.config_name for r in wanted)
        for v in verdicts:
            assert v.verdict in ("verified", "rejected") and v.measured_ms and v.measured_ms > 0, v
        origins = [r.provenance.origin for r in db.records("gemm_wgmma")]
        assert sum(o.startswith("verify:") for o in origins) == 2


# ---------------------------------------------------------------- the command line


@pytest.fixture()
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


def test_db_commands_share_and_maintain_records(cli, tmp_path):
    write_jsonl(tmp_path / "theirs.jsonl", SAMPLE)
    out = cli("db", "import", tmp_path / "theirs.jsonl")
    assert out.exit_code == 0 and "imported 6 records" in out.output, out.output
    assert "0 records" in cli("db", "import", tmp_path / "theirs.jsonl").output

    stats_out = cli("db", "stats")
    assert stats_out.exit_code == 0 and "compile 1, correctness 1" in stats_out.output and "import 6" in stats_out.output

    assert cli("db", "export", "-o", tmp_path / "mine.jsonl").exit_code == 0
    assert (tmp_path / "mine.jsonl").read_bytes() == (tmp_path / "theirs.jsonl").read_bytes()
    t4 = cli("db", "export", "--format", "t4", "--device", H200, "-o", tmp_path / "mine.json")
    assert t4.exit_code == 0 and "wrote 5 records" in t4.output
    assert json.loads((tmp_path / "mine.json").read_text())["schema_version"] == "1.0.0"

    write_jsonl(tmp_path / "more.jsonl", [rec("gemm_q", (0.1,))])
    merged = cli("db", "merge", tmp_path / "mine.jsonl", tmp_path / "more.jsonl", "-o", tmp_path / "all.jsonl")
    assert merged.exit_code == 0 and "into 7" in merged.output, merged.output

    pruned = cli("db", "prune", "--keep", "1")
    assert pruned.exit_code == 0 and "deleted 3 records" in pruned.output, pruned.output


def test_db_verify_through_the_command_line(cli, tmp_path):
    imported, recording = _imported_and_replay()
    write_jsonl(tmp_path / "theirs.jsonl", imported)
    write_jsonl(tmp_path / "here.jsonl", [r for r in recording_records(recording)])
    assert cli("db", "import", tmp_path / "theirs.jsonl").exit_code == 0
    out = cli("db", "verify", "--replay", tmp_path / "here.jsonl")
    assert out.exit_code == 0 and "verified" in out.output and "rejected" in out.output, out.output


def recording_records(recording: Recording) -> list[Record]:
    return [Record("gemm", m, Provenance(device=H200, cc="9.0", template_digest=DIGEST))
            for m in recording.entries.values()]


@pytest.mark.parametrize("args, words", [
    (["db", "import", "{bad}"], "bad.jsonl:1: not JSON"),
    (["db", "import", "{missing}"], "cannot read"),
    (["db", "import", "{good}", "--format", "csv"], "unknown format"),
    (["db", "export", "-o", "{out}"], "no records match"),
    (["db", "export", "-o", "{out}", "--format", "xml"], "unknown format"),
    (["db", "merge", "{bad}", "-o", "{out}"], "not JSON"),
    (["db", "prune", "--keep", "0"], "must be >= 1"),
])
def test_bad_input_exits_2_with_a_remedy(cli, tmp_path, args, words):
    (tmp_path / "bad.jsonl").write_text("hello\n")
    write_jsonl(tmp_path / "good.jsonl", SAMPLE[:1])
    paths = {"bad": tmp_path / "bad.jsonl", "missing": tmp_path / "missing.jsonl", "good": tmp_path / "good.jsonl",
             "out": tmp_path / "out.jsonl"}
    result = cli(*[a.format(**paths) for a in args])
    assert result.exit_code == 2, result.output
    assert words in result.output and "remedy" in result.output
    assert not (tmp_path / "out.jsonl").exists()


def test_stats_agree_between_sql_and_memory(tmp_path):
    records = SAMPLE + [with_origin(rec("gemm_v", created="2025-04-01T00:00:00Z"), "verify:verified"),
                        with_origin(rec("gemm_i", created="2025-04-01T00:00:00Z"), "import:x.jsonl")]
    db = SqlStore(f"sqlite:///{tmp_path / 'kgen.db'}")
    db.commit(records)
    sql, mem = stats(db), stats(MemoryStore(records))
    assert {**sql, "file_bytes": None} == mem
    assert mem["origins"] == {"import": 1, "local": 6, "verify": 1}
    db.close()
