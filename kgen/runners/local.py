"""Local GPUs: one spawned worker process per device, fed by one thread each."""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future

from kgen.knobs import knobs
from kgen.measure.task import MeasureTask
from kgen.measure.worker import GPUWorker
from kgen.runners.base import Runner


class LocalGPURunner(Runner):
    """Measure on the given local devices; a fault restarts that device's worker only."""

    def __init__(self, devices: tuple[int, ...] = (0,), l2_bytes: int = 60 << 20,
                 timeout_s: float | None = None, planted: dict[str, str] | None = None):
        self.devices = tuple(devices)
        self.slots = len(self.devices)
        self.timeout_s = timeout_s or knobs.trial_timeout_s
        self.planted = dict(planted or {})   # config name -> fault, for tests of fault handling
        self._queue: queue.Queue = queue.Queue()
        self.workers = [GPUWorker(d, l2_bytes, knobs.l2_flush) for d in self.devices]
        self._threads = [threading.Thread(target=self._serve, args=(w,), daemon=True) for w in self.workers]
        for t in self._threads:
            t.start()

    def _serve(self, worker: GPUWorker) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                worker.close()
                return
            task, fut = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(worker.measure(task, self.timeout_s))
            except BaseException as exc:  # never leave a future pending
                fut.set_exception(exc)

    def submit(self, task: MeasureTask) -> Future:
        fault = self.planted.get(task.config.name)
        if fault:
            from dataclasses import replace

            task = replace(task, planted_fault=fault)
        fut: Future = Future()
        self._queue.put((task, fut))
        return fut

    @property
    def restarts(self) -> int:
        return sum(w.restarts for w in self.workers)

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(10)
