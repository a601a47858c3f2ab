"""One measuring process per GPU, spawned (never forked), watched by the driver.

The worker owns the CUDA context. An illegal address poisons a context for the life of
its process, so after any CUDA error the worker answers with a ``runtime`` failure and
exits; a hang is stopped by the driver's watchdog (``timeout``). Either way the driver
starts a fresh worker and the tune goes on.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback
from typing import Any

from kgen.measure.task import MeasureTask
from kgen.measurement import Failure, Measurement

_EXIT_AFTER_CUDA_ERROR = 3


class _ProblemCache:
    """Inputs and reference of the last few problems (generated once each), each output
    inside guard zones (kgen.measure.guard)."""

    def __init__(self, size: int = 2):
        self.size = size
        self.items: dict[str, tuple[dict, dict, list]] = {}

    def get(self, spec, problem, seed):
        import cupy

        from kgen.knobs import knobs
        from kgen.measure.guard import guard_outputs

        key = f"{spec.family}:{problem.key}:{seed}"
        if key not in self.items:
            while len(self.items) >= self.size:
                self.items.pop(next(iter(self.items)))
            operands, zones = guard_outputs(spec.inputs(problem, seed), spec.outputs, knobs.guard_bytes, cupy)
            self.items[key] = (operands, spec.reference(problem, operands), zones)
        return self.items[key]

    def rebuild(self) -> None:
        """Forget every problem and give the pool's free memory back: after an out-of-bounds
        write, nothing that was near it is used again."""
        import cupy

        self.items.clear()
        cupy.get_default_memory_pool().free_all_blocks()


def _plant(task: MeasureTask, operands: dict) -> None:
    """Faults for tests of the watchdog and the verifier."""
    import cupy

    if task.planted_fault == "hang":
        spin = cupy.RawKernel('extern "C" __global__ void kgen_spin(volatile int* f) { while (f[0] == 0) {} }',
                              "kgen_spin")
        flag = cupy.zeros(1, dtype=cupy.int32)
        spin((1,), (1,), (flag,))
        cupy.cuda.get_current_stream().synchronize()
    elif task.planted_fault == "crash":
        bad = cupy.RawKernel('extern "C" __global__ void kgen_oob(float* p) { p[1ll << 40] = 1.f; }',
                             "kgen_oob")
        bad((1,), (1,), (cupy.zeros(1, dtype=cupy.float32),))
        cupy.cuda.get_current_stream().synchronize()


def _overrun(zones) -> None:
    """The planted fault "overrun": a kernel writing 1 MiB past the end of the first output."""
    import cupy

    zone = zones[0]
    poke = cupy.RawKernel('extern "C" __global__ void kgen_poke(unsigned char* p) { p[0] = 0; }', "kgen_poke")
    poke((1,), (1,), (zone.buffer[zone.guard + zone.nbytes + (1 << 20) - 1:],))
    cupy.cuda.get_current_stream().synchronize()


def measure(task: MeasureTask, cache: _ProblemCache, flush) -> Measurement:
    """Load, verify, time. CUDA errors propagate (the caller exits after reporting)."""
    from kgen.measure.bench import time_runs
    from kgen.measure.launch import CupyKernel
    from kgen.measure.verify import verify
    from kgen.knobs import knobs

    start = time.perf_counter()
    spec, problem, config = task.spec, task.problem, task.config
    operands, expected, zones = cache.get(spec, problem, task.seed)
    if task.baseline:
        return _measure_baseline(task, operands, expected, flush, start)
    kernel = CupyKernel(task.cubin, task.entry)
    resources = {**task.resources, **kernel.resources}
    base = dict(config_name=config.name, config=config.as_dict(), problem_key=problem.key,
                timing=task.timing, resources=resources, compile_s=task.compile_s)
    _plant(task, operands)
    check = verify(spec, problem, config, kernel, operands, expected)
    if task.planted_fault == "overrun":
        _overrun(zones)
    if task.planted_fault == "wrong":
        check = type(check)(False, 1.0, "planted wrong result")
    overrun = _out_of_bounds(zones, cache)
    if overrun is not None:
        return Measurement(**base, failure=overrun, measure_s=time.perf_counter() - start)
    if not check.ok:
        return Measurement(**base, failure=Failure("correctness", check.detail), error=check.error,
                           measure_s=time.perf_counter() - start)

    def run():
        spec.run(kernel, problem, config, operands)

    times = time_runs(run, task.timing, flush, knobs.bench_min_ms)
    overrun = _out_of_bounds(zones, cache)
    if overrun is not None:
        return Measurement(**base, failure=overrun, measure_s=time.perf_counter() - start)
    return Measurement(**base, times_ms=tuple(times), error=check.error,
                       measure_s=time.perf_counter() - start)


def _out_of_bounds(zones, cache: _ProblemCache) -> Failure | None:
    """A ``runtime`` failure naming the changed guards (and the problem cache rebuilt), or None."""
    import cupy

    from kgen.measure.guard import breaches

    found = breaches(zones, cupy)
    if not found:
        return None
    cache.rebuild()
    return Failure("runtime", "; ".join(found))


def _measure_baseline(task: MeasureTask, operands, expected, flush, start: float) -> Measurement:
    """The spec's vendor call (the vendor candidate): checked like a config, then timed."""
    import cupy

    from kgen.knobs import knobs
    from kgen.measure.bench import time_runs
    from kgen.measure.verify import poison

    spec, problem = task.spec, task.problem
    base = dict(config_name=task.config.name, config={}, problem_key=problem.key, timing=task.timing)
    run = spec.vendor_run(problem, operands)
    if run is None:
        return Measurement(**base, failure=Failure("constraints", f"no library baseline runs {problem.key} here"),
                           measure_s=time.perf_counter() - start)
    poison(operands, spec.outputs)
    run()
    cupy.cuda.get_current_stream().synchronize()
    check = spec.check(problem, operands, expected)
    if not check.ok:
        return Measurement(**base, failure=Failure("correctness", check.detail), error=check.error,
                           measure_s=time.perf_counter() - start)
    times = time_runs(run, task.timing, flush, knobs.bench_min_ms)
    return Measurement(**base, times_ms=tuple(times), error=check.error, measure_s=time.perf_counter() - start)


