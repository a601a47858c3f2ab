"""Shared records at the door: every record an import, a merge or ``import_records`` reads is
checked against its family (a valid config of its space, a plausible time) and refused with its
file and line, or left out and counted with --skip-invalid; imported records are used by
dispatch only once verified here or imported with --trust; records that share a key follow one
rule in import, merge and commit."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from kgen.cli import app
from kgen.db import MemoryStore, SqlStore, write_jsonl
from kgen.db.base import canonical
from kgen.db.conflicts import same
from kgen.db.exchange import import_file, import_records, merge, read_records, stats
from kgen.db.trust import VERIFIED, trust_state
from kgen.db.validity import Validator
from kgen.dispatch import Dispatcher
from kgen.errors import DatabaseError
from kgen.kernels.gemm.problem import gemm_problem
from kgen.kernels.gemm.simt import GemmSimt
from kgen.measurement import Measurement, Provenance, Record, record_to_dict
from kgen.problem import Target

from fakes import FakeLauncher
from test_db import pg_url  # noqa: F401  (a fresh PostgreSQL schema; skips without KGEN_TEST_PG_URL)

SPEC = GemmSimt()
TARGET = Target.h200()
P = gemm_problem(512, 512, 512)
CONFIGS = SPEC.space(P, TARGET).sample(6, seed=11)


def rec(i: int = 0, ms: float = 0.5, created: str = "2026-01-01T00:00:00+00:00", origin: str = "",
        problem=P, digest: str | None = None) -> Record:
    config = CONFIGS[i]
    m = Measurement(config.name, config.as_dict(), problem.key, times_ms=(ms,) * 5, error=1e-7)
    return Record("gemm", m, Provenance(device=TARGET.name, cc="9.0", created=created, origin=origin,
                                        template_digest=digest or SPEC.template_digest()))


def line(record: Record, **changes) -> str:
    d = record_to_dict(record)
    for path, value in changes.items():
        holder, *parts = path.split("__")
        target = d
        for name in [holder, *parts][:-1]:
            target = target[name]
        target[[holder, *parts][-1]] = value
    if "times_ms" in changes:
        d["time_ms"] = changes["times_ms"][0] if changes["times_ms"] else None
    return json.dumps(d, sort_keys=True)


def _planted(values=None, **changes) -> str:
    config = {**CONFIGS[2].as_dict(), **(values or {})}
    return line(rec(2), config=config, **changes)


PLANTED = {
    "identifier injection": (_planted({"GM": "K"}), "GM='K' is not one of (1, 8)"),
    "macro injection": (_planted({"MINB": "evil_macro"}), "MINB='evil_macro' is not one of"),
    "string for a number": (_planted({"BM": "128"}), "BM='128' is not one of"),
    "invalid tile": (_planted({"BM": 100, "TM": 3}), "BM=100 is not one of"),
    "unknown parameter": (_planted({"EXTRA": 1}), "unknown parameter 'EXTRA'"),
    "a name its values do not give": (_planted(config_name="evil_entry"),
                                      "config_name 'evil_entry' is not the name its values give"),
    "impossible time": (_planted(times_ms=[1e-6] * 5), "faster than any GPU"),
    "family not installed": (_planted(family="nosuchfamily"), "family 'nosuchfamily' is not installed here"),
    "problem of another family": (_planted(problem_key=P.key.replace("gemm|", "gemm_mma|")),
                                  "is not a gemm problem as kgen writes it"),
    "text that is no word in the problem": (_planted(problem_key=P.key.replace("NN", "NN;x")), "is not a word"),
    "a shape of zero": (_planted(problem_key=P.key.replace("|m=512|", "|m=0|")), "m=0 is not an integer >= 1"),
    "a vendor record with parameters": (_planted(provenance__template_digest="vendor"),
                                        "a vendor record is config 'cublas' with no parameters"),
}


@pytest.fixture(params=["sqlite", "memory"])
def store(request, tmp_path):
    db = SqlStore(f"sqlite:///{tmp_path / 'kgen.db'}") if request.param == "sqlite" else MemoryStore()
    yield db
    db.close()


def _write(path, texts):
    path.write_text("".join(t + "\n" for t in texts))
    return path


@pytest.fixture()
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    monkeypatch.setenv("COLUMNS", "250")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


# ---------------------------------------------------------------- checked at the door


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_a_planted_record_is_refused_with_file_and_line_and_nothing_is_stored(store, tmp_path, case):
    text, words = PLANTED[case]
    store.commit([rec(5, created="2025-01-01T00:00:00+00:00")])
    path = _write(tmp_path / "shared.jsonl", [line(rec(0)), line(rec(1)), text, line(rec(3))])
    with pytest.raises(DatabaseError) as info:
        import_file(path, store)
    assert "shared.jsonl:3: " in info.value.message and words in info.value.message, info.value.message
    assert info.value.fields["line"] == 3 and "--skip-invalid" in info.value.remedy
    assert store.count() == 1


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_skip_invalid_leaves_the_planted_record_out_and_counts_it(store, tmp_path, case):
    text, words = PLANTED[case]
    path = _write(tmp_path / "shared.jsonl", [line(rec(0)), line(rec(1)), text, line(rec(3))])
    report = import_file(path, store, skip_invalid=True)
    assert (report.read, report.imported, report.invalid) == (4, 3, 1)
    assert report.examples[0].startswith(f"{path}:3: ") and words in report.examples[0]
    assert "1 invalid records left out" in report.summary()
    assert sorted(r.measurement.config_name for r in store.records("gemm")) == sorted(
        CONFIGS[i].name for i in (0, 1, 3))


def test_a_record_whose_template_changed_since_is_kept_when_valid_and_never_dispatched(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_VENDOR", "0")
    db = SqlStore(f"sqlite:///{tmp_path / 'kgen.db'}")
    path = _write(tmp_path / "old.jsonl", [line(rec(0, digest="0123456789abcdef"), )])
    assert import_file(path, db, trust=True).imported == 1
    assert Dispatcher(db=db, launcher=FakeLauncher(), targets={0: TARGET}).choose(SPEC, P, TARGET).how != "tuned"
    bad = _write(tmp_path / "old_bad.jsonl", [_planted({"GM": "K"}, provenance__template_digest="0123456789abcdef")])
    with pytest.raises(DatabaseError, match="old_bad.jsonl:1: .*GM='K'"):
        import_file(bad, db)


def test_merge_and_import_records_check_records_as_import_does(tmp_path):
    text, words = PLANTED["identifier injection"]
    write_jsonl(tmp_path / "a.jsonl", [rec(0)])
    _write(tmp_path / "b.jsonl", [line(rec(1)), text])
    with pytest.raises(DatabaseError, match=r"b.jsonl:2: .*GM='K'"):
        merge([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], tmp_path / "m.jsonl")
    assert not (tmp_path / "m.jsonl").exists()
    report = merge([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], tmp_path / "m.jsonl", skip_invalid=True)
    assert (report.read, report.written, report.invalid) == (3, 2, 1)
    assert "1 invalid records left out" in report.summary(2, "m.jsonl")

    hostile = dataclasses.replace(rec(1), measurement=dataclasses.replace(
        rec(1).measurement, config={**CONFIGS[1].as_dict(), "GM": "K"}))
    db = MemoryStore()
    with pytest.raises(DatabaseError, match=r"script\[1\]: .*GM='K'"):
        import_records([rec(0), hostile], db, "script")
    assert db.count() == 0
    report = import_records([rec(0), hostile], db, "script", skip_invalid=True)
    assert (report.imported, report.invalid) == (1, 1)
    assert db.records("gemm")[0].provenance.origin == "import:script"


def _many(n: int) -> list[str]:
    return [line(rec(i % 6, created=f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}+00:00")) for i in range(n)]


def test_parallel_workers_check_records_and_name_the_first_invalid_line(store, tmp_path, parallel_parse):
    texts = _many(100)
    texts[56] = PLANTED["invalid tile"][0]
    texts[80] = PLANTED["impossible time"][0]
    path = _write(tmp_path / "many.jsonl", texts)
    with pytest.raises(DatabaseError, match="many.jsonl:57: .*BM=100"):
        import_file(path, store)
    assert store.count() == 0
    report = import_file(path, store, skip_invalid=True)
    assert (report.read, report.imported, report.invalid) == (100, 98, 2)
    assert [e.split(": ")[0] for e in report.examples] == [f"{path}:57", f"{path}:81"]


def _toy_spec():
    from kgen import KernelSpec, Param, Space

    class Toy(KernelSpec):
        family = "toyregistered"
        template_source = "extern \"C\" __global__ void {{ entry }}() {}"
        shape_params = ("n",)

        def space(self, problem, target):
            return Space([Param("BLOCK", (64, 128))], namer=lambda v: f"toy_b{v['BLOCK']}")

    return Toy()


def test_a_family_registered_in_this_process_is_checked_even_where_workers_are_spawned(tmp_path, parallel_parse):
    from kgen import registry

    spec = registry.register(_toy_spec())
    try:
        assert registry.registered_in_process()
        texts = []
        for i in range(60):
            block = (64, 128)[i % 2]
            m = Measurement(f"toy_b{block}", {"BLOCK": block}, f"toyregistered|n={1000 + i}", times_ms=(0.01,))
            r = Record("toyregistered", m, Provenance(device=TARGET.name, cc="9.0", template_digest=spec.template_digest()))
            texts.append(json.dumps(record_to_dict(r), sort_keys=True))
        texts.append(texts[0].replace('"BLOCK": 64', '"BLOCK": 32'))
        path = _write(tmp_path / "toy.jsonl", texts)
        report = import_file(path, MemoryStore(), skip_invalid=True)
        assert (report.imported, report.invalid) == (60, 1) and "BLOCK=32" in report.examples[0]
    finally:
        registry._REGISTRY.pop("toyregistered", None)
        registry._REGISTERED.discard("toyregistered")


def test_checking_leaves_the_family_as_it_was():
    """gemm_wgmma keeps the SM count of the last space it built for its launch grid: a check,
    made for an H200-shaped target, must not change it for the device in use."""
    from kgen.registry import get_spec

    spec = get_spec("gemm_wgmma")
    before = spec.sm_count
    spec.sm_count = 114
    try:
        from kgen.kernels.gemm.route import gemm_request

        (wg, problem), _ = gemm_request("gemm", 4096, 4096, 4096, "bfloat16", "NN", TARGET)
        assert wg.family == "gemm_wgmma"
        config = wg.space(problem, dataclasses.replace(TARGET, sm_count=114)).sample(1, seed=1)[0]
        why = Validator().why("gemm_wgmma", problem.key, config.name, config.as_dict(), 1.0, TARGET.name, "9.0", "d")
        assert why is None and spec.sm_count == 114
    finally:
        spec.sm_count = before


# ---------------------------------------------------------------- trust


def _choose(db):
    return Dispatcher(db=db, launcher=FakeLauncher(), targets={0: TARGET}).choose(SPEC, P, TARGET)


def test_dispatch_uses_an_import_once_verified_or_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_VENDOR", "0")
    monkeypatch.delenv("KGEN_VERIFIED_ONLY", raising=False)
    path = tmp_path / "theirs.jsonl"
    write_jsonl(path, [rec(0, 0.5)])

    plain = SqlStore(f"sqlite:///{tmp_path / 'plain.db'}")
    import_file(path, plain)
    imported = plain.records("gemm")[0]
    assert imported.provenance.origin == "import:theirs.jsonl"
    assert trust_state(imported, [imported]) == "unverified" and _choose(plain).how != "tuned"
    verdict = dataclasses.replace(imported, provenance=dataclasses.replace(
        imported.provenance, origin=VERIFIED, created="2026-02-01T00:00:00+00:00"))
    plain.commit([verdict])
    assert trust_state(imported, plain.records("gemm")) == "verified"
    choice = _choose(plain)
    assert choice.how == "tuned" and choice.config.name == CONFIGS[0].name

    trusted = SqlStore(f"sqlite:///{tmp_path / 'trusted.db'}")
    report = import_file(path, trusted, trust=True)
    assert report.trusted and "trusted: dispatch uses them now" in report.summary()
    record = trusted.records("gemm")[0]
    assert record.provenance.origin == "trusted:theirs.jsonl" and trust_state(record, [record]) == "trusted"
    assert _choose(trusted).how == "tuned"
    assert stats(trusted)["origins"] == {"trusted": 1}

    monkeypatch.setenv("KGEN_VERIFIED_ONLY", "0")                  # the old behaviour, asked for
    other = MemoryStore()
    import_file(path, other)
    assert _choose(other).how == "tuned"


def test_a_file_name_cannot_make_its_records_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_VENDOR", "0")
    path = tmp_path / "x.jsonl:trusted"
    write_jsonl(path, [rec(0)])
    db = MemoryStore()
    import_file(path, db)
    assert db.records("gemm")[0].provenance.origin == "import:x.jsonl:trusted"
    assert _choose(db).how != "tuned"


def test_of_conflicting_imported_times_the_verified_one_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_VENDOR", "0")
    honest, invented = rec(0, 0.5), rec(0, 0.05)              # same key: a second time for the same config
    write_jsonl(tmp_path / "a.jsonl", [honest])
    write_jsonl(tmp_path / "b.jsonl", [invented])
    db = SqlStore(f"sqlite:///{tmp_path / 'kgen.db'}")
    import_file(tmp_path / "a.jsonl", db)
    report = import_file(tmp_path / "b.jsonl", db)
    assert (report.imported, report.conflicts) == (1, 1) and "1 conflicting records kept" in report.summary()
    here = dataclasses.replace(honest, provenance=dataclasses.replace(honest.provenance, origin=VERIFIED,
                                                                     created="2026-02-01T00:00:00+00:00"))
    db.commit([dataclasses.replace(here, measurement=dataclasses.replace(here.measurement, times_ms=(0.52,) * 5))])
    assert db.best("gemm", P.key, TARGET.name).measurement.time_ms == 0.05          # the invented one is fastest
    choice = _choose(db)
    assert choice.how == "tuned" and choice.time_ms == 0.5                            # the verified one wins


def test_db_ls_shows_whether_the_best_is_trusted(cli, tmp_path):
    write_jsonl(tmp_path / "theirs.jsonl", [rec(0)])
    out = cli("db", "import", tmp_path / "theirs.jsonl")
    assert out.exit_code == 0 and "once `kgen db verify` confirms them" in out.output, out.output
    listing = cli("db", "ls")
    assert listing.exit_code == 0 and "trust" in listing.output and "unverified" in listing.output, listing.output
    write_jsonl(tmp_path / "mine.jsonl", [rec(1, 0.1)])
    assert cli("db", "import", "--trust", tmp_path / "mine.jsonl").exit_code == 0
    listing = cli("db", "ls")
    assert "trusted" in listing.output and "unverified" not in listing.output, listing.output


def test_the_command_line_refuses_or_skips_invalid_records(cli, tmp_path):
    path = _write(tmp_path / "shared.jsonl", [line(rec(0)), PLANTED["identifier injection"][0]])
    out = cli("db", "import", path)
    assert out.exit_code == 2 and "shared.jsonl:2:" in out.output and "--skip-invalid" in out.output, out.output
    out = cli("db", "import", "--skip-invalid", path)
    assert out.exit_code == 0 and "imported 1 records" in out.output and "1 invalid records left out" in out.output
    assert "shared.jsonl:2: config" in out.output, out.output
    out = cli("db", "merge", path, "-o", tmp_path / "m.jsonl")
    assert out.exit_code == 2 and "shared.jsonl:2:" in out.output
    out = cli("db", "merge", "--skip-invalid", path, "-o", tmp_path / "m.jsonl")
    assert out.exit_code == 0 and "into 1 in" in out.output and "1 invalid records left out" in out.output


# ---------------------------------------------------------------- one rule for conflicts


def _texts(records) -> list:
    """Records' texts, origin aside, as a sorted list of parsed objects."""
    out = []
    for r in records:
        d = json.loads(canonical(r))
        d["provenance"].pop("origin", None)
        out.append(json.dumps(d, sort_keys=True))
    return sorted(out)


