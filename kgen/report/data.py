"""The plain data of a report, collected from a Database: per family and device, each problem's
best generated kernel against its baseline (the vendor library's record, config ``cublas``),
and each tune's trials in the order they were made. Nothing here draws (kgen.report.page does).

Records are shared data: a family that is not registered here, or a problem key its family
cannot read, leaves the problem listed with no flop or byte count (so off the roofline), never
an error.

>>> from kgen.db import MemoryStore
>>> collect(MemoryStore()).sections
()
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from kgen.db.base import Database, is_replayed, usable_time
from kgen.errors import KgenError
from kgen.knobs import knobs
from kgen.measurement import Record
from kgen.problem import Problem
from kgen.report.convergence import active_seconds
from kgen.report.peaks import Peaks, peaks_for
from kgen.vendor import is_vendor_record


@dataclass(frozen=True)
class ProblemRow:
    """One problem on one device. ``best_ms`` is the fastest measured generated kernel (no
    replayed record, no vendor record); ``baseline_ms`` the vendor library's fastest measured
    time; ``flops`` / ``bytes`` come from the family's spec (None where it cannot say)."""

    key: str
    measured: int
    replayed: int
    failed: int
    best_ms: float | None
    best_config: str | None
    baseline_ms: float | None
    flops: float | None
    bytes: float | None

    @property
    def speed(self) -> float | None:
        """baseline_ms / best_ms: above 1 the generated kernel is the faster."""
        if self.best_ms and self.baseline_ms:
            return self.baseline_ms / self.best_ms
        return None

    @property
    def placed(self) -> bool:
        """Whether the best has a place on a roofline: a time, and work the family counts."""
        return bool(self.best_ms and self.flops and self.bytes)

    @property
    def rate(self) -> float | None:
        """flop/s of the best."""
        return self.flops / (self.best_ms * 1e-3) if self.placed else None

    @property
    def intensity(self) -> float | None:
        """flop per byte of the problem."""
        return self.flops / self.bytes if self.flops and self.bytes else None


@dataclass(frozen=True)
class Trial:
    """One record of a tune: its time (None when it failed), seconds since the tune's first
    record with pauses cut out (None where a time stamp does not read), its failure kind, and
    whether a replay answered it."""

    config: str
    ms: float | None
    seconds: float | None
    failure: str | None
    replayed: bool


@dataclass(frozen=True)
class Tune:
    """The records of one problem, device and template digest, ordered by their time stamps;
    ``pauses``: where on the seconds axis a gap longer than the pause limit was cut out."""

    problem_key: str
    template_digest: str
    trials: tuple[Trial, ...]
    baseline_ms: float | None
    pauses: tuple[float, ...] = ()

    @property
    def times(self) -> list[float | None]:
        return [t.ms for t in self.trials]

    @property
    def best(self) -> Trial | None:
        timed = [t for t in self.trials if t.ms is not None]
        return min(timed, key=lambda t: t.ms) if timed else None


@dataclass(frozen=True)
class Section:
    """A family on a device; ``family_note`` says why no problem is placed (family unknown)."""

    family: str
    device: str
    rows: tuple[ProblemRow, ...]
    tunes: tuple[Tune, ...]
    peaks: Peaks | None
    family_note: str = ""
    baseline_name: str = "baseline"

    @property
    def records(self) -> int:
        return sum(r.measured + r.replayed for r in self.rows)


@dataclass(frozen=True)
class Report:
    sections: tuple[Section, ...]
    filters: tuple[tuple[str, str], ...]
    created: str
    pause_s: float

    @property
    def records(self) -> int:
        return sum(s.records for s in self.sections)


