"""The vendor library (cuBLAS) as a candidate of a family, stored like any config.

A family whose spec has a ``baseline`` (the library call users already have) gets one more
candidate per problem: config ``cublas``, measured once in every tune on the same inputs,
with the same timing, and stored as a record whose ``template_digest`` is ``vendor`` (so no
search, warm start or nearest-problem ranking ever mistakes it for a template config) and
whose provenance ``origin`` says what was called. Dispatch (``kgen.dispatch``) picks it where
it is the faster measured candidate, and for problems nobody tuned, unless ``KGEN_VENDOR=0``.

>>> is_vendor_config("cublas"), VENDOR_DIGEST
(True, 'vendor')
"""

from __future__ import annotations

import dataclasses

from kgen.measure.task import MeasureTask
from kgen.measurement import Measurement, Provenance, Record, Timing
from kgen.space import Config

VENDOR_CONFIG = "cublas"
VENDOR_DIGEST = "vendor"
VENDOR_ORIGIN = "vendor:cuBLAS (torch.matmul, else cupy.matmul)"


def is_vendor_config(name: str) -> bool:
    return name == VENDOR_CONFIG


def ranking_ms(time_ms: float, vendor: bool) -> float:
    """The time a measured candidate is ranked by against the others: the vendor library's less
    ``KGEN_VENDOR_MARGIN``, so that a generated kernel replaces it only where measured faster
    by more than that fraction (on a closer difference the library the user has keeps its place).

    >>> ranking_ms(10.0, False), round(ranking_ms(10.0, True), 6)
    (10.0, 9.7)
    """
    from kgen.knobs import knobs

    return time_ms * (1.0 - knobs.vendor_margin) if vendor else time_ms


def is_vendor_record(record: Record) -> bool:
    return record.provenance.template_digest == VENDOR_DIGEST


def vendor_provenance(provenance: Provenance) -> Provenance:
    """A template config's provenance, re-marked for the vendor candidate measured beside it."""
    return dataclasses.replace(provenance, template_digest=VENDOR_DIGEST, origin=VENDOR_ORIGIN)


def vendor_task(spec, problem, timing: Timing, seed: int = 0) -> MeasureTask:
    """The task timing (and checking) the spec's library baseline on ``problem``."""
    return MeasureTask(spec=spec, problem=problem, config=Config(VENDOR_CONFIG, ()), cubin=b"", entry="",
                       resources={}, timing=timing, seed=seed, baseline=True)


def vendor_record(family: str, measurement: Measurement, provenance: Provenance) -> Record:
    return Record(family, measurement, vendor_provenance(provenance))