def test_import_merge_and_commit_follow_one_rule_for_a_shared_key(tmp_path):
    """Held: A. Coming: A again (another origin), A' (A's key, another time), B (new).
    Everywhere: A once, A' kept beside it and counted as a conflict, B stored."""
    a, a2, b = rec(0, 0.5, origin="verify:verified"), rec(0, 0.7), rec(1, 0.6)
    coming = [dataclasses.replace(a, provenance=dataclasses.replace(a.provenance, origin="import:old.jsonl")), a2, b]
    expected = _texts([a, a2, b])
    write_jsonl(tmp_path / "held.jsonl", [a])
    write_jsonl(tmp_path / "coming.jsonl", coming)

    outcomes = {}
    for kind in ("sqlite", "memory"):
        db = SqlStore(f"sqlite:///{tmp_path / 'import.db'}") if kind == "sqlite" else MemoryStore()
        db.commit([a])
        report = import_file(tmp_path / "coming.jsonl", db)
        outcomes[f"import into {kind}"] = ((report.imported, report.skipped, report.conflicts), db.records("gemm"))

        db = SqlStore(f"sqlite:///{tmp_path / 'records.db'}") if kind == "sqlite" else MemoryStore()
        db.commit([a])
        report = import_records(coming, db)
        outcomes[f"import_records into {kind}"] = ((report.imported, report.skipped, report.conflicts),
                                                   db.records("gemm"))

        db = SqlStore(f"sqlite:///{tmp_path / 'commit.db'}") if kind == "sqlite" else MemoryStore()
        db.commit([a])
        written = db.commit(coming)
        outcomes[f"commit into {kind}"] = ((written, len(coming) - written, None), db.records("gemm"))

    report = merge([tmp_path / "held.jsonl", tmp_path / "coming.jsonl"], tmp_path / "merged.jsonl")
    outcomes["merge"] = ((report.written - 1, report.duplicates, report.conflicts), read_records(tmp_path / "merged.jsonl"))

    for what, (counts, records) in outcomes.items():
        assert counts[:2] == (2, 1) and counts[2] in (1, None), (what, counts)
        assert _texts(records) == expected, what
    assert same(canonical(a), canonical(coming[0])) and not same(canonical(a), canonical(a2))


