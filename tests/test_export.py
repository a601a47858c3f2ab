"""``kgen export``: a package that imports with no kgen, Optuna or Jinja2, holds a cubin and
PTX per kernel, and dispatches like kgen (exact, nearest, or an error, by option)."""

import json
import subprocess
import sys
import venv

import pytest

from kgen.db import open_default
from kgen.dispatch import Dispatcher
from kgen.errors import KgenError
from kgen.export import export_package
from kgen.kernels.gemm.problem import gemm_problem
from kgen.problem import Target
from kgen.registry import get_spec


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("export")
    summary = export_package("gemm", out, name="mykernels", db=open_default())
    return out, summary


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory):
    """A fresh virtual environment with nothing installed (no kgen, optuna, jinja2)."""
    folder = tmp_path_factory.mktemp("bare-venv")
    venv.create(folder, with_pip=False, system_site_packages=False)
    return str(folder / "bin" / "python")


def _run(python, cwd, code):
    done = subprocess.run([python, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_package_holds_sources_cubins_ptx_and_table(exported):
    out, summary = exported
    table = json.loads((summary.path / "table.json").read_text())
    assert summary.problems == len(table["problems"]) >= 10 and table["arch"] == "sm_90"
    for entry in table["problems"].values():
        name = entry["config"]
        assert (summary.path / "kernels" / f"{name}.cubin").stat().st_size > 1000
        assert f".entry {name}" in (summary.path / "kernels" / f"{name}.ptx").read_text()
        assert f"{name}(" in (summary.path / "kernels" / f"{name}.cu").read_text()
    assert (out / "pyproject.toml").is_file()


def test_imports_in_a_bare_environment(exported, bare_python):
    out, _ = exported
    code = ("import sys, mykernels\n"
            "for mod in ('kgen', 'optuna', 'jinja2', 'sqlalchemy', 'cupy'):\n"
            "    assert mod not in sys.modules, mod\n"
            "try:\n    import kgen\nexcept ImportError:\n    print('no kgen')\n"
            "print(len(mykernels.problems()))")
    assert _run(bare_python, out, code).splitlines() == ["no kgen", "10"]


def test_exported_choices_match_kgen_dispatch(exported, bare_python):
    out, _ = exported
    spec, target = get_spec("gemm"), Target.h200()
    dispatcher = Dispatcher(db=open_default(), targets={0: target})
    cases = [(4096, 4096, 4096), (1000, 1000, 1000), (16, 4096, 4096), (4000, 4096, 4096), (77, 300, 5000)]
    code = "import mykernels\n" + "\n".join(
        f"print(*mykernels.choose({m}, {n}, {k}, 'float32', 'NN', 4, 4)[::2])" for m, n, k in cases)
    lines = _run(bare_python, out, code).splitlines()
    for (m, n, k), line in zip(cases, lines):
        name, how = line.split()
        choice = dispatcher.choose(spec, gemm_problem(m, n, k), target)
        assert how == ("exact" if choice.how == "tuned" else "nearest")
        if choice.how == "tuned":
            assert name == choice.config.name


def test_untuned_problem_raises_in_strict_fallback(exported, bare_python):
    out, _ = exported
    code = ("import mykernels\n"
            "try:\n    mykernels.choose(5, 5, 5, 'float32', 'NN', 4, 4, fallback='error')\n"
            "except mykernels.ExportedError as e:\n    print('raised', 'not exported' in str(e))\n"
            "try:\n    mykernels.choose(5, 5, 5, 'float64', 'NN', 2, 2)\n"
            "except mykernels.ExportedError as e:\n    print('raised', 'no exported' in str(e))\n"
            "print(*mykernels.choose(333, 517, 129, 'float32', 'NN', 1, 1)[::2])")
    lines = _run(bare_python, out, code).splitlines()
    assert lines[:2] == ["raised True", "raised True"]
    name, how = lines[2].split()
    assert how == "unaligned" and "_va1_vb1_" in name


def test_export_errors(tmp_path):
    with pytest.raises(KgenError, match="device"):
        export_package("gemm", tmp_path, device="NVIDIA B200", db=open_default())
    with pytest.raises(KgenError, match="package name"):
        export_package("gemm", tmp_path, name="my-kernels", db=open_default())
    listing = tmp_path / "problems.txt"
    listing.write_text('{"m": 4096, "n": 4096, "k": 4096}\n')
    summary = export_package("gemm", tmp_path / "one", name="one", problems=listing, db=open_default())
    assert summary.problems == 1 and summary.kernels == 2     # the tuned one + the unaligned fallback


@pytest.mark.gpu
def test_exported_module_kgen_and_cublas_agree(exported):
    import cupy

    import kgen

    out, _ = exported
    sys.path.insert(0, str(out))
    try:
        import mykernels
    finally:
        sys.path.remove(str(out))
    rng = cupy.random.default_rng(0)
    for m, n, k in ((1000, 1000, 1000), (333, 517, 129)):
        a = rng.random((m, k), dtype=cupy.float32) - 0.5
        b = rng.random((k, n), dtype=cupy.float32) - 0.5
        want = a.astype(cupy.float64) @ b.astype(cupy.float64)
        for got in (mykernels.gemm(a, b), kgen.gemm(a, b), a @ b):
            assert float(cupy.abs(got - want).max() / cupy.abs(want).max()) < 1e-4
