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
