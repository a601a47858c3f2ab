"""What the side-by-side benchmark scripts share: timing a call as a user makes it (CUDA events,
L2 flushed, median), the commit measured, and the dispatcher's choices of the run (which config
and how it was chosen; the problem keys, for ``kgen tune FAMILY --from``)."""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]


def median_ms(fn: Callable, runs: int, flush) -> float:
    """Median milliseconds of ``fn`` over ``runs`` timed runs (3 warm-up runs), ``flush`` before each."""
    from kgen.measure.bench import time_runs
    from kgen.measurement import Timing

    return statistics.median(time_runs(fn, Timing(runs=runs, warmup=3), flush))


def last_choice(family: str) -> tuple[str, str]:
    """The config and how of the most recent kernel the default dispatcher loaded for ``family``."""
    from kgen.dispatch import default_dispatcher

    loaded = default_dispatcher().loaded(family)
    if not loaded:
        return "", ""
    choice = loaded[-1][1]
    return choice.config.name if choice.config is not None else "", choice.how


def write_keys(prefix: str, family: str) -> None:
    """The keys of ``family``'s problems loaded so far, to PREFIX.FAMILY.txt (for ``kgen tune --from``)."""
    from kgen.dispatch import default_dispatcher

    keys = [problem.key for problem, _ in default_dispatcher().loaded(family)]
    if keys:
        Path(f"{prefix}.{family}.txt").write_text("".join(k + "\n" for k in keys))


def commit() -> str:
    """The checkout's short commit ('' outside a git checkout)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def add_run_args(parser, keys_help: str) -> None:
    """The options every side-by-side benchmark takes: runs, output file, commit, keys file."""
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out", default="")
    parser.add_argument("--commit", default="", help="the commit measured (default: git rev-parse HEAD)")
    parser.add_argument("--keys", default="", help=keys_help)


def gpu_session():
    """(cupy, torch, kgen, target, flush) on device 0: the libraries, the device and an L2 flusher."""
    import cupy
    import torch

    import kgen
    from kgen.measure.bench import l2_flusher
    from kgen.problem import Target

    target = Target.detect(0)
    return cupy, torch, kgen, target, l2_flusher(int(cupy.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]))


def geomean(values) -> float:
    """The geometric mean of positive numbers."""
    import math

    values = list(values)
    return math.exp(statistics.fmean(map(math.log, values)))
