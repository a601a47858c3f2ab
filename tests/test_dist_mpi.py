"""kgen.dist on 1, 2, 3 and 4 MPI ranks (more ranks than cores is fine): the tests under
tests/dist_mpi run on every rank, under mpiexec, with a 60 s limit; the tensor-parallel MLP
example runs on 2 ranks; torchrun-style variables without mpiexec."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from mpi_launch import ROOT, mpiexec, run_ranks

PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--confcutdir", "tests/dist_mpi",
          "-o", "python_files=mpi_*.py", "-o", "faulthandler_timeout=45", "tests/dist_mpi"]


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_dist_on_ranks(ranks):
    out = run_ranks(ranks, PYTEST)
    assert " passed" in out and " failed" not in out


def test_tensor_parallel_mlp_example_on_two_ranks():
    out = run_ranks(2, ["examples/mlp_tensor_parallel.py"])
    assert "matches NumPy" in out


def test_torchrun_variables_without_mpiexec():
    """RANK / WORLD_SIZE set, no mpiexec: one rank runs, more are refused with the remedy."""
    if isinstance(mpiexec(), str):
        pytest.skip(mpiexec())
    script = (
        "import os, kgen.dist as kd\n"
        "from kgen.errors import BackendError\n"
        "os.environ.update(RANK='1', WORLD_SIZE='2', LOCAL_RANK='1')\n"
        "try:\n"
        "    kd.init(); raise SystemExit('no error')\n"
        "except BackendError as err:\n"
        "    assert 'mpiexec -n 2' in err.remedy, err\n"
        "os.environ.update(RANK='0', WORLD_SIZE='1', LOCAL_RANK='0')\n"
        "ctx = kd.init()\n"
        "assert (ctx.launch.how, kd.rank(), kd.world_size()) == ('torchrun', 0, 1), ctx.launch\n"
        "kd.finalize()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["PYTHONPATH"] = str(ROOT)
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, check=True, timeout=60)


def test_tune_dist_gemm_on_two_ranks_then_gemm_runs_the_tuned_best(tmp_path, monkeypatch):
    """`kgen tune dist_gemm` under mpiexec measures every config on both ranks and stores them;
    kgen.dist.gemm then runs the stored best (rank 0 reads it, both follow)."""
    monkeypatch.setenv("KGEN_HOME", str(tmp_path))
    monkeypatch.setenv("KGEN_USE_SHIPPED_DB", "0")
    out = run_ranks(2, ["-m", "kgen.cli", "tune", "dist_gemm", "--m", "96", "--n", "80", "--k", "72",
                        "--trials", "16"], timeout_s=120)
    assert "12 / 0" in out and "dist_" in out, out[-3000:]
    script = (
        "import numpy as np, kgen.dist as kd\n"
        "from kgen.db import open_default\n"
        "from kgen.dist.tuned import implementation_digest, problem_of, target_of, tuned_choice\n"
        "ctx = kd.init('mpi')\n"
        "rng = np.random.default_rng(0)\n"
        "a, b = rng.standard_normal((96, 72)).astype(np.float32), rng.standard_normal((72, 80)).astype(np.float32)\n"
        "c = kd.gemm(kd.from_global(a, 'rows'), kd.from_global(b, 'cols')).to_global()\n"
        "assert np.allclose(c, a @ b, atol=1e-4)\n"
        "p = problem_of(96, 80, 72, 'float32', 'rows', 'cols', 2, 'mpi')\n"
        "chosen = tuned_choice(ctx, p)\n"
        "if kd.rank() == 0:\n"
        "    best = open_default().best('dist_gemm', p.key, target_of(ctx).name, implementation_digest())\n"
        "    config = best.measurement.config\n"
        "    assert chosen == (config['ALG'], config['PANEL'], config['CHUNKS']), (chosen, best)\n"
        "    print('tuned choice', chosen)\n"
        "kd.finalize()\n")
    out = run_ranks(2, ["-c", script], timeout_s=120)
    assert "tuned choice" in out, out[-3000:]


def test_a_rank_that_dies_makes_the_others_raise_within_the_timeout():
    """One of two ranks exits before a collective: the other raises RankLostError after
    KGEN_DIST_TIMEOUT (3 s here) instead of waiting for ever. MPICH's mpiexec kills the
    survivors at once by default; -disable-auto-cleanup lets them run on to see the error."""
    found = mpiexec()
    if isinstance(found, str):
        pytest.skip(found)
    command, extra = found
    if "-launcher" not in command:
        pytest.skip("needs MPICH's mpiexec (Hydra) for -disable-auto-cleanup")
    script = (
        "import os, time, numpy as np, kgen.dist as kd\n"
        "from kgen.errors import RankLostError\n"
        "kd.init('mpi')\n"
        "if kd.rank() == 1:\n"
        "    os._exit(3)\n"
        "start = time.monotonic()\n"
        "try:\n"
        "    kd.from_global(np.ones((4, 4)), 'rows')\n"
        "except RankLostError as err:\n"
        "    print(f'RankLostError after {time.monotonic() - start:.1f} s: {err.message}', flush=True)\n"
        "    os._exit(0)\n"
        "print('no error', flush=True)\n"
        "os._exit(1)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(extra, KGEN_DIST_TIMEOUT="3", PYTHONPATH=str(ROOT))
    done = subprocess.run([*command, "-disable-auto-cleanup", "-n", "2", sys.executable, "-c", script], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    out = done.stdout + done.stderr
    assert "RankLostError after" in out, out[-3000:]
    waited = float(out.split("RankLostError after ")[1].split(" s")[0])
    assert 3.0 <= waited < 10.0 and "within 3 s" in out
