"""Which records dispatch may use: the origins an import gives, and the verdicts that vouch for them.

``provenance.origin`` says where a record came from. It is local: export leaves it out and
import sets it, whatever the file says.

- ``""`` (or any origin not below, e.g. ``vendor:...``, ``carried:...``): measured by this kgen
  or shipped with it. Always trusted.
- ``import:<file>``: imported by ``kgen db import`` (or ``import_file`` / ``import_records``).
  Trusted only once ``kgen db verify`` re-measured its config on this device and found its time
  (``kgen.db.verify``).
- ``trusted:<file>``: imported with ``--trust`` (``trust=True``): whoever imported it vouches
  for the file. Trusted. Importing a file again with ``--trust`` makes its records held as
  ``import:`` trusted (``kgen.db.conflicts``).
- ``verify:verified`` / ``verify:rejected``: a re-measurement made here by ``kgen db verify``;
  a measurement of this machine, so trusted itself.

Dispatch uses only trusted records while ``KGEN_VERIFIED_ONLY`` is on (the default). The
kinds are the text before the first ``:``, so a file's name (which may hold ``:``) never
changes a record's kind.

>>> import_origin("theirs.jsonl"), import_origin("theirs.jsonl", trust=True)
('import:theirs.jsonl', 'trusted:theirs.jsonl')
>>> from kgen.db import MemoryStore
>>> trusted_best(MemoryStore(), "gemm", "gemm|m=1", "NVIDIA H200") is None
True
"""

from __future__ import annotations

from kgen.db.base import Database, best_order, canonical, scope, usable_time
from kgen.measurement import Measurement, Record

TOLERANCE = 0.15
VERIFIED, REJECTED = "verify:verified", "verify:rejected"
IMPORTED, TRUSTED = "import:", "trusted:"
STATES = ("local", "trusted", "verified", "unverified", "rejected")


def import_origin(file_name: str, trust: bool = False) -> str:
    """The origin an import gives the records of ``file_name``."""
    return f"{TRUSTED if trust else IMPORTED}{file_name}"


def is_imported(r: Record) -> bool:
    """Imported from a file, trusted or not."""
    origin = r.provenance.origin
    return origin.startswith(IMPORTED) or origin.startswith(TRUSTED)


def is_vouched_for(r: Record) -> bool:
    """Imported with ``--trust``."""
    return r.provenance.origin.startswith(TRUSTED)


def is_verdict(r: Record) -> bool:
    return r.provenance.origin.startswith("verify:")


def _same_config(a: Record, b: Record) -> bool:
    return (a.family, a.measurement.problem_key, a.provenance.device, a.provenance.template_digest,
            a.measurement.config_name) == (b.family, b.measurement.problem_key, b.provenance.device,
                                           b.provenance.template_digest, b.measurement.config_name)


def agrees(imported_ms: float, m: Measurement, tolerance: float = TOLERANCE) -> bool:
    """A correct measurement within ``tolerance`` (relative) of the imported time."""
    return m.ok and abs(m.time_ms - imported_ms) <= tolerance * imported_ms


def trust_state(record: Record, records_of_problem: list[Record], tolerance: float = TOLERANCE) -> str:
    """One of ``STATES``: ``local`` (not imported), ``trusted`` (imported with --trust),
    ``verified`` (its latest verdict here agrees with its time), ``rejected`` (a verdict exists
    and does not), ``unverified`` (no verdict yet). ``records_of_problem`` holds the verdicts."""
    if not is_imported(record):
        return "local"
    if is_vouched_for(record):
        return "trusted"
    verdicts = [v for v in records_of_problem if is_verdict(v) and _same_config(v, record)]
    if not verdicts:
        return "unverified"
    last = max(verdicts, key=lambda v: (v.provenance.created, canonical(v)))
    ok = (record.measurement.ok and last.provenance.origin == VERIFIED
          and agrees(record.measurement.time_ms, last.measurement, tolerance))
    return "verified" if ok else "rejected"


def is_trusted(record: Record, records_of_problem: list[Record], tolerance: float = TOLERANCE) -> bool:
    """True for records measured here and imports made with --trust; another imported one only
    when its latest verdict (among ``records_of_problem``) is ``verify:verified`` and agrees
    with its time."""
    return trust_state(record, records_of_problem, tolerance) in ("local", "trusted", "verified")


def needs_verdict(record: Record) -> bool:
    """Imported without --trust: dispatch asks for a verdict before using it."""
    return is_imported(record) and not is_vouched_for(record)


def trusted_best(db: Database, family: str, problem_key: str, device: str, template_digest: str | None = None,
                 *, policy: str = "device", cc: str | None = None) -> Record | None:
    """``db.best`` restricted to trusted records (what dispatch uses under KGEN_VERIFIED_ONLY):
    one ``best`` query when the fastest record needs no verdict, else a look at the problem's
    records and their verdicts."""
    best = db.best(family, problem_key, device, template_digest, policy=policy, cc=cc)
    if best is None or not needs_verdict(best):
        return best
    on_device, on_cc = scope(policy, device, cc)
    records = db.records(family, problem_key, on_device, template_digest)
    ok = [r for r in records if usable_time(r) is not None and (on_cc is None or r.provenance.cc == on_cc)
          and is_trusted(r, records)]
    return min(ok, key=lambda r: best_order(r, canonical(r))) if ok else None
