"""A tune of a `gemm` request measures the other families' first configs too
(``KernelSpec.rivals``, ``kgen.search.measure_rivals``), so that dispatch compares measured
times across families instead of one family's measured best against the others' predictions."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

import kgen
from kgen.db import MemoryStore
from kgen.measurement import Measurement
from kgen.problem import Target
from kgen.registry import get_spec
from kgen.runners.base import Runner
from kgen.search import measure_rivals, tune

from fakes import BASE, FakeArray, fake_dispatch

H200 = Target.h200()
# an sm_80 device: the portable families run everything without a driver (see test_tc_dispatch)
A100 = Target(name="NVIDIA A100-SXM4-80GB", cc=(8, 0), sm_count=108, smem_per_block=48 * 1024,
              smem_per_block_optin=163 * 1024, smem_per_sm=164 * 1024)


class FamilyTimes(Runner):
    """Every config of a family in that family's milliseconds (the vendor candidate: 1 ms); what
    it measured, in order."""

    needs_binaries = False
    slots = 1

    def __init__(self, ms_by_family: dict[str, float], measurable=None):
        self.ms, self.tasks, self._measurable = ms_by_family, [], measurable

    def measurable(self, problem_key: str):
        return self._measurable

    def submit(self, task):
        self.tasks.append(task)
        ms = 1.0 if task.baseline else self.ms[task.problem.family]
        fut: Future = Future()
        fut.set_result(Measurement(config_name=task.config.name, config=task.config.as_dict(),
                                   problem_key=task.problem.key, times_ms=(ms,) * 5))
        return fut


def _families(pairs) -> list[str]:
    return sorted(spec.family for spec, _ in pairs)


def test_a_gemm_request_names_every_other_family_that_runs_it():
    gemm = get_spec("gemm")
    for request, rivals in [
        (dict(m=6992, n=31, k=88, dtype="bfloat16", layout="TN"), {"gemm_wgmma", "gemm_mma"}),
        (dict(m=28, n=1, k=14656, dtype="bfloat16", layout="NN"), {"gemm_wgmma", "gemm_mma", "gemm_skinny"}),
        (dict(m=64, n=4096, k=4096, dtype="float32", layout="NT", precision="tf32"), {"gemm_wgmma", "gemm_mma"}),
    ]:
        chosen, _ = gemm.request(H200, **request)
        found = _families(gemm.rivals(H200, **request))
        assert chosen.family not in found and set(found) | {chosen.family} == rivals, (request, found)
    # float32 on the CUDA cores: the family computing float32 exactly takes a small side, else none
    assert _families(gemm.rivals(H200, m=4, n=256, k=176, dtype="float32", layout="NN")) == ["gemm_skinny"]
    assert gemm.rivals(H200, m=1000, n=1000, k=1000, dtype="float32", layout="NN") == []
    # a request naming one family searches that family alone
    assert get_spec("gemm_wgmma").rivals(H200, m=6992, n=31, k=88, dtype="bfloat16", layout="TN") == []


def test_the_rivals_first_configs_are_their_model_picks_measured_once(monkeypatch):
    monkeypatch.setenv("KGEN_VENDOR", "0")
    request = dict(m=6992, n=31, k=88, dtype="bfloat16", layout="TN")
    rivals = get_spec("gemm").rivals(H200, **request)
    db, gpu = MemoryStore(), FamilyTimes({"gemm_wgmma": 0.02, "gemm_mma": 0.01})
    results = measure_rivals(rivals, H200, gpu, db, trials=2)
    assert [r.problem for r in results] == [spec.record_problem(p) for spec, p in rivals]
    for (spec, problem), result in zip(rivals, results):
        names = [m.config_name for m in result.trials]
        picks = [c.name for c in spec.model_picks(problem, H200, 2)] if hasattr(spec, "model_picks") else []
        assert len(names) == 2 and (not picks or names[0] == picks[0]), (names, picks)
        assert len(db.records(spec.family, problem.key)) == 2
    measured = len(gpu.tasks)
    measure_rivals(rivals, H200, gpu, db, trials=2)
    assert len(gpu.tasks) == measured                  # stored configs count: nothing measured again
    assert measure_rivals(rivals, H200, FamilyTimes({}, measurable={}), db, trials=2) == []   # a replay without them


def test_a_faster_rival_measured_by_the_tune_is_what_dispatch_runs(monkeypatch):
    """float16 with a side of 8 on sm_80: the request's tune searches gemm_mma (gemm_skinny's
    picks are no float16 candidate on a ranking alone); gemm_skinny measured faster beside it is
    what dispatch then runs, with no race (KGEN_RACE=0) as with one."""
    monkeypatch.setenv("KGEN_VENDOR", "0")
    monkeypatch.setenv("KGEN_RACE", "0")
    monkeypatch.delenv("KGEN_SKINNY_DTYPES", raising=False)
    request = dict(m=200, n=8, k=512, dtype="float16", layout="NN")
    spec, problem = get_spec("gemm").request(A100, **request)
    assert spec.family == "gemm_mma"
    a, b = FakeArray((200, 512), "float16"), FakeArray((512, 8), "float16", ptr=BASE + 0x100_0000)
    gpu = FamilyTimes({"gemm_mma": 0.050, "gemm_skinny": 0.010})
    with fake_dispatch(A100) as fake:
        tune(spec, problem, A100, gpu, fake.dispatcher.db, trials=3, sampler="random", seed=1)
        fake.dispatcher.clear()
        assert kgen.gemm_choice(a, b).family == "gemm_mma"
        measure_rivals(get_spec("gemm").rivals(A100, **request), A100, gpu, fake.dispatcher.db, trials=2)
        fake.dispatcher.clear()
        choice = kgen.gemm_choice(a, b)
        assert (choice.family, choice.how) == ("gemm_skinny", "tuned")


@pytest.mark.parametrize("knob", ["0", "2"])
def test_kgen_tune_says_what_it_measured_beside_the_search(knob, tmp_path, monkeypatch):
    """The command line: a replay holds no rival's measurements, so none is measured and the
    tune ends as before; the knob's off position measures nothing either."""
    from pathlib import Path

    from typer.testing import CliRunner

    from kgen.cli import app

    monkeypatch.setenv("KGEN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    monkeypatch.setenv("KGEN_TUNE_RIVALS", knob)
    recording = str(Path(__file__).parent / "data" / "h200_gemm_f32_simt.jsonl.gz")
    result = CliRunner().invoke(app, ["tune", "gemm", "--m", "1000", "--n", "1000", "--k", "1000", "--trials", "5",
                                      "--replay", recording])
    assert result.exit_code == 0, result.output
    assert "also measured" not in result.output
