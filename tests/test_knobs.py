"""kgen/knobs.py: every setting declared once, each under its own environment variable."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from kgen.knobs import Knobs, knobs

SOURCE = Path(__file__).resolve().parents[1] / "kgen" / "knobs.py"


def _declared() -> list[tuple[str, str]]:
    """(attribute, environment variable) of each knob as written in the class body (a second
    declaration of a name silently replaces the first at run time, so the source is read)."""
    tree = ast.parse(SOURCE.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Knobs"]
    out = []
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and \
                getattr(stmt.value.func, "id", "") == "_EnvKnob":
            (target,) = stmt.targets
            out.append((target.id, stmt.value.args[0].value))
    return out


def test_each_knob_is_declared_once_under_its_own_variable():
    declared = _declared()
    assert len(declared) == len(Knobs.describe())
    names = Counter(name for name, _ in declared)
    variables = Counter(env for _, env in declared)
    assert [n for n, c in names.items() if c > 1] == []
    assert [v for v, c in variables.items() if c > 1] == []


def test_the_dask_measurement_timeout_and_the_dist_collective_timeout_are_apart(monkeypatch):
    monkeypatch.setenv("KGEN_DIST_TIMEOUT", "7")
    monkeypatch.setenv("KGEN_DASK_TIMEOUT", "11")
    assert knobs.dist_timeout_s == 7.0 and knobs.dask_timeout_s == 11.0
