"""The T4 open autotuning results format: kgen records to and from T4 documents.

Each result carries kgen's own record (without the configuration) under the extra key
``"kgen"``, so kgen -> T4 -> kgen loses nothing; other tools ignore it. Results from other
tools are read leniently: missing optional fields are fine, unknown ones are ignored, and
the time comes from ``times.runtimes`` or from the ``time`` measurement.

>>> doc = to_t4([])
>>> doc["schema_version"], doc["results"]
('1.0.0', [])
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from typing import Any, Iterable

from kgen.db.schema import _scalars, _seconds, validate_line
from kgen.errors import DatabaseError
from kgen.measurement import (FAILURE_KINDS, Failure, Measurement, Provenance, Record, Timing,
                              record_to_dict)

SCHEMA_VERSION = "1.0.0"
INVALIDITY = ("correct",) + FAILURE_KINDS
_MS_PER = {"s": 1e3, "ms": 1.0, "us": 1e-3, "µs": 1e-3, "ns": 1e-6}


def to_t4(records: Iterable[Record]) -> dict[str, Any]:
    """A T4 results document of the records, in the order given."""
    return {"schema_version": SCHEMA_VERSION, "results": [_result(r) for r in records]}


def _result(r: Record) -> dict[str, Any]:
    m = r.measurement
    own = record_to_dict(r)
    del own["config"]
    measurements = []
    if m.ok:
        measurements.append({"name": "time", "value": m.time_ms, "unit": "ms"})
    if m.error is not None and math.isfinite(m.error):
        measurements.append({"name": "error", "value": m.error, "unit": ""})
    return {"timestamp": r.provenance.created, "configuration": dict(m.config), "objectives": ["time"],
            "times": {"compilation_time": m.compile_s, "runtimes": [t / 1e3 for t in m.times_ms or ()]},
            "invalidity": m.failure.kind if m.failure else "correct",
            "correctness": 0 if m.failure and m.failure.kind == "correctness" else 1,
            "measurements": measurements, "kgen": own}


def config_name_of(config: dict) -> str:
    """A stable name for a configuration that has none: ``t4_`` + a hash of its values."""
    return "t4_" + hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def from_t4(doc: Any, family: str | None = None, problem_key: str | None = None,
            device: str | None = None, template_digest: str = "") -> list[Record]:
    """Records of a T4 document; ``problem_key`` and ``device`` are needed for results
    written by other tools (``family`` defaults to the key's first part)."""
    if not isinstance(doc, dict):
        raise DatabaseError(f"a T4 document is a JSON object with 'results', not {type(doc).__name__}")
    version = doc.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, str) or version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
        raise DatabaseError(f"schema_version {version!r} is not supported (this kgen reads "
                            f"{SCHEMA_VERSION.split('.')[0]}.x)", remedy="write the file with T4 schema 1.x")
    results = doc.get("results")
    if not isinstance(results, list):
        raise DatabaseError("'results' must be an array of results")
    out = []
    for i, res in enumerate(results):
        try:
            out.append(_record(res, family, problem_key, device, template_digest))
        except DatabaseError as exc:
            raise DatabaseError(f"results[{i}]: {exc.message}", remedy=exc.remedy) from None
    return out


def _record(res: Any, family, problem_key, device, digest) -> Record:
    if not isinstance(res, dict):
        raise DatabaseError(f"a result must be an object, not {type(res).__name__}")
    config = res.get("configuration")
    _scalars(config, "configuration")
    if "kgen" in res:
        own = res["kgen"]
        if not isinstance(own, dict):
            raise DatabaseError("'kgen' must be an object")
        return validate_line({**own, "config": config})
    if not problem_key or not device:
        raise DatabaseError("this result has no kgen keys: the problem and device must be given",
                            remedy="pass --problem KEY --device NAME (kgen db import), "
                                   "or problem_key= and device= (from_t4)")
    invalidity = res.get("invalidity") or "correct"
    if invalidity not in INVALIDITY:
        raise DatabaseError(f"invalidity {invalidity!r} is not one of {', '.join(INVALIDITY)}")
    if invalidity == "correct" and res.get("correctness", 1) == 0:
        invalidity = "correctness"
    times = res.get("times") or {}
    if not isinstance(times, dict):
        raise DatabaseError("'times' must be an object")
    compile_s = times.get("compilation_time", times.get("compilation", 0.0)) or 0.0
    _seconds(compile_s, "times.compilation_time")
    times_ms = _times_ms(times.get("runtimes") or [], _measured_ms(res))
    m = Measurement(config_name=config_name_of(config), config=dict(config), problem_key=problem_key,
                    times_ms=times_ms,
                    failure=None if invalidity == "correct" else Failure(invalidity, "from a T4 file"),
                    timing=Timing(method="t4", warmup=0, runs=len(times_ms or ())), compile_s=float(compile_s))
    created = res.get("timestamp") or ""
    if not isinstance(created, str):
        raise DatabaseError(f"'timestamp' must be a string, not {type(created).__name__}")
    return Record(family or problem_key.split("|")[0], m,
                  Provenance(device=device, cc="", template_digest=digest, created=created))


def _measured_ms(res: dict) -> float | None:
    """The ``time`` measurement in ms, if the result has one."""
    found = res.get("measurements") or []
    if not isinstance(found, list):
        raise DatabaseError("'measurements' must be an array")
    for i, item in enumerate(found):
        if isinstance(item, dict) and item.get("name") == "time":
            value, unit = item.get("value"), item.get("unit") or "ms"
            _seconds(value, f"measurements[{i}].value")
            if unit not in _MS_PER:
                raise DatabaseError(f"measurements[{i}].unit {unit!r} is not one of {', '.join(_MS_PER)}")
            return value * _MS_PER[unit]
    return None


def _times_ms(runtimes: Any, measured_ms: float | None) -> tuple[float, ...] | None:
    """Runtimes in ms: seconds by default; when a time measurement exists, the unit that agrees with it."""
    if not isinstance(runtimes, list):
        raise DatabaseError("'times.runtimes' must be an array")
    for i, t in enumerate(runtimes):
        _seconds(t, f"times.runtimes[{i}]")
    if not runtimes:
        return (measured_ms,) if measured_ms is not None else None
    scale = 1e3
    mid = statistics.median(runtimes)
    if measured_ms and mid > 0:
        scale = min(_MS_PER.values(), key=lambda s: abs(math.log(mid * s / measured_ms)))
    return tuple(float(t) * scale for t in runtimes)
