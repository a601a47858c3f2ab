"""Shared fixtures: a private KGEN_HOME per test session (the vendor candidate and first-call
races off unless a test turns them on), and the gpu marker's skip."""

import pytest


@pytest.fixture(autouse=True)
def _kgen_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.getbasetemp() / "kgen-home"
    monkeypatch.setenv("KGEN_HOME", str(home))
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cubin-cache"))
    monkeypatch.setenv("KGEN_VENDOR", "0")      # the generated kernels under test; vendor tests opt in
    monkeypatch.setenv("KGEN_RACE", "0")        # the ranking's picks under test; race tests opt in
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


@pytest.fixture
def fake_tma_maps(monkeypatch):
    """kgen.tma's and the exported runtime's encoders record each tensor map instead of calling
    the driver: the list of maps (ptr, dims, stride, box, batch_stride), each a fake record of
    what went into it; both caches emptied before and after."""
    from kgen import tma, tma_encode
    from kgen.export_runtime import replay

    calls = []

    def fake(ptr, dtype, dims, row_stride_bytes, box, swizzle_bytes, call=None, batch_stride_bytes=0):
        calls.append(dict(ptr=ptr, dims=tuple(dims), stride=row_stride_bytes, box=tuple(box),
                          batch_stride=batch_stride_bytes))
        return tma_encode.words_to_desc([ptr, *dims, row_stride_bytes, *box, swizzle_bytes, batch_stride_bytes]
                                        + [0] * (12 - len(dims) - len(box)))

    tma.clear_cache()
    replay._MAPS.clear()
    monkeypatch.setattr(tma, "_driver_encode", lambda *a: fake(*a[:6], batch_stride_bytes=a[6] if len(a) > 6 else 0))
    monkeypatch.setattr(tma_encode, "encode_tiled", fake)
    yield calls
    tma.clear_cache()
    replay._MAPS.clear()
