"""A replay that misbehaves on purpose, for tests of how runners survive faulty trials.

``FaultyReplay(recording, {"config name": "crash" | "hang" | "wrong"})`` is a picklable
measuring function (for ``DaskRunner(client, measure=...)``): at a planted config it ends
the worker process, sleeps past any sane timeout, or reports a wrong result; every other
config is answered from the recording.
"""

from __future__ import annotations

import os
import time

from kgen.errors import KgenError
from kgen.measure.task import MeasureTask
from kgen.measurement import Failure, Measurement
from kgen.runners.replay import Recording, ReplayRunner

FAULTS = ("crash", "hang", "wrong")


class FaultyReplay:
    """Replay ``recording``, with ``faults`` planted by config name."""

    needs_binaries = False

    def __init__(self, recording: Recording, faults: dict[str, str], seed: int = 0, hang_s: float = 3600.0):
        bad = {f for f in faults.values() if f not in FAULTS}
        if bad:
            raise KgenError(f"unknown planted faults {sorted(bad)}", remedy=f"use {', '.join(FAULTS)}")
        self.replay = ReplayRunner(recording, seed=seed)
        self.recording = recording
        self.faults = dict(faults)
        self.hang_s = hang_s

    def measurable(self, problem_key: str) -> dict[str, dict] | None:
        return self.replay.measurable(problem_key)

    def __call__(self, task: MeasureTask) -> Measurement:
        fault = self.faults.get(task.config.name)
        if fault == "crash":
            os._exit(70)   # the whole worker process, as a poisoned CUDA context would
        if fault == "hang":
            time.sleep(self.hang_s)
        m = self.replay.answer(task)
        if fault == "wrong":
            return Measurement(config_name=m.config_name, config=m.config, problem_key=m.problem_key,
                               timing=m.timing, failure=Failure("correctness", "planted wrong result"), error=1.0)
        return m
