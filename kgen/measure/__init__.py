"""GPU-side measurement: timing (bench), verification (verify), worker processes (worker)."""

from kgen.measure.task import MeasureTask

__all__ = ["MeasureTask"]
