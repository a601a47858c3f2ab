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


def test_every_shipped_record_is_of_its_familys_current_template():
    """A template change that alters a kernel must re-measure its records (or carry them by SASS
    digest, scripts/sass_digests.py); a stale digest would silently leave them unused."""
    import json

    current = {}
    for path in sorted((data_root() / "tuning_db").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            family = record["family"]
            if family not in current:
                current[family] = get_spec(family).template_digest()
            assert record["provenance"]["template_digest"] in (current[family], "vendor"), \
                f"{path.name}: {record['config_name']} was measured with another {family} template"


def test_shipped_conv_and_batched_records_are_chosen_on_their_device(monkeypatch):
    from kgen.kernels.conv.family import route
    from kgen.kernels.conv.problem import conv2d_problem
    from kgen.kernels.gemm.batched import batched_problem

    h100 = Target("NVIDIA H100 80GB HBM3", (9, 0), 132, 48 * 1024, 227 * 1024, 228 * 1024)
    dispatcher = Dispatcher(db=open_default(), targets={0: h100})
    layer = conv2d_problem(64, 28, 28, 128, 128, 3, 3, padding=1, dtype="bfloat16")
    choices = {spec.family: dispatcher.choose(spec, p, h100) for spec, p in route(h100, layer)}
    assert set(choices) == {"conv2d_wgmma", "conv2d"} and all(c.how == "tuned" for c in choices.values())
    assert choices["conv2d_wgmma"].time_ms < choices["conv2d"].time_ms
    from kgen.kernels.gemm import vendor

    monkeypatch.setenv("KGEN_VENDOR", "1")                # (the tests' default is 0)
    monkeypatch.setattr(vendor, "_torch_installed", lambda: True)     # (the vendor call is PyTorch's)
    batched = dispatcher.choose(get_spec("gemm_batched"), batched_problem(64, 512, 512, 64, "bfloat16", "NT"), h100)
    assert batched.vendor and batched.time_ms > 0        # cuBLAS measured faster than the generated kernels


def test_shipped_k_grouped_and_depthwise_records_are_chosen_on_their_device():
    from kgen.kernels.conv.depthwise import depthwise_problem
    from kgen.kernels.gemm.kgrouped import kgrouped_problem, route

    h100 = Target("NVIDIA H100 80GB HBM3", (9, 0), 132, 48 * 1024, 227 * 1024, 228 * 1024)
    dispatcher = Dispatcher(db=open_default(), targets={0: h100})
    gradient = kgrouped_problem(64, 2048, 1408, 8192, "bfloat16")
    choices = {spec.family: dispatcher.choose(spec, p, h100) for spec, p in route(h100, gradient)}
    assert set(choices) == {"gemm_kgrouped_wgmma", "gemm_kgrouped"} and all(c.how == "tuned" for c in choices.values())
    assert choices["gemm_kgrouped_wgmma"].time_ms < choices["gemm_kgrouped"].time_ms
    layer = depthwise_problem(64, 28, 28, 240, 5, 5, padding=2)
    assert dispatcher.choose(get_spec("conv2d_depthwise"), layer, h100).how == "tuned"
