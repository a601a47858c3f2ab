"""Start N MPI ranks from a normal pytest test, with a timeout that kills them all.

Finds ``mpiexec`` beside this Python first (the ``mpich`` wheel puts it there) and then on
PATH; asks it which MPI it is, and adds what running more ranks than cores needs there (Open
MPI: ``--oversubscribe``, and permission to run as root; MPICH / Intel MPI's Hydra: the fork
launcher, so no ssh is involved, and waiting ranks yield their core sooner than by MPICH's
default, which more than halves the time of 4 ranks on 2 cores). Skips, saying why, where
mpi4py or mpiexec is missing.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 60


@functools.lru_cache(maxsize=1)
def mpiexec() -> tuple[list[str], dict[str, str]] | str:
    """(mpiexec and its flags, extra environment), or why there is none."""
    beside = Path(sys.executable).parent / "mpiexec"
    exe = str(beside) if beside.exists() else shutil.which("mpiexec")
    if exe is None:
        return "no mpiexec beside this Python or on PATH (pip install 'kgen[dist]' brings MPICH's)"
    probe = subprocess.run([sys.executable, "-c", "from mpi4py import MPI"], capture_output=True, text=True,
                           timeout=TIMEOUT_S)
    if probe.returncode != 0:
        return f"mpi4py does not load: {(probe.stderr.strip().splitlines() or ['?'])[-1]}"
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=TIMEOUT_S)
    text = version.stdout + version.stderr
    env: dict[str, str] = {}
    if "Open MPI" in text or "OpenRTE" in text:
        flags = ["--oversubscribe"]
        env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    elif "HYDRA" in text.upper():
        flags = ["-launcher", "fork"]
        env = {"MPIR_CVAR_POLLS_BEFORE_YIELD": "10"}     # MPICH: a waiting rank yields its core soon
    else:
        flags = []
    return [exe, *flags], env


def run_ranks(n: int, args: list[str], timeout_s: float = TIMEOUT_S) -> str:
    """Run ``python ARGS`` on ``n`` ranks from the repository root; the combined output. Fails
    the test on a non-zero exit or the timeout (every rank is killed), skips without MPI."""
    found = mpiexec()
    if isinstance(found, str):
        pytest.skip(found)
    command, extra = found
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update({k: v for k, v in extra.items() if k not in env})
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    proc = subprocess.Popen([*command, "-n", str(n), sys.executable, *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{n} ranks still running after {timeout_s} s, killed:\n{out[-6000:]}")
    if proc.returncode != 0:
        pytest.fail(f"{n} ranks exited with {proc.returncode}:\n{out[-6000:]}")
    return out
