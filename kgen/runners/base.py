"""The runner interface: a concurrent.futures-style executor of MeasureTasks."""

from __future__ import annotations

from concurrent.futures import Future

from kgen.measure.task import MeasureTask


class Runner:
    """Measures compiled configs. ``slots`` is how many measurements may run at once."""

    slots: int = 1
    needs_binaries: bool = True   # False: the runner answers without compiled code (replay)

    def submit(self, task: MeasureTask) -> Future:
        raise NotImplementedError

    def measurable(self, problem_key: str) -> dict[str, dict] | None:
        """The only configs this runner can answer for a problem, name -> values (None: any);
        a tune searches these alone (``kgen.samplers.domain``)."""
        return None

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
