"""``kgen report``: one self-contained HTML page (inline CSS and SVG, no script, nothing
fetched, so it works offline) of a tuning database: per family and device, each problem's
best against its baseline, each tune's convergence, and a roofline placing every best.

``collect`` (kgen.report.data) reads the plain data from a Database; ``render``
(kgen.report.page) draws it; ``write_report`` does both and writes the file. A database
with nothing to report still gets a page, saying so.

>>> import os, tempfile
>>> from kgen.db import MemoryStore
>>> path = os.path.join(tempfile.mkdtemp(), "report.html")
>>> write_report(MemoryStore(), path).sections
()
>>> "No records to report" in open(path).read()
True
"""

from __future__ import annotations

import os
from pathlib import Path

from kgen.db.base import Database
from kgen.errors import ReportError
from kgen.report.data import Report, collect
from kgen.report.page import render

__all__ = ["Report", "collect", "render", "write_report"]


def write_report(db: Database, path: str | os.PathLike, family: str | None = None,
                 device: str | None = None) -> Report:
    """Write the report of ``db`` (only ``family`` / ``device`` where given) to ``path``
    (a temporary file, then renamed over it); returns what it reports."""
    report = collect(db, family, device)
    text = render(report)
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ReportError(f"cannot write the report to {path}: {exc.strerror or exc}", path=str(path)) from None
    return report
