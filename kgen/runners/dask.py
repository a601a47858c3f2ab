"""Measure on Dask workers, one GPU each, on this machine or many.

Workers declare ``resources={"GPU": 1}``. A task runs the measuring function inside the
worker process; by default that is a ``GPUWorker`` kept per worker process (one per GPU),
so its watchdog and restart behave as they do locally. Dask futures become
``concurrent.futures`` futures through done-callbacks, never by blocking.

Faults: a worker lost mid-task (crash, lost connection, missing result) sends the trial
again, ``knobs.dist_retries`` times, then stores it as ``Failure("runtime", "worker lost")``;
a trial running past ``timeout_s`` is stored as ``Failure("timeout")`` and its worker is
restarted. The runner sets the scheduler's ``allowed_failures`` to 0 so that Dask itself
never re-runs a task that killed a worker (the runner decides).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Callable

from distributed.diagnostics.plugin import WorkerPlugin

from kgen.errors import KgenError
from kgen.knobs import knobs
from kgen.measure.task import MeasureTask
from kgen.measurement import Failure, Measurement
from kgen.runners.base import Runner

log = logging.getLogger("kgen.runners.dask")
_LOST = {"KilledWorker", "CommClosedError", "FutureCancelledError", "CancelledError", "StreamClosedError"}

# ---- worker side -------------------------------------------------------------------------
_MEASURES: dict[str, Callable[[MeasureTask], Measurement]] = {}
_GPU_LOCK = threading.Lock()
_GPU_WORKER = None


class _Install(WorkerPlugin):
    """Keeps a runner's measuring function in every worker process, restarted ones too."""

    def __init__(self, name: str, measure: Callable):
        self.name, self.measure = name, measure

    def setup(self, worker) -> None:
        _MEASURES[self.name] = self.measure

    def teardown(self, worker) -> None:
        _MEASURES.pop(self.name, None)


def _measure_on_worker(name: str, task: MeasureTask):
    from distributed import get_worker

    address = get_worker().address
    measure = _MEASURES.get(name)
    if measure is None:
        raise KgenError(f"worker {address} has no measuring function {name}",
                        remedy="the runner was closed, or the worker could not load kgen: check its log")
    start = time.time()
    return measure(task), address, start, time.time()


class GPUMeasure:
    """The default measuring function: this worker process's GPUWorker on its only visible GPU."""

    needs_binaries = True

    def __init__(self, l2_bytes: int = 60 << 20, flush_l2: bool | None = None, timeout_s: float | None = None):
        self.l2_bytes, self.flush_l2, self.timeout_s = l2_bytes, flush_l2, timeout_s

    def __call__(self, task: MeasureTask) -> Measurement:
        import multiprocessing

        from kgen.measure.worker import GPUWorker

        global _GPU_WORKER
        if multiprocessing.current_process().daemon:
            raise KgenError("this Dask worker is a daemonic process and cannot start kgen's GPU process",
                            remedy="start workers with `kgen worker`, or export "
                                   "DASK_DISTRIBUTED__WORKER__DAEMON=False before `dask worker`")
        with _GPU_LOCK:
            if _GPU_WORKER is None:
                flush = knobs.l2_flush if self.flush_l2 is None else self.flush_l2
                _GPU_WORKER = GPUWorker(0, self.l2_bytes, flush)
            return _GPU_WORKER.measure(task, self.timeout_s or knobs.trial_timeout_s)


def _detect_target():
    from kgen.problem import Target

    return Target.detect(0)


def _set_allowed_failures(n: int, dask_scheduler=None) -> None:
    dask_scheduler.allowed_failures = n


# ---- driver side -------------------------------------------------------------------------
@dataclass
class _Entry:
    task: MeasureTask
    result: Future
    attempts: int = 0
    key: str = ""
    dask: object = None
    sent: float = 0.0
    order: int = 0      # when it was sent: a worker runs our tasks in this order