def _is_cuda_error(exc: BaseException) -> bool:
    name = type(exc).__name__
    return "CUDA" in name or "Cuda" in name or "cuda" in type(exc).__module__


def worker_main(conn, device_id: int, l2_bytes: int, flush_l2: bool) -> None:
    """Serve MeasureTasks from ``conn`` until told to stop (None) or a CUDA error."""
    from kgen.lifetime import exit_with_parent

    exit_with_parent()
    import cupy

    cupy.cuda.Device(device_id).use()
    from kgen.measure.bench import l2_flusher

    flush = l2_flusher(l2_bytes) if flush_l2 else None
    cache = _ProblemCache()
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        try:
            result = measure(task, cache, flush)
        except Exception as exc:  # a kernel fault, a launch failure, a bad spec
            detail = f"{type(exc).__name__}: {exc}"
            conn.send(Measurement(config_name=task.config.name, config=task.config.as_dict(),
                                  problem_key=task.problem.key, timing=task.timing,
                                  failure=Failure("runtime", detail[:2000]), compile_s=task.compile_s,
                                  resources=task.resources))
            if _is_cuda_error(exc):
                os._exit(_EXIT_AFTER_CUDA_ERROR)
            traceback.print_exc()
            continue
        conn.send(result)


class GPUWorker:
    """The driver's handle on one worker process: measure with a watchdog, restart on faults."""

    def __init__(self, device_id: int = 0, l2_bytes: int = 60 << 20, flush_l2: bool = True,
                 env: dict[str, str] | None = None):
        self.device_id = device_id
        self.l2_bytes = l2_bytes
        self.flush_l2 = flush_l2
        self.env = env or {}
        self.restarts = 0
        self._proc = None
        self._conn = None

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            self._proc = ctx.Process(target=worker_main, args=(child, self.device_id, self.l2_bytes,
                                                               self.flush_l2), daemon=True)
            self._proc.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        child.close()
        self._conn = parent

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None
        self.restarts += 1

    def measure(self, task: MeasureTask, timeout_s: float) -> Measurement:
        if self._proc is None or not self._proc.is_alive():
            if self._proc is not None:
                self._kill()
            self._start()
        base: dict[str, Any] = dict(config_name=task.config.name, config=task.config.as_dict(),
                                    problem_key=task.problem.key, timing=task.timing,
                                    compile_s=task.compile_s, resources=task.resources)
        try:
            self._conn.send(task)
            if not self._conn.poll(timeout_s):
                self._kill()
                return Measurement(**base, failure=Failure("timeout", f"no answer within {timeout_s:.0f} s"))
            result = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError) as exc:
            code = self._proc.exitcode if self._proc is not None else None
            self._kill()
            return Measurement(**base, failure=Failure("runtime", f"worker died ({type(exc).__name__}, "
                                                                  f"exit code {code})"))
        if result.failure is not None and result.failure.kind == "runtime":
            self._proc.join(2)   # it exits after a CUDA error; reap it so the next task restarts it
        return result

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        if self._proc is not None:
            self._proc.join(5)
            if self._proc.is_alive():
                self._proc.kill()
        self._proc = self._conn = None
