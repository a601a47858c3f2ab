"""Tuning an untuned problem while calls go on (``KGEN_TUNE_ON_MISS`` trials): the tuner that
dispatch is given, since dispatch itself knows neither runners nor search.

>>> callable(miss_tuner())
True
"""

from __future__ import annotations

from typing import Callable


def miss_tuner(runner_for: Callable | None = None) -> Callable:
    """A function (spec, problem, target, device, db) that tunes ``problem`` with
    ``KGEN_TUNE_ON_MISS`` trials on a runner from ``runner_for(device)`` (default: this
    machine's GPU ``device``)."""

    def tune_missing(spec, problem, target, device: int, db) -> None:
        from kgen.knobs import knobs
        from kgen.runners import LocalGPURunner
        from kgen.search import tune

        runner = runner_for(device) if runner_for else LocalGPURunner((device,), target.l2_bytes)
        with runner:
            tune(spec, problem, target, runner, db, trials=knobs.tune_on_miss)

    return tune_missing