def _failed(task: MeasureTask, kind: str, detail: str) -> Measurement:
    return Measurement(config_name=task.config.name, config=task.config.as_dict(), problem_key=task.problem.key,
                       timing=task.timing, compile_s=task.compile_s, resources=task.resources,
                       failure=Failure(kind, detail[:2000]))


class DaskRunner(Runner):
    """Measure on the GPU workers of a Dask cluster; ``slots`` defaults to their number.

    Up to ``knobs.dist_queue_depth`` measurements per GPU are sent at once, so a worker
    starts its next one without waiting for the round trip of the last answer. When a
    worker dies, only the measurement it was running is charged an attempt; the ones
    queued behind it are sent again free.

    ``measure`` is a picklable function of a MeasureTask run inside the worker (default:
    ``GPUMeasure()``); a replay's ``ReplayRunner(recording).answer`` measures without GPUs.
    """

    def __init__(self, client, slots: int | None = None, measure: Callable | None = None,
                 timeout_s: float | None = None, retries: int | None = None):
        self.client = client
        self.measure = measure or GPUMeasure()
        owner = getattr(self.measure, "__self__", self.measure)
        self.needs_binaries = getattr(owner, "needs_binaries", True)
        self._measurable = getattr(owner, "measurable", None)
        self.slots = slots or self.gpu_workers()
        self.timeout_s = timeout_s or knobs.dask_timeout_s
        self.max_retries = knobs.dist_retries if retries is None else retries
        self.retries = self.timeouts = self.lost = 0
        self.where: dict[tuple[str, str], tuple[str, float, float]] = {}   # (problem, config) -> worker, start, end
        self._name = f"kgen-measure-{uuid.uuid4().hex[:12]}"
        self._lock = threading.Lock()
        self._pending: deque[_Entry] = deque()
        self._running: dict[str, _Entry] = {}
        self._restarting = 0
        self._sent = 0
        self._killed: dict[str, list[tuple[float, _Entry]]] = {}   # worker -> entries lost with it, when
        self._closed = threading.Event()
        try:
            client.run_on_scheduler(_set_allowed_failures, 0)
        except Exception as exc:   # a scheduler refusing remote code: Dask may re-run crashing tasks
            log.warning("could not set the scheduler's allowed_failures to 0: %s", exc)
        client.register_plugin(_Install(self._name, self.measure), name=self._name)
        self._watch = threading.Thread(target=self._watchdog, name="kgen-dask-watchdog", daemon=True)
        self._watch.start()

    def gpu_workers(self) -> int:
        """How many GPUs the cluster's workers offer (resource ``GPU``)."""
        try:
            workers = self.client.scheduler_info(n_workers=-1)["workers"].values()
        except TypeError:   # dask before 2025: every worker is listed anyway
            workers = self.client.scheduler_info()["workers"].values()
        n = int(sum(w.get("resources", {}).get("GPU", 0) for w in workers))
        if n < 1:
            raise KgenError("no Dask worker offers a GPU resource",
                            remedy="start workers with `kgen worker --scheduler ADDR`, or "
                                   "`dask worker ADDR --nthreads 1 --resources GPU=1`")
        return n

    def measurable(self, problem_key: str) -> dict[str, dict] | None:
        return self._measurable(problem_key) if self._measurable else None

    def target(self):
        """The Target of a GPU worker's device (all workers are assumed alike)."""
        return self.client.submit(_detect_target, resources={"GPU": 1}, pure=False).result()

    # ---- sending ---------------------------------------------------------------------------
    def submit(self, task: MeasureTask) -> Future:
        fut: Future = Future()
        if self._closed.is_set():
            fut.set_exception(KgenError("the Dask runner is closed", remedy="submit before closing it"))
            return fut
        with self._lock:
            self._pending.append(_Entry(task, fut))
        self._pump()
        return fut

    def _pump(self) -> None:
        send = []
        with self._lock:
            depth = max(1, knobs.dist_queue_depth)
            while (self._pending and not self._closed.is_set()
                   and len(self._running) < max(1, self.slots - self._restarting) * depth):
                e = self._pending.popleft()
                if not e.result.running() and not e.result.set_running_or_notify_cancel():
                    continue   # the tuner gave up on it before its first send
                e.attempts += 1
                self._sent += 1
                e.key, e.sent, e.dask, e.order = f"{self._name}-{uuid.uuid4().hex}", time.monotonic(), None, self._sent
                self._running[e.key] = e
                send.append(e)
        for e in send:
            dfut = self.client.submit(_measure_on_worker, self._name, e.task, key=e.key,
                                      resources={"GPU": 1}, pure=False)
            e.sent, e.dask = time.monotonic(), dfut
            dfut.add_done_callback(partial(self._done, e.key))

    # ---- answers ---------------------------------------------------------------------------
    def _done(self, key: str, dfut) -> None:
        with self._lock:
            e = self._running.pop(key, None)
        if e is None:
            return   # timed out (already answered) or closed
        try:
            if dfut.status == "finished":
                m, worker, start, end = dfut.result()
                self.where[(m.problem_key, m.config_name)] = (worker, start, end)
                self._answer(e, m)
            elif dfut.status == "error":
                exc = dfut.exception()
                worker = getattr(getattr(exc, "last_worker", None), "address", None)
                if type(exc).__name__ == "KilledWorker" and worker:
                    with self._lock:   # settled by the watchdog once every task lost with it is in
                        self._killed.setdefault(worker, []).append((time.monotonic(), e))
                elif type(exc).__name__ in _LOST:
                    self._lost(e, f"{type(exc).__name__}: {exc}")
                elif not e.result.done():
                    e.result.set_exception(exc)
            else:
                self._lost(e, f"no result (task {dfut.status})")
        except Exception as exc:   # fetching the result itself failed: the worker holding it is gone
            self._lost(e, f"{type(exc).__name__}: {exc}")
        self._pump()

    @staticmethod
    def _answer(e: _Entry, m: Measurement) -> None:
        if not e.result.done():
            e.result.set_result(m)

    def _lost(self, e: _Entry, why: str, charged: bool = True) -> None:
        self.lost += 1
        if not charged:
            e.attempts -= 1   # it never ran: this send does not count
        if e.attempts <= self.max_retries and not self._closed.is_set():
            self.retries += 1
            log.warning("trial %s lost its worker (%s): sending it again", e.task.config.name, why)
            with self._lock:
                self._pending.appendleft(e)
        else:
            self._answer(e, _failed(e.task, "runtime", f"worker lost: {why}"))

    # ---- timeouts --------------------------------------------------------------------------
    def _watchdog(self) -> None:
        while not self._closed.wait(0.25):
            try:
                self._expire()
            except Exception as exc:   # a watchdog must outlive a scheduler hiccup
                log.warning("dask watchdog: %s", exc)

    def _settle_killed(self, settle_s: float = 0.5) -> None:
        """Tasks lost with a dead worker: the first sent was running (charged an attempt),
        the others were queued behind it (sent again free)."""
        now = time.monotonic()
        with self._lock:
            ready = [w for w, lost in self._killed.items() if now - max(t for t, _ in lost) >= settle_s]
            batches = [(w, sorted((e for _, e in self._killed.pop(w)), key=lambda e: e.order)) for w in ready]
        for worker, entries in batches:
            for i, e in enumerate(entries):
                self._lost(e, f"KilledWorker: {worker} died", charged=i == 0)
        if batches:
            self._pump()

    def _expire(self) -> None:
        self._settle_killed()
        now = time.monotonic()
        with self._lock:
            late = [e for e in self._running.values() if e.dask is not None and now - e.sent > self.timeout_s]
        if not late:
            return
        processing = self.client.processing()
        with self._lock:
            order = {e.key: e.order for e in self._running.values()}
        for e in late:
            worker = next((w for w, keys in processing.items() if e.key in keys), None)
            ahead = worker is not None and any(order.get(k, e.order) < e.order for k in processing[worker])
            if worker is None or ahead:
                e.sent = now   # not started yet (waiting for a worker, or queued behind one of ours)
                continue
            with self._lock:
                if self._running.pop(e.key, None) is None:
                    continue
                self._restarting += 1
            self.timeouts += 1
            e.dask.cancel()
            self._answer(e, _failed(e.task, "timeout", f"no answer within {self.timeout_s:g} s on {worker} "
                                                       "(worker restarted)"))
            threading.Thread(target=self._restart, args=(worker,), daemon=True).start()
        self._pump()

    def _restart(self, worker: str) -> None:
        try:
            self.client.restart_workers([worker])
        except Exception as exc:
            log.warning("restarting %s failed (%s): stopping its process", worker, exc)
            try:
                self.client.run(os._exit, 1, workers=[worker], wait=False)
            except Exception as exc2:
                log.warning("could not stop %s: %s", worker, exc2)
        finally:
            with self._lock:
                self._restarting -= 1
            self._pump()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with self._lock:
            left = list(self._pending) + list(self._running.values())
            left += [e for lost in self._killed.values() for _, e in lost]
            self._pending.clear()
            self._running.clear()
            self._killed.clear()
        for e in left:
            if e.dask is not None:
                e.dask.cancel()
            if not e.result.done():
                e.result.cancel() or e.result.set_exception(KgenError("the Dask runner was closed"))
        try:
            self.client.unregister_worker_plugin(self._name)
        except Exception:
            pass


