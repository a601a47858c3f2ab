"""The typed results that flow from compile and measure to search and the database.

A failure is data: ``Failure(kind, detail)`` with ``kind`` from the T4 invalidity
vocabulary (constraints, compile, runtime, correctness, timeout).
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass, field
from typing import Any

FAILURE_KINDS = ("constraints", "compile", "runtime", "correctness", "timeout")


@dataclass(frozen=True)
class Failure:
    kind: str
    detail: str = ""

    def __post_init__(self):
        if self.kind not in FAILURE_KINDS:
            raise ValueError(f"failure kind {self.kind!r} is not one of {FAILURE_KINDS}")


def _flat_dict(obj) -> dict[str, Any]:
    """Fields of a dataclass of plain values (dataclasses.asdict, without its deep copy)."""
    return {name: getattr(obj, name) for name in obj.__dataclass_fields__}


@dataclass(frozen=True)
class Timing:
    """How a time was taken, stored with it."""

    method: str = "cuda_events"
    statistic: str = "median"
    warmup: int = 3
    runs: int = 25
    l2: str = "flushed"

    def as_dict(self) -> dict[str, Any]:
        return _flat_dict(self)


@dataclass(frozen=True)
class Measurement:
    """One config measured (or failed) on one problem and target."""

    config_name: str
    config: dict
    problem_key: str
    times_ms: tuple[float, ...] | None = None
    failure: Failure | None = None
    error: float | None = None           # verification error (max abs over max abs ref)
    timing: Timing = field(default_factory=Timing)
    resources: dict = field(default_factory=dict)   # registers, spills, from the compiler
    compile_s: float = 0.0
    measure_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.failure is None and bool(self.times_ms)

    @functools.cached_property
    def time_ms(self) -> float | None:
        """The statistic the search minimises: the median of the timed runs (computed once:
        import validates and stores it)."""
        return statistics.median(self.times_ms) if self.ok else None


@dataclass(frozen=True)
class Provenance:
    """Where and with what a measurement was made."""

    device: str
    cc: str                  # "9.0"
    driver: int = 0
    cuda_runtime: int = 0
    nvrtc: str = ""
    kgen_version: str = ""
    template_digest: str = ""
    host: str = ""
    created: str = ""        # ISO 8601, UTC
    origin: str = ""         # "" measured here; "import:<file>"; "verify:verified" / "verify:rejected"

    def as_dict(self) -> dict[str, Any]:
        return _flat_dict(self)


@dataclass(frozen=True)
class Record:
    """A Measurement with its family and provenance: one row of the tuning database."""

    family: str
    measurement: Measurement
    provenance: Provenance


def record_to_dict(record: Record) -> dict[str, Any]:
    """A Record as plain JSON-able data (the exchange format's one line).

    ``provenance.origin`` is written only when set, so records measured here read the same
    as before the field existed.
    """
    m = record.measurement
    provenance = record.provenance.as_dict()
    if not provenance["origin"]:
        del provenance["origin"]
    return {
        "family": record.family,
        "problem_key": m.problem_key,
        "config_name": m.config_name,
        "config": dict(m.config),
        "times_ms": list(m.times_ms) if m.times_ms is not None else None,
        "time_ms": m.time_ms,
        "failure": {"kind": m.failure.kind, "detail": m.failure.detail} if m.failure else None,
        "error": m.error,
        "timing": m.timing.as_dict(),
        "resources": dict(m.resources),
        "compile_s": m.compile_s,
        "measure_s": m.measure_s,
        "provenance": provenance,
    }


def record_from_dict(d: dict[str, Any]) -> Record:
    """Inverse of record_to_dict; raises KeyError/TypeError/ValueError on malformed data."""
    failure = d.get("failure")
    times = d.get("times_ms")
    m = Measurement(
        config_name=str(d["config_name"]),
        config=dict(d["config"]),
        problem_key=str(d["problem_key"]),
        times_ms=tuple(float(t) for t in times) if times is not None else None,
        failure=Failure(str(failure["kind"]), str(failure.get("detail", ""))) if failure else None,
        error=float(d["error"]) if d.get("error") is not None else None,
        timing=Timing(**d.get("timing", {})),
        resources=dict(d.get("resources") or {}),
        compile_s=float(d.get("compile_s") or 0.0),
        measure_s=float(d.get("measure_s") or 0.0),
    )
    return Record(family=str(d["family"]), measurement=m, provenance=Provenance(**d["provenance"]))


def _median(values: list[float]) -> float:
    """statistics.median's value (the same arithmetic), without its generality."""
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


def normalized_dict(d: dict[str, Any]) -> dict[str, Any]:
    """``record_to_dict(record_from_dict(d))`` without building the Record: the same values
    and types, for a ``d`` that ``kgen.db.schema`` has validated (the fast path of import).
    Its objects are reused, not copied: ``d`` is not to be used afterwards."""
    failure, times, error = d["failure"], d["times_ms"], d["error"]
    times = list(map(float, times)) if times is not None else None
    provenance = d["provenance"]
    if not provenance.get("origin", True):
        del provenance["origin"]
    return {
        "family": d["family"],
        "problem_key": d["problem_key"],
        "config_name": d["config_name"],
        "config": d["config"],
        "times_ms": times,
        "time_ms": _median(times) if not failure and times else None,
        "failure": {"kind": failure["kind"], "detail": failure["detail"]} if failure else None,
        "error": float(error) if error is not None else None,
        "timing": d["timing"],
        "resources": d["resources"] or {},
        "compile_s": float(d["compile_s"] or 0.0),
        "measure_s": float(d["measure_s"] or 0.0),
        "provenance": provenance,
    }
