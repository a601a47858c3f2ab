"""The timing harness's own kernels (the clean L2 sweep, the GPU hold) compile for sm_90 with
no GPU, and the flush settings parse; their effect on times is measured by
scripts/bench_flush.py on the GPU."""

from __future__ import annotations

import hashlib

import pytest

from kgen.compile import compile_source
from kgen.errors import SettingError
from kgen.knobs import knobs
from kgen.measure import bench
from kgen.render import Source


@pytest.mark.parametrize("code,entry", [(bench._READ_SWEEP, "kgen_l2_read_sweep"), (bench._HOLD, "kgen_hold")])
def test_harness_kernels_compile(code, entry):
    digest = hashlib.sha256((code + "sm_90").encode()).hexdigest()
    result = compile_source(Source(code, entry, ("--std=c++17",), "sm_90", digest), use_cache=False)
    assert result.failure is None, result.failure
    assert result.binary.cubin[:4] == b"\x7fELF"


def test_flush_style_and_label(monkeypatch):
    monkeypatch.setenv("KGEN_L2_FLUSH_STYLE", "read")
    assert knobs.l2_flush_style == "read" and bench.l2_label() == "flushed-clean"
    monkeypatch.setenv("KGEN_L2_FLUSH_STYLE", "Write ")
    assert bench.l2_label() == "flushed"
    monkeypatch.setenv("KGEN_L2_FLUSH", "0")
    assert bench.l2_label() == "warm"
    monkeypatch.setenv("KGEN_L2_FLUSH_STYLE", "sideways")
    with pytest.raises(SettingError, match="KGEN_L2_FLUSH_STYLE"):
        knobs.l2_flush_style
