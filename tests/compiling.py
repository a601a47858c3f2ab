"""Compiling many sampled configs once per test module, in that module's own kgen home."""

from __future__ import annotations

import os
import time
from typing import Iterable

import pytest

from kgen.compile import CompilePool
from kgen.sass import disassembler, sass_of


def per_case(ci: int, full: int) -> int:
    """Sampled configs compiled per case: ``ci`` in a plain run (what CI affords on 2 cores),
    ``full`` with ``KGEN_TEST_COMPILES=full`` (the deeper sweep, e.g. before shipping a template)."""
    return full if os.environ.get("KGEN_TEST_COMPILES") == "full" else ci


def compile_cases(tmp_path_factory, jobs: Iterable[tuple], label: str) -> dict:
    """{case: [(problem, config, source, result)]} for ``jobs`` of (case, problem, config, source),
    compiled through one pool of 2.

    Module-scoped fixtures run before conftest's per-test one, so this sets the same
    KGEN_HOME / KGEN_CACHE_DIR itself; the spawned compile workers inherit them, and ``jobs``
    (a generator: rendering reads the cache folder too) runs inside.
    """
    base = tmp_path_factory.getbasetemp()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KGEN_HOME", str(base / "kgen-home"))
        mp.setenv("KGEN_CACHE_DIR", str(base / "cubin-cache"))
        mp.delenv("KGEN_ARCH", raising=False)
        start = time.perf_counter()
        with CompilePool(2) as pool:
            futures = [(case, problem, config, source, pool.submit(source))
                       for case, problem, config, source in jobs]
            results: dict = {}
            for case, problem, config, source, fut in futures:
                results.setdefault(case, []).append((problem, config, source, fut.result()))
        print(f"\ncompiled {len(futures)} {label} configs in {time.perf_counter() - start:.1f} s")
    return results


def sass_or_skip(cubin: bytes) -> str:
    """The cubin's SASS; the test is skipped, with the remedy, where no disassembler is installed."""
    if disassembler() is None:
        pytest.skip("neither cuobjdump nor nvdisasm found (pip install nvidia-cuda-cuobjdump)")
    return sass_of(cubin)


def compiled_rows(compiled: dict) -> list:
    """Every (problem, config, source, result) of ``compile_cases``'s cases, in one list."""
    return [row for case in compiled.values() for row in case]


def compile_failures(rows, detail: int = 300) -> list[tuple[str, str]]:
    """(config name, the start of the compiler's log) of each row that did not compile."""
    return [(c.name, r.failure.detail[:detail]) for _, c, _, r in rows if r.failure is not None]


def gpu_kernels(cases, workers: int = 16) -> list:
    """The (problem, config, kernel) of each (problem, config, source) case, compiled through one
    pool of ``workers`` and loaded on the GPU; a case that does not compile fails the test."""
    from kgen.measure.launch import CupyKernel

    with CompilePool(workers) as pool:
        results = list(pool.map([src for _, _, src in cases]))
    out = []
    for (problem, config, _), result in zip(cases, results):
        assert result.failure is None, f"{config.name}: {result.failure}"
        out.append((problem, config, CupyKernel(result.binary.cubin, result.binary.entry, result.binary.path)))
    return out


def hopper_sass_faults(rows, needed: tuple[str, ...] = ()) -> list[str]:
    """Of a sample of compiled rows (six spread over them), each config whose SASS lacks HGMMA or
    one of the ``needed`` instructions, or spills to local memory; skipped with no disassembler."""
    import re

    faults = []
    for _, config, _, result in rows[:: max(1, len(rows) // 6)]:
        sass = sass_or_skip(result.binary.cubin)
        missing = [name for name in ("HGMMA.", *needed) if not re.search(r"\b" + re.escape(name), sass)]
        if missing or "LDL" in sass or "STL" in sass:
            faults.append(f"{config.name}: missing {missing}" if missing else f"{config.name} spills")
    return faults
