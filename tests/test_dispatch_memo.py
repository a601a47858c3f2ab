"""The dispatch memo: a new process's first call of a tuned problem skips the database, the
template and the compiler, and never outlives a change to the database files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import kgen.dispatch as dispatch_module
from kgen import dispatch_memo
from kgen.db import SqlStore
from kgen.dispatch import Dispatcher
from kgen.kernels.gemm.simt import GemmSimt
from kgen.kernels.gemm.problem import gemm_problem
from kgen.measurement import Measurement, Provenance, Record
from kgen.problem import Target

from fakes import FakeLauncher

SPEC = GemmSimt()
TARGET = Target.h200()
PROBLEM = gemm_problem(256, 256, 256, "float32", "NN")


def _store_tuned(rank: int, ms: float) -> str:
    """Commit a measurement of the rank-th valid config into the default database."""
    config = SPEC.space(PROBLEM, TARGET).configs()[rank]
    prov = Provenance(device=TARGET.name, cc="9.0", template_digest=SPEC.template_digest())
    db = SqlStore.default()
    try:
        db.commit([Record("gemm", Measurement(config.name, config.as_dict(), PROBLEM.key, times_ms=(ms,) * 5),
                          prov)])
    finally:
        db.close()
    return config.name


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty KGEN_HOME and cache, the device check passing, no shipped records."""
    monkeypatch.setenv("KGEN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    monkeypatch.setattr(dispatch_module, "_same_device", lambda target, device: target.name == TARGET.name)
    return tmp_path


def _new_process_dispatcher() -> tuple[Dispatcher, FakeLauncher]:
    launcher = FakeLauncher()
    return Dispatcher(launcher=launcher), launcher


def _no_full_path(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the full path ran: render/compile/database")

    monkeypatch.setattr(dispatch_module, "render", refuse)
    monkeypatch.setattr(dispatch_module, "compile_source", refuse)
    monkeypatch.setattr(Dispatcher, "db", property(refuse))


def test_second_process_dispatches_from_the_memo_without_database_or_compiler(fresh, monkeypatch):
    best = _store_tuned(3, 0.05)
    first, _ = _new_process_dispatcher()
    first._targets[0] = TARGET
    loaded = first.prepare(SPEC, PROBLEM, 0)
    assert loaded.choice.how == "tuned" and loaded.choice.config.name == best
    assert dispatch_memo.memo_path().is_file()

    _no_full_path(monkeypatch)
    second, launcher = _new_process_dispatcher()
    again = second.prepare(SPEC, PROBLEM, 0)
    assert again.choice.how == "tuned" and again.choice.config == loaded.choice.config
    assert launcher.kernels[0].entry == best
    assert second.target(0) == TARGET     # the remembered device description, no detection


def test_a_changed_database_invalidates_the_memo(fresh, monkeypatch):
    _store_tuned(3, 0.05)
    first, _ = _new_process_dispatcher()
    first._targets[0] = TARGET
    first.prepare(SPEC, PROBLEM, 0)
    faster = _store_tuned(5, 0.01)            # another process tunes further
    second, _ = _new_process_dispatcher()
    second._targets[0] = TARGET
    loaded = second.prepare(SPEC, PROBLEM, 0)
    assert loaded.choice.config.name == faster


@pytest.mark.parametrize("why", ["knob_off", "other_device", "cubin_gone", "server_team_db", "corrupt"])
def test_memo_is_not_used_when_it_cannot_vouch(fresh, monkeypatch, why):
    _store_tuned(3, 0.05)
    first, _ = _new_process_dispatcher()
    first._targets[0] = TARGET
    cubin = first.prepare(SPEC, PROBLEM, 0).kernel.binary.path
    if why == "knob_off":
        monkeypatch.setenv("KGEN_DISPATCH_MEMO", "0")
    elif why == "other_device":
        monkeypatch.setattr(dispatch_module, "_same_device", lambda target, device: False)
    elif why == "cubin_gone":
        Path(cubin).unlink()
    elif why == "server_team_db":
        monkeypatch.setenv("KGEN_TEAM_DB_URL", "postgresql+psycopg://u:p@db.invalid/kgen")
        assert dispatch_memo.database_fingerprint() is None
        return
    else:
        dispatch_memo.memo_path().write_text("{not json")
    calls = []
    monkeypatch.setattr(dispatch_module, "render", lambda *a, **k: calls.append(1) or _render(*a, **k))
    second, _ = _new_process_dispatcher()
    second._targets[0] = TARGET
    assert second.prepare(SPEC, PROBLEM, 0).choice.how == "tuned"
    assert calls == [1]


_render = dispatch_module.render


def test_untuned_choices_are_not_remembered(fresh):
    d, _ = _new_process_dispatcher()
    d._targets[0] = TARGET
    assert d.prepare(SPEC, PROBLEM, 0).choice.how == "model"
    key = dispatch_memo.memo_key(SPEC.family, PROBLEM.key, 0, SPEC.template_digest())
    assert key not in dispatch_memo._read()


def test_an_explicit_database_is_never_vouched_for_by_the_memo(fresh):
    from kgen.db import MemoryStore

    d = Dispatcher(db=MemoryStore(), launcher=FakeLauncher(), targets={0: TARGET})
    assert d._from_memo(SPEC, PROBLEM, 0) is None


def test_import_kgen_loads_neither_sqlalchemy_nor_jinja():
    code = "import sys, kgen; print(sorted(m for m in ('sqlalchemy', 'jinja2', 'optuna') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parent.parent).stdout
    assert out.strip() == "[]"


def test_the_fingerprint_sees_every_shipped_file_and_each_change(fresh, monkeypatch, tmp_path):
    """Every ``*.jsonl`` under the shipped folder, a subfolder's included (as the shipped store
    reads them): a new file, an edit and a removal each change the fingerprint."""
    import kgen.render

    root = tmp_path / "data"
    (root / "tuning_db" / "more").mkdir(parents=True)
    (root / "tuning_db" / "a.jsonl").write_text("{}\n")
    (root / "tuning_db" / "notes.txt").write_text("not a record file\n")
    monkeypatch.setattr(kgen.render, "data_root", lambda: root)
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "1")
    seen = [dispatch_memo.database_fingerprint()]
    assert [row[0] for row in seen[0][2:]] == [str(root / "tuning_db" / "a.jsonl")]
    (root / "tuning_db" / "more" / "b.jsonl").write_text("{}\n")
    seen.append(dispatch_memo.database_fingerprint())
    assert str(root / "tuning_db" / "more" / "b.jsonl") in [row[0] for row in seen[1]]
    (root / "tuning_db" / "a.jsonl").write_text("{}\n{}\n")
    seen.append(dispatch_memo.database_fingerprint())
    (root / "tuning_db" / "more" / "b.jsonl").unlink()
    seen.append(dispatch_memo.database_fingerprint())
    assert all(x != y for i, x in enumerate(seen) for y in seen[i + 1:])
    assert seen[-1] == dispatch_memo.database_fingerprint()