def collect(db: Database, family: str | None = None, device: str | None = None,
            pause_s: float | None = None) -> Report:
    """Every (family, device) of ``db`` (only ``family`` / ``device`` where given) with at
    least one successful record. A tune's gaps longer than ``pause_s`` (default
    KGEN_REPORT_PAUSE_S) are cut from its seconds axis."""
    pause_s = knobs.report_pause_s if pause_s is None else pause_s
    sections = []
    for fam in ([family] if family else db.families()):
        spec, note = _spec(fam)
        by_device: dict[str, list[tuple[str, list[Record]]]] = defaultdict(list)
        for key in db.problems(fam, device):
            mine: dict[str, list[Record]] = defaultdict(list)
            for r in db.records(fam, key, device):
                mine[r.provenance.device].append(r)
            for dev, records in mine.items():
                by_device[dev].append((key, records))
        for dev in sorted(by_device):
            problems = by_device[dev]
            rows = tuple(_row(key, records, spec) for key, records in problems)
            tunes = tuple(t for key, records in problems for t in _tunes(key, records, pause_s))
            sections.append(Section(fam, dev, rows, tunes, peaks_for(dev), note,
                                    spec.baseline_name if spec is not None else "baseline"))
    filters = tuple((k, v) for k, v in (("family", family), ("device", device)) if v)
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return Report(tuple(sections), filters, created, pause_s)


def _spec(family: str):
    """(the family's spec, "") or (None, why there is none)."""
    from kgen.registry import get_spec

    try:
        return get_spec(family), ""
    except KgenError as exc:
        return None, exc.message


def _work(spec, key: str) -> tuple[float | None, float | None]:
    """(flops, bytes) the spec counts for a stored problem key; (None, None) where it cannot."""
    if spec is None:
        return None, None
    try:
        problem = Problem.from_key(key)
        return float(spec.flops(problem)), float(spec.bytes(problem))
    except (KgenError, KeyError, ValueError, TypeError, ArithmeticError):
        return None, None


def _fastest(records: Iterable[Record]) -> Record | None:
    timed = [r for r in records if usable_time(r) is not None]
    return min(timed, key=lambda r: (usable_time(r), r.measurement.config_name), default=None)


def _row(key: str, records: list[Record], spec) -> ProblemRow:
    replayed = sum(1 for r in records if is_replayed(r))
    measured = [r for r in records if not is_replayed(r)]
    best = _fastest(r for r in measured if not is_vendor_record(r))
    baseline = _fastest(r for r in measured if is_vendor_record(r))
    flops, nbytes = _work(spec, key)
    return ProblemRow(key, len(measured), replayed, sum(1 for r in records if r.measurement.failure),
                      usable_time(best) if best else None, best.measurement.config_name if best else None,
                      usable_time(baseline) if baseline else None, flops, nbytes)


def _instant(text: str) -> datetime.datetime | None:
    """A stored ISO 8601 time stamp (no zone: UTC), or None where it does not read."""
    try:
        t = datetime.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=datetime.timezone.utc)


def _when(stamped: tuple) -> tuple:
    """Sort key of a (time stamp, record): by time (stable: equal stamps keep the records'
    config order), records whose stamp does not read last, by its text."""
    instant, record = stamped
    return (0, instant) if instant is not None else (1, record.provenance.created)


def _tunes(key: str, records: list[Record], pause_s: float) -> list[Tune]:
    """The tunes among one problem's records on one device, by template digest (vendor records
    are the baseline, not a tune)."""
    baseline = _fastest(r for r in records if is_vendor_record(r) and not is_replayed(r))
    groups: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        if not is_vendor_record(r):
            groups[r.provenance.template_digest].append(r)
    tunes = []
    for digest in sorted(groups):
        stamped = sorted(((_instant(r.provenance.created), r) for r in groups[digest]), key=_when)
        ordered = [r for _, r in stamped]
        seconds, cuts = active_seconds([t.timestamp() if t is not None else None for t, _ in stamped], pause_s)
        trials = tuple(Trial(r.measurement.config_name, usable_time(r), sec,
                             r.measurement.failure.kind if r.measurement.failure else None, is_replayed(r))
                       for r, sec in zip(ordered, seconds))
        tunes.append(Tune(key, digest, trials, usable_time(baseline) if baseline else None, tuple(cuts)))
    return tunes
