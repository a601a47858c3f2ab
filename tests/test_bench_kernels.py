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


def _tiny_kernel():
    import cupy

    return cupy.ElementwiseKernel("float32 x", "float32 y", "y = x + 1", "kgen_test_add_one")


@pytest.mark.gpu
def test_hold_keeps_the_hosts_launch_path_out_of_the_time():
    """A run whose host side takes 3 ms before a launch of a few microseconds: held, its
    time is the kernel's; unheld (and no flush to hide it), the 3 ms show."""
    import time

    import cupy

    from kgen.measurement import Timing

    x, y, add = cupy.ones(1024, cupy.float32), cupy.empty(1024, cupy.float32), _tiny_kernel()

    def run():
        time.sleep(0.003)
        add(x, y)

    timing = Timing(warmup=1, runs=5)
    held = bench.time_runs(run, timing, None, hold=True)
    unheld = bench.time_runs(run, timing, None, hold=False)
    assert max(held) < 1.0 and min(unheld) > 2.5, (held, unheld)
    assert bool((y == 2).all())


@pytest.mark.gpu
def test_a_run_that_waits_on_the_gpu_is_timed_without_holds():
    """A run that synchronizes would wait on the held GPU: the hold gives up after
    HOLD_TIMEOUT_NS, and the batch is timed again without holds (no 20 ms times kept)."""
    import cupy

    from kgen.measurement import Timing

    x, y, add = cupy.ones(1024, cupy.float32), cupy.empty(1024, cupy.float32), _tiny_kernel()

    def run():
        add(x, y)
        cupy.cuda.get_current_stream().synchronize()

    times = bench.time_runs(run, Timing(warmup=1, runs=3), None, hold=True)
    assert len(times) == 3 and max(times) < 0.5 * bench.HOLD_TIMEOUT_NS / 1e6, times


@pytest.mark.gpu
def test_both_flushes_evict():
    """A read of 24 MB, which the L2 holds: slower after either flush than run after run."""
    import cupy

    from kgen.measurement import Timing
    from kgen.problem import Target

    read = bench.read_sweep(cupy.zeros(24 << 20, dtype=cupy.uint8))
    for style in ("read", "write"):
        flush = bench.l2_flusher(Target.detect(0).l2_bytes, style)
        cold = bench.time_runs(read, Timing(warmup=1, runs=5), flush)
        warm = bench.time_runs(read, Timing(warmup=1, runs=5), None)
        assert min(cold) > 0 and sorted(cold)[2] > sorted(warm)[2], (style, cold, warm)


def test_clock_probe_reads_nvidia_smi_samples():
    """scripts/clock_probe.py's reading of nvidia-smi's CSV: samples spread over the run, a
    line that is not a sample dropped, reasons a driver does not report read as none."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from clock_probe import parse_samples

    lines = ["1980, 120.50, 40, 0x0000000000000000", "", "1845, 698.10, 59, 0x0000000000000004",
             "oops", "1830, 699.00, 60, [N/A]"]
    samples = parse_samples(lines, elapsed_s=4.0)
    assert [s[1:] for s in samples] == [(1980.0, 120.5, 40.0, 0), (1845.0, 698.1, 59.0, 4), (1830.0, 699.0, 60.0, 0)]
    assert [round(s[0], 2) for s in samples] == [0.5, 1.5, 3.5]      # the 4 lines that are not blank, over 4 s