# ---- clusters ----------------------------------------------------------------------------
def parse_gpus(text: str) -> list[int]:
    """``all`` or ``0,1,3`` as device numbers."""
    text = text.strip().lower()
    if text == "all":
        try:
            from cupy.cuda import runtime

            n = runtime.getDeviceCount()
        except Exception as exc:
            raise KgenError(f"cannot count this machine's GPUs ({exc})",
                            remedy="install the CUDA driver, or list devices as --gpus 0,1") from None
        if n < 1:
            raise KgenError("no GPU is visible", remedy="check nvidia-smi and CUDA_VISIBLE_DEVICES")
        return list(range(n))
    try:
        devices = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise KgenError(f"--gpus {text!r} is not a device list", remedy="give all, or numbers like 0,1") from None
    if not devices or len(set(devices)) != len(devices) or min(devices) < 0:
        raise KgenError(f"--gpus {text!r} is not a device list", remedy="give all, or distinct numbers like 0,1")
    return devices


def _worker_config() -> None:
    """Worker processes must be able to start kgen's GPU process; Dask must not re-run crashers."""
    import dask

    dask.config.set({"distributed.worker.daemon": False, "distributed.scheduler.allowed-failures": 0})


def _worker_spec(device: int, name: str) -> dict:
    return {"nthreads": 1, "resources": {"GPU": 1}, "env": {"CUDA_VISIBLE_DEVICES": str(device)}, "name": name}


def gpu_cluster(devices: list[int]):
    """A cluster on this machine: one single-threaded worker per GPU, pinned with CUDA_VISIBLE_DEVICES."""
    from distributed import Nanny, Scheduler, SpecCluster

    _worker_config()
    workers = {f"gpu{d}": {"cls": Nanny, "options": _worker_spec(d, f"gpu{d}")} for d in devices}
    return SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}},
                       silence_logs=logging.WARNING)


async def serve_workers(scheduler: str, devices: list[int]) -> None:
    """Run one GPU worker per device against ``scheduler`` until they stop."""
    import asyncio
    import socket

    from distributed import Nanny

    _worker_config()
    host = socket.gethostname()
    nannies = [Nanny(scheduler, **_worker_spec(d, f"{host}-gpu{d}")) for d in devices]
    await asyncio.gather(*nannies)
    await asyncio.gather(*(n.finished() for n in nannies))
