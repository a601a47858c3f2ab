"""The vendor library (cuBLAS) as a candidate of the GEMM families, with no GPU: measured in a
tune and stored as config ``cublas`` with vendor provenance, listed by ``kgen db ls``, chosen
by dispatch where it is faster or the problem is untuned, never with KGEN_VENDOR=0; and a
process's cached choices dropped when another process writes the database."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import Future

import pytest
from typer.testing import CliRunner

from kgen.cli import app
from kgen.db import MemoryStore
from kgen.dispatch import Dispatcher
from kgen.kernels.gemm.simt import GemmSimt
from kgen.kernels.gemm.problem import gemm_problem
from kgen.kernels.gemm.problem import tc_problem
from kgen.measurement import Measurement, Provenance, Record
from kgen.problem import Target
from kgen.runners.base import Runner
from kgen.search import tune
from kgen.registry import get_spec
from kgen.vendor import VENDOR_CONFIG, VENDOR_DIGEST, is_vendor_record

from fakes import FakeLauncher

SPEC = GemmSimt()
TARGET = Target.h200()
P = gemm_problem(1000, 1000, 1000)
VENDOR_MS = 0.5


class ScriptedGPU(Runner):
    """Every config in 1 + (name length mod 7) ms, the vendor candidate in VENDOR_MS."""

    needs_binaries = False
    slots = 2

    def __init__(self):
        self.vendor_tasks = 0

    def submit(self, task):
        fut: Future = Future()
        if task.baseline:
            self.vendor_tasks += 1
            ms = VENDOR_MS
        else:
            ms = 1.0 + len(task.config.name) % 7
        fut.set_result(Measurement(config_name=task.config.name, config=task.config.as_dict(),
                                   problem_key=task.problem.key, times_ms=(ms,) * 5))
        return fut


def _record(spec, problem, name: str, config: dict, ms: float, digest: str) -> Record:
    m = Measurement(config_name=name, config=config, problem_key=problem.key, times_ms=(ms,) * 5)
    return Record(spec.family, m, Provenance(device=TARGET.name, cc="9.0", template_digest=digest))


def _tuned(spec, problem, ms: float) -> Record:
    config = spec.default_config(problem, TARGET)
    return _record(spec, problem, config.name, config.as_dict(), ms, spec.template_digest())


def _vendor(spec, problem, ms: float) -> Record:
    return _record(spec, problem, VENDOR_CONFIG, {}, ms, VENDOR_DIGEST)


@pytest.fixture
def vendor_on(monkeypatch):
    monkeypatch.setenv("KGEN_VENDOR", "1")


def test_a_tune_measures_the_vendor_candidate_once_and_stores_it_as_vendor(vendor_on):
    db, gpu = MemoryStore(), ScriptedGPU()
    result = tune(SPEC, P, TARGET, gpu, db, trials=6, sampler="random", seed=1)
    assert result.vendor is not None and result.vendor.time_ms == VENDOR_MS
    vendor = [r for r in db.records(SPEC.family, P.key) if is_vendor_record(r)]
    assert [r.measurement.config_name for r in vendor] == [VENDOR_CONFIG]
    assert vendor[0].provenance.origin.startswith("vendor:") and vendor[0].provenance.device == TARGET.name
    assert result.best.config_name != VENDOR_CONFIG          # the tune's best is a generated kernel
    again = tune(SPEC, P, TARGET, gpu, db, trials=8, sampler="random", seed=2)
    assert gpu.vendor_tasks == 1 and again.vendor.time_ms == VENDOR_MS     # stored, not measured again


def test_with_the_vendor_off_a_tune_neither_measures_nor_stores_it(monkeypatch):
    monkeypatch.setenv("KGEN_VENDOR", "0")
    db, gpu = MemoryStore(), ScriptedGPU()
    result = tune(SPEC, P, TARGET, gpu, db, trials=4, sampler="random", seed=1)
    assert result.vendor is None and gpu.vendor_tasks == 0
    assert not any(is_vendor_record(r) for r in db.records(SPEC.family))


@pytest.mark.parametrize("vendor_ms, expected", [(0.5, "vendor"), (2.0, "tuned")])
def test_dispatch_takes_the_faster_of_the_tuned_kernel_and_the_vendor(vendor_on, vendor_ms, expected):
    db = MemoryStore()
    db.commit([_tuned(SPEC, P, 1.0), _vendor(SPEC, P, vendor_ms)])
    choice = Dispatcher(db=db, launcher=FakeLauncher(), targets={0: TARGET}).choose(SPEC, P, TARGET)
    assert choice.how == expected and choice.vendor == (expected == "vendor")


@pytest.mark.parametrize("margin, tuned_ms, expected", [(None, 0.98, "vendor"), (None, 0.96, "tuned"),
                                                       ("0", 0.98, "tuned"), ("0.1", 0.92, "vendor")])
def test_a_generated_kernel_replaces_the_vendor_only_when_faster_by_the_margin(vendor_on, monkeypatch, margin,
                                                                               tuned_ms, expected):
    if margin is not None:
        monkeypatch.setenv("KGEN_VENDOR_MARGIN", margin)
    db = MemoryStore()
    db.commit([_tuned(SPEC, P, tuned_ms), _vendor(SPEC, P, 1.0)])
    choice = Dispatcher(db=db, launcher=FakeLauncher(), targets={0: TARGET}).choose(SPEC, P, TARGET)
    assert choice.how == expected


def test_dispatch_with_the_vendor_off_never_chooses_it(monkeypatch):
    monkeypatch.setenv("KGEN_VENDOR", "0")
    db = MemoryStore()
    db.commit([_tuned(SPEC, P, 1.0), _vendor(SPEC, P, 0.1)])
    dispatcher = Dispatcher(db=db, launcher=FakeLauncher(), targets={0: TARGET})
    assert dispatcher.choose(SPEC, P, TARGET).how == "tuned"
    untuned = gemm_problem(777, 555, 333)
    choice = dispatcher.choose(SPEC, untuned, TARGET)
    assert choice.how == "model" and not choice.vendor and choice.predicted_ms > 0


def test_an_untuned_problem_goes_to_the_vendor_and_its_kernel_is_never_compiled(vendor_on):
    launcher = FakeLauncher()
    dispatcher = Dispatcher(db=MemoryStore(), launcher=launcher, targets={0: TARGET})
    loaded = dispatcher.prepare(SPEC, gemm_problem(777, 555, 333), 0)
    assert loaded.choice.vendor and loaded.choice.how == "vendor" and loaded.kernel is None
    assert launcher.kernels == []


def test_tensor_core_families_rank_the_models_picks_by_predicted_time(monkeypatch):
    """Where neither family is tuned, the family whose pick the model predicts faster wins."""
    monkeypatch.setenv("KGEN_VENDOR", "0")
    dispatcher = Dispatcher(db=MemoryStore(), launcher=FakeLauncher(), targets={0: TARGET})
    choices = {f: dispatcher.choose(get_spec(f), tc_problem(f, 4096, 4096, 4096, "bfloat16", "NN"), TARGET)
               for f in ("gemm_wgmma", "gemm_mma")}
    assert all(c.how == "model" for c in choices.values())
    assert choices["gemm_wgmma"].rank < choices["gemm_mma"].rank     # wgmma is Hopper's faster unit


def test_db_ls_lists_the_vendor_time_beside_the_best_generated_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    monkeypatch.setenv("COLUMNS", "250")
    from kgen.db import open_default

    tuned = _tuned(SPEC, P, 1.0)
    with open_default() as db:
        db.commit([tuned, _vendor(SPEC, P, 0.25)])
    out = CliRunner().invoke(app, ["db", "ls"])
    assert out.exit_code == 0, out.output
    line = next(line for line in out.output.splitlines() if "NVIDIA H200" in line)
    assert tuned.measurement.config_name in line and "0.2500" in line and "1.0000" in line
    shown = CliRunner().invoke(app, ["db", "show", P.key])
    assert shown.exit_code == 0 and VENDOR_CONFIG in shown.output


def test_a_record_another_process_writes_reaches_the_next_call(tmp_path, monkeypatch):
    """The watcher sees the SQLite files change and drops the cached choice (KGEN_REFRESH_S)."""
    home = tmp_path / "home"
    monkeypatch.setenv("KGEN_HOME", str(home))
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    monkeypatch.setenv("KGEN_VENDOR", "0")
    monkeypatch.setenv("KGEN_REFRESH_S", "0.1")
    monkeypatch.setenv("KGEN_DISPATCH_MEMO", "0")
    problem = gemm_problem(96, 80, 64)
    dispatcher = Dispatcher(launcher=FakeLauncher(), targets={0: TARGET})    # the default database
    first = dispatcher.prepare(SPEC, problem, 0)
    assert first.choice.how == "model"
    writer = textwrap.dedent(f"""
        from kgen.db import open_default
        from kgen.kernels.gemm.simt import GemmSimt
        from kgen.kernels.gemm.problem import gemm_problem
        from kgen.measurement import Measurement, Provenance, Record
        from kgen.problem import Target
        spec, target = GemmSimt(), Target.h200()
        p = gemm_problem(96, 80, 64)
        config = spec.space(p, target).configs()[3]
        m = Measurement(config_name=config.name, config=config.as_dict(), problem_key=p.key, times_ms=(0.01,) * 5)
        with open_default() as db:
            db.commit([Record(spec.family, m, Provenance(device=target.name, cc="9.0",
                                                         template_digest=spec.template_digest()))])
        print(config.name)
    """)
    done = subprocess.run([sys.executable, "-c", writer], env=dict(os.environ), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    written = done.stdout.strip()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        now = dispatcher.prepare(SPEC, problem, 0)
        if now.choice.how == "tuned":
            break
        time.sleep(0.05)
    assert now.choice.how == "tuned" and now.choice.config.name == written
