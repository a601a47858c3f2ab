"""The shipped H200 records are read and chosen by dispatch, with no tuning and no GPU."""

from kgen.db import JsonlStore, open_default
from kgen.dispatch import Dispatcher
from kgen.kernels.gemm.problem import gemm_problem
from kgen.problem import Target
from kgen.render import data_root
from kgen.registry import get_spec


def test_shipped_records_are_valid_and_current():
    store = JsonlStore(data_root() / "tuning_db")
    spec = get_spec("gemm")
    keys = store.problems("gemm", "NVIDIA H200")
    assert len(keys) >= 10
    for key in keys:
        best = store.best("gemm", key, "NVIDIA H200")
        assert best.measurement.ok and best.provenance.template_digest == spec.template_digest(), \
            "the gemm template changed since tuning_db/ was measured: re-run scripts/bench_gemm.py --export"


def test_dispatch_uses_shipped_records_for_tuned_problems_and_the_model_elsewhere(monkeypatch):
    """tuning_db/ is read as a layer, not imported: its records need no `kgen db verify`, even
    though dispatch uses imported records only once verified (KGEN_VERIFIED_ONLY, on by default)."""
    from kgen.db.trust import is_imported
    from kgen.knobs import knobs

    monkeypatch.delenv("KGEN_VERIFIED_ONLY", raising=False)
    assert knobs.verified_only
    shipped = JsonlStore(data_root() / "tuning_db")
    assert not any(is_imported(r) for family in shipped.families() for r in shipped.records(family))
    spec, target = get_spec("gemm"), Target.h200()
    dispatcher = Dispatcher(db=open_default(), targets={0: target})
    tuned = dispatcher.choose(spec, gemm_problem(4096, 4096, 4096, "float32", "NN"), target)
    assert tuned.how == "tuned" and tuned.time_ms > 0
    untuned = gemm_problem(4000, 4096, 4096, "float32", "NN")
    assert dispatcher.choose(spec, untuned, target).how == "model"
    monkeypatch.setenv("KGEN_UNTUNED", "nearest")
    assert dispatcher.choose(spec, untuned, target).how == "nearest"
    other = dispatcher.choose(spec, gemm_problem(64, 64, 64, "float64", "NN"), target)
    assert other.how == "default"


def test_shipped_tensor_core_records_are_current_and_chosen():
    from kgen.kernels.gemm.route import gemm_request

    store = JsonlStore(data_root() / "tuning_db")
    target = Target.h200()
    for family in ("gemm_mma", "gemm_wgmma"):
        spec = get_spec(family)
        keys = store.problems(family, "NVIDIA H200")
        assert len(keys) >= 10, family
        for key in keys:
            best = store.best(family, key, "NVIDIA H200")
            assert best.measurement.ok and best.provenance.template_digest == spec.template_digest(), \
                f"the {family} template changed since tuning_db/ was measured: re-run scripts/bench_gemm.py"
    dispatcher = Dispatcher(db=open_default(), targets={0: target})
    (spec, problem), _ = gemm_request("gemm", 4096, 4096, 4096, "bfloat16", "NN", target)
    tuned = dispatcher.choose(spec, problem, target)
    assert spec.family == "gemm_wgmma" and tuned.how == "tuned" and tuned.time_ms > 0


def test_every_shipped_file_imports_into_a_fresh_database(tmp_path):
    """What a user does with a shared file: every file of tuning_db/ imports whole."""
    from kgen.db import MemoryStore
    from kgen.db.exchange import import_file

    files = sorted((data_root() / "tuning_db").glob("*.jsonl"))
    assert files
    for path in files:
        report = import_file(path, MemoryStore())
        lines = sum(1 for line in path.read_text().splitlines() if line.strip())
        assert (report.imported, report.invalid, report.conflicts) == (lines, 0, 0), path.name
