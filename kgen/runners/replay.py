"""Answer measurements from a recording, with no GPU.

A recording is JSON lines (optionally gzipped), one measured config each, in the tuning
database's exchange format (``kgen.measurement.record_to_dict``). Each replayed time is
resampled from the config's recorded runs, so a replayed search sees realistic noise.
"""

from __future__ import annotations

import gzip
import json
import random
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from kgen.errors import KgenError
from kgen.measure.task import MeasureTask
from kgen.measurement import Failure, Measurement, Record, Timing, record_from_dict
from kgen.runners.base import Runner


@dataclass
class Recording:
    """Recorded measurements of one or more problems, by (problem key, config name)."""

    entries: dict[tuple[str, str], Measurement]
    devices: tuple[str, ...] = ()

    def device_name(self) -> str:
        """The device the recording was made on (the first, if several)."""
        return self.devices[0] if self.devices else ""

    @classmethod
    def from_records(cls, records: Iterable[Record]) -> "Recording":
        records = list(records)
        return cls({(r.measurement.problem_key, r.measurement.config_name): r.measurement for r in records},
                   tuple(sorted({r.provenance.device for r in records})))

    @classmethod
    def load(cls, path: str | Path) -> "Recording":
        path = Path(path)
        remedy = "give a file written by `kgen db export` or a tune's recording (.jsonl or .jsonl.gz)"
        if not path.is_file():
            raise KgenError(f"{path} is {'a folder' if path.is_dir() else 'not there'}, not a recording",
                            remedy=remedy)
        opener = gzip.open if path.suffix == ".gz" else open
        records = []
        number = 0
        try:
            with opener(path, "rt") as f:
                for number, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        records.append(record_from_dict(json.loads(line)))
                    except (ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
                        raise KgenError(f"{path}:{number} is not a recorded measurement ({exc})",
                                        remedy=remedy) from None
        except (OSError, EOFError, UnicodeDecodeError) as exc:   # not gzip, cut short, binary data
            raise KgenError(f"{path}:{number + 1} cannot be read as a recording ({type(exc).__name__}: {exc})",
                            remedy=remedy) from None
        return cls.from_records(records)

    def problems(self) -> set[str]:
        return {p for p, _ in self.entries}


class ReplayRunner(Runner):
    """A runner that looks measurements up instead of running them."""

    needs_binaries = False

    def __init__(self, recording: Recording, seed: int = 0, slots: int = 1):
        self.recording = recording
        self.rng = random.Random(seed)
        self.slots = slots

    def answer(self, task: MeasureTask) -> Measurement:
        recorded = self.recording.entries.get((task.problem.key, task.config.name))
        base = dict(config_name=task.config.name, config=task.config.as_dict(),
                    problem_key=task.problem.key, timing=Timing(method="replay"))
        if recorded is None:
            return Measurement(**base, failure=Failure("runtime", "not in the recording"))
        if not recorded.ok:
            return Measurement(**base, failure=recorded.failure, error=recorded.error)
        runs = recorded.times_ms
        times = tuple(self.rng.choice(runs) for _ in runs)
        return Measurement(**base, times_ms=times, error=recorded.error, resources=recorded.resources)

    def measurable(self, problem_key: str) -> dict[str, dict] | None:
        return {name: dict(m.config) for (key, name), m in self.recording.entries.items() if key == problem_key}

    def submit(self, task: MeasureTask) -> Future:
        fut: Future = Future()
        fut.set_result(self.answer(task))
        return fut
