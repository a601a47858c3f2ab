"""Tune many problems at once over one runner, and log every trial.

Each problem gets its own Tuner, run in its own thread; all share the runner (whose slots
bound how many measurements run at once), one compile pool and the database. Each Tuner
keeps at least ``runner.slots`` trials in flight, so the slots stay busy while any problem
has trials left.

>>> # results = tune_many(spec, problems, target, DaskRunner(client), db, trials=100)
>>> # results = tune_many(None, read_problems("problems.jsonl", spec, target), target, runner, db)
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable

from kgen.errors import KgenError
from kgen.fields import parse_json
from kgen.problem import Problem, Target
from kgen.registry import get_spec
from kgen.samplers import check_sampler
from kgen.search import TuneProgress, TuneResult, Tuner


def tune_many(spec, problems: Iterable, target: Target, runner, db, trials: int = 100,
              timeout_s: float | None = None, sampler: str = "kgen", seed: int | None = None,
              on_progress: Callable[[TuneProgress], None] | None = None,
              warm_start: bool = True) -> list[TuneResult]:
    """Tune every problem (``trials`` each, stored ones included); results in the given order.
    ``problems`` holds Problems of ``spec``, or (spec, problem) pairs (``read_problems``)."""
    from kgen.compile import CompilePool

    check_sampler(sampler)
    unique: dict[str, tuple] = {}
    for item in problems:
        pair = item if isinstance(item, tuple) else (spec, item)
        unique.setdefault(pair[1].key, pair)
    todo = list(unique.values())
    if not todo:
        raise KgenError("no problems to tune", remedy="give at least one problem")
    lock = threading.Lock()

    def progress(p: TuneProgress) -> None:
        if on_progress:
            with lock:
                on_progress(p)

    pool = CompilePool() if runner.needs_binaries else None
    try:
        with ThreadPoolExecutor(len(todo), thread_name_prefix="kgen-tune") as threads:
            futures = [threads.submit(Tuner(s, p, target, runner, db, sampler=sampler, seed=seed, pool=pool,
                                            warm_start=warm_start).run, trials, timeout_s, progress)
                       for s, p in todo]
            return [f.result() for f in futures]
    finally:
        if pool is not None:
            pool.close()


def read_problems(path: str | Path, spec, target: Target) -> list[tuple]:
    """(spec, problem) pairs from a file: per line, a JSON object of the family's problem fields
    (made into a problem as ``kgen tune`` makes one, on ``target``) or a problem key."""
    out = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise KgenError(f"cannot read {path}: {exc.strerror}", remedy="give an existing file") from None
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            if line.startswith("{"):
                out.append(spec.request(target, **parse_json(spec.fields(), line, spec.family)))
            else:
                problem = Problem.from_key(line)
                out.append((spec if problem.family == spec.family else get_spec(problem.family), problem))
        except (ValueError, KeyError, TypeError, KgenError) as exc:
            fields = ", ".join(f'"{f.name}": ..' for f in spec.fields())
            raise KgenError(f"{path}:{number}: not a problem ({exc})",
                            remedy=f"write a key per line, or {{{fields}}}") from None
    if not out:
        raise KgenError(f"{path} lists no problems", remedy="write one problem per line")
    return out


class TrialLog:
    """JSON lines, one per finished trial: problem, config, time or failure, worker, timestamps.

    Use as (part of) ``on_progress``. The worker and its start/end come from the runner's
    ``where`` map when it keeps one (DaskRunner), else the worker is "local".
    """

    def __init__(self, path: str | Path, runner=None):
        self.runner = runner
        self._lock = threading.Lock()
        try:
            self._file = open(path, "a", encoding="utf-8")
        except OSError as exc:
            raise KgenError(f"cannot write the trial log {path}: {exc.strerror}",
                            remedy="give a writable path to --log") from None

    def __call__(self, p: TuneProgress) -> None:
        m = p.last
        if m is None:
            return
        where = getattr(self.runner, "where", {}).get((m.problem_key, m.config_name))
        row = {"problem": m.problem_key, "config": m.config_name, "values": m.config,
               "time_ms": m.time_ms, "failure": m.failure.kind if m.failure else None,
               "detail": m.failure.detail if m.failure else None,
               "worker": where[0] if where else "local",
               "started": where[1] if where else None, "ended": where[2] if where else None,
               "logged": time.time()}
        with self._lock:
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()
