"""Worker processes of kgen's pools end when their parent is killed outright (SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:            # a zombie (exited, not yet reaped by init) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_compile_pool_workers_die_with_a_killed_parent():
    script = textwrap.dedent("""
        import os, sys, time
        from kgen.compile import CompilePool
        pool = CompilePool(2)
        pids = {pool._executor().submit(os.getpid).result() for _ in range(8)}
        print(" ".join(map(str, sorted(pids))), flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert pids and all(_alive(p) for p in pids)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids), "a worker outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
