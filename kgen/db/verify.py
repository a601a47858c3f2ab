"""Trust in imported records: re-measure them here and store a verdict.

``verify`` re-measures the fastest imported config (``provenance.origin`` ``import:...``) of
each problem on this device and stores the new measurement as a local Record whose origin
is ``verify:verified`` (correct and within 15 % of the imported time) or ``verify:rejected``.
``kgen.db.trust`` reads those verdicts (``is_trusted``, ``trusted_best``: what dispatch may use).

>>> from kgen.db import MemoryStore
>>> trusted_best(MemoryStore(), "gemm", "gemm|m=1", "NVIDIA H200") is None
True
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kgen.db.base import Database, best_order, canonical, usable_time
from kgen.db.trust import (REJECTED, TOLERANCE, VERIFIED, agrees, is_imported, is_trusted, is_verdict,  # noqa: F401
                           trusted_best)
from kgen.errors import KgenError
from kgen.measure.bench import l2_label
from kgen.measurement import Measurement, Record, Timing
from kgen.vendor import VENDOR_DIGEST


@dataclass(frozen=True)
class Verdict:
    family: str
    problem_key: str
    config_name: str
    imported_ms: float
    measured_ms: float | None
    verdict: str            # "verified" | "rejected" | "skipped"
    detail: str = ""


def to_verify(db: Database, device: str, family: str | None = None) -> list[Record]:
    """Per (family, problem, template) with no trusted imported record yet: the fastest
    imported record that has no verdict."""
    out = []
    for fam in [family] if family else db.families():
        for key in db.problems(fam, device):
            records = db.records(fam, key, device)
            for digest in sorted({r.provenance.template_digest for r in records} - {VENDOR_DIGEST}):
                mine = [r for r in records if r.provenance.template_digest == digest]
                imported = [r for r in mine if is_imported(r) and usable_time(r) is not None]
                if any(is_trusted(r, mine) for r in imported):
                    continue
                judged = {v.measurement.config_name for v in mine if is_verdict(v)}
                todo = [r for r in imported if r.measurement.config_name not in judged]
                if todo:
                    out.append(min(todo, key=lambda r: best_order(r, canonical(r))))
    return out


def _task(record: Record, runner, target):
    """The MeasureTask re-measuring ``record``'s config (compiled here when the runner needs it)."""
    from kgen.compile import compile_source
    from kgen.measure.task import MeasureTask
    from kgen.problem import Problem
    from kgen.render import render
    from kgen.space import Config
    from kgen.registry import get_spec

    m = record.measurement
    problem = Problem.from_key(m.problem_key)
    config = Config(m.config_name, tuple(m.config.items()))
    spec, compiled = None, None
    if runner.needs_binaries:
        spec = get_spec(record.family)
        if spec.template_digest() != record.provenance.template_digest:
            raise KgenError("measured with another version of the template; cannot be re-measured")
        space = spec.space(problem, target)
        config = space.make(dict(m.config))
        if config.name != m.config_name:
            raise KgenError(f"this kgen names that config {config.name}")
        compiled = compile_source(render(spec, problem, config, target, space))
        if compiled.failure is not None:
            return None, Measurement(m.config_name, dict(m.config), m.problem_key, failure=compiled.failure)
    from kgen.knobs import knobs

    timing = Timing(warmup=knobs.bench_warmup, runs=max(20, knobs.bench_runs),
                    l2=l2_label())
    return MeasureTask.of(spec, problem, config, compiled, timing=timing), None


def verify(db: Database, runner, target, family: str | None = None,
           tolerance: float = TOLERANCE) -> list[Verdict]:
    """Re-measure imported best configs on ``target`` through ``runner``; store each result
    (origin ``verify:verified`` / ``verify:rejected``) and return the verdicts."""
    from kgen.provenance import provenance_for

    verdicts = []
    for r in to_verify(db, target.name, family):
        m, imported_ms = r.measurement, r.measurement.time_ms
        try:
            task, failed = _task(r, runner, target)
            new = failed or runner.submit(task).result()
        except KgenError as exc:
            verdicts.append(Verdict(r.family, m.problem_key, m.config_name, imported_ms, None, "skipped", exc.message))
            continue
        ok = agrees(imported_ms, new, tolerance)
        provenance = dataclasses.replace(provenance_for(target, r.provenance.template_digest),
                                         origin=VERIFIED if ok else REJECTED)
        db.commit([Record(r.family, dataclasses.replace(new, problem_key=m.problem_key), provenance)])
        detail = (f"{new.failure.kind}: {new.failure.detail}" if new.failure else "no time" if not new.ok
                  else f"{new.time_ms / imported_ms:.2f}x the imported time")
        verdicts.append(Verdict(r.family, m.problem_key, m.config_name, imported_ms, new.time_ms,
                                "verified" if ok else "rejected", detail))
    return verdicts
