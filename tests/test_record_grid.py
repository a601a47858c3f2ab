"""scripts/record_grid.py without a GPU: the grid is the same every time, its shapes distinct;
``--vendor`` offers the vendor candidate where the family has a call for it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import record_grid  # noqa: E402

from kgen.kernels.gemm import vendor  # noqa: E402
from kgen.kernels.gemm.problem import gemm_problem, tc_problem  # noqa: E402
from kgen.problem import Target  # noqa: E402
from kgen.registry import get_spec  # noqa: E402

TARGET = Target.h200("NVIDIA H200")


def test_the_grid_is_the_same_every_time():
    first = record_grid.grid(24)
    assert first == record_grid.grid(24) and len(first) == 24
    assert len({(s["m"], s["n"], s["k"], s["layout"], s["dtype"], s["precision"]) for s in first}) == 24


def test_vendor_offered_where_the_family_has_a_call(monkeypatch):
    spec, problem = get_spec("gemm"), gemm_problem(300, 200, 100, "float32", "NN")
    listed = record_grid.listed_configs(spec, problem, TARGET, 2, 1, seed=0)
    offered = record_grid.with_vendor(spec, problem, listed)
    assert offered["cublas"] == {} and set(offered) - {"cublas"} == set(listed)     # CuPy's float32 call
    monkeypatch.setattr(vendor, "_torch_installed", lambda: False)
    wgmma = get_spec("gemm_wgmma")
    half = tc_problem("gemm_wgmma", 300, 200, 128, "bfloat16", "NN")
    assert "cublas" not in record_grid.with_vendor(wgmma, half, {})                 # no call without PyTorch
