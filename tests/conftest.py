"""Shared fixtures: a private KGEN_HOME per test session (the vendor candidate off unless a
test turns it on), and the gpu marker's skip."""

import pytest


@pytest.fixture(autouse=True)
def _kgen_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.getbasetemp() / "kgen-home"
    monkeypatch.setenv("KGEN_HOME", str(home))
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cubin-cache"))
    monkeypatch.setenv("KGEN_VENDOR", "0")      # the generated kernels under test; vendor tests opt in
    yield


def _gpu_count() -> int:
    try:
        from cupy.cuda import runtime

        return runtime.getDeviceCount()
    except Exception:
        return 0


def pytest_collection_modifyitems(config, items):
    count = _gpu_count()
    skip_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU: run scripts/gpu_check.sh on a GPU machine")
    skip_multi = pytest.mark.skip(reason=f"needs two or more GPUs ({count} visible)")
    for item in items:
        if "gpu" in item.keywords and count == 0:
            item.add_marker(skip_gpu)
        if "multi_gpu" in item.keywords and count < 2:
            item.add_marker(skip_multi)


@pytest.fixture(params=["fork", "spawn"])
def parallel_parse(monkeypatch, request):
    """Files of 40+ lines are parsed by 2 worker processes (forked or spawned), 20 lines per chunk."""
    from kgen.db import lines as parse

    monkeypatch.setattr(parse, "_start_method", lambda: request.param)
    monkeypatch.setattr(parse, "PARALLEL_MIN_LINES", 40)
    monkeypatch.setattr(parse, "CHUNK_LINES", 20)
    monkeypatch.setenv("KGEN_DB_WORKERS", "2")
    return parse