def test_importing_a_file_twice_stores_it_once(store, tmp_path):
    write_jsonl(tmp_path / "x.jsonl", [rec(i) for i in range(4)])
    assert import_file(tmp_path / "x.jsonl", store).imported == 4
    again = import_file(tmp_path / "x.jsonl", store, trust=True)
    assert (again.imported, again.skipped, again.conflicts, store.count()) == (0, 4, 0, 4)


# ---------------------------------------------------------------- the shipped records


def test_every_shipped_file_imports_whole_into_a_fresh_sqlite_database(tmp_path):
    from kgen.render import data_root

    for path in sorted((data_root() / "tuning_db").glob("*.jsonl")):
        with SqlStore(f"sqlite:///{tmp_path / (path.stem + '.db')}") as db:
            report = import_file(path, db)
            lines = sum(1 for text in path.read_text().splitlines() if text.strip())
            assert (report.imported, report.invalid, report.conflicts) == (lines, 0, 0), path.name


def test_the_conflict_rule_on_postgresql(pg_url, tmp_path):  # noqa: F811
    a, a2, b = rec(0, 0.5), rec(0, 0.7), rec(1, 0.6)
    write_jsonl(tmp_path / "coming.jsonl", [a, a2, b])
    with SqlStore(pg_url) as db:
        assert db.commit([a, a]) == 1
        report = import_file(tmp_path / "coming.jsonl", db)
        assert (report.imported, report.skipped, report.conflicts) == (2, 1, 1)
        assert _texts(db.records("gemm")) == _texts([a, a2, b])
        assert db.commit([a2, b]) == 0
        assert import_file(tmp_path / "coming.jsonl", db, trust=True).now_trusted == 2     # a2 and b
        assert sorted(r.provenance.origin for r in db.records("gemm")) == ["", "trusted:coming.jsonl",
                                                                           "trusted:coming.jsonl"]


