"""The examples in kgen's docstrings run as written (no GPU: those that need one are not examples)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

KGEN = Path(__file__).resolve().parent.parent / "kgen"
MODULES = sorted(".".join(p.relative_to(KGEN.parent).with_suffix("").parts)
                 for p in KGEN.rglob("*.py") if ">>> " in p.read_text() and "export_runtime" not in p.parts)
OPTIONAL = {"kgen.torch": "torch"}     # modules that serve an optional library, which they import


def test_some_modules_have_examples():
    assert doctest.testmod(importlib.import_module("kgen.kernels.gemm.wgmma")).attempted >= 5


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name):
    if name in OPTIONAL:
        pytest.importorskip(OPTIONAL[name])
    result = doctest.testmod(importlib.import_module(name), verbose=False)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