def test_importing_again_with_trust_makes_the_held_imports_trusted(store, tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_VENDOR", "0")
    write_jsonl(tmp_path / "theirs.jsonl", [rec(0, 0.5), rec(1, 0.6)])
    import_file(tmp_path / "theirs.jsonl", store)
    assert _choose(store).how != "tuned"
    again = import_file(tmp_path / "theirs.jsonl", store, trust=True)
    assert (again.imported, again.skipped, again.now_trusted) == (0, 2, 2)
    assert "2 already stored, 2 of them now trusted" in again.summary()
    assert sorted(r.provenance.origin for r in store.records("gemm")) == ["trusted:theirs.jsonl"] * 2
    assert store.count() == 2 and _choose(store).how == "tuned"
    once_more = import_file(tmp_path / "theirs.jsonl", store)          # without --trust: trust stays
    assert (once_more.skipped, once_more.now_trusted) == (2, 0)
    assert sorted(r.provenance.origin for r in store.records("gemm")) == ["trusted:theirs.jsonl"] * 2


def test_a_commit_holding_an_import_and_its_trusted_copy_keeps_one_trusted_record(store):
    plain, trusted = rec(0, origin="import:a.jsonl"), rec(0, origin="trusted:a.jsonl")
    assert store.commit([plain, trusted]) == 1
    assert [r.provenance.origin for r in store.records("gemm")] == ["trusted:a.jsonl"]
