"""Fuzzing the import of shared files: lines of valid records mutated (a field replaced by any
JSON value, unicode, huge numbers, deep nesting, truncation, a repeated key, bytes inserted).
Whatever a file holds, an import either stores records that all validate, or raises a
DatabaseError and leaves the database as it was; no other exception escapes."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kgen.db import MemoryStore, SqlStore
from kgen.db.exchange import import_file
from kgen.db.schema import validate_line
from kgen.errors import DatabaseError
from kgen.measurement import record_to_dict

SHIPPED = Path(__file__).parent.parent / "tuning_db" / "nvidia-h200_gemm.jsonl"
BASE = [json.loads(line) for line in SHIPPED.read_text().splitlines()[:3]]
FIELDS = sorted({(k,) for k in BASE[0]} | {("provenance", k) for k in BASE[0]["provenance"]}
                | {("config", k) for k in BASE[0]["config"]} | {("timing", k) for k in BASE[0]["timing"]})

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10 ** 30), max_value=10 ** 30)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


@st.composite
def mutated_file(draw) -> bytes:
    lines = [json.loads(json.dumps(r)) for r in BASE]
    kind = draw(st.sampled_from(["field", "drop", "truncate", "insert", "duplicate", "huge", "nest", "unicode"]))
    target = lines[draw(st.integers(0, len(lines) - 1))]
    path = draw(st.sampled_from(FIELDS))
    holder = target
    for name in path[:-1]:
        holder = holder[name]
    if kind == "field":
        holder[path[-1]] = draw(json_values)
    elif kind == "drop":
        holder.pop(path[-1], None)
    elif kind == "huge":
        holder[path[-1]] = draw(st.sampled_from([10 ** 400, -(10 ** 400), 2 ** 64, 1e308 * 10]))
    elif kind == "unicode":
        holder[path[-1]] = draw(st.text(min_size=1, max_size=30))
    texts = [json.dumps(line, sort_keys=True) for line in lines]
    if kind == "duplicate":
        texts.append(texts[0])
    if kind == "nest":
        texts[0] = "[" * 5000 + "]" * 5000
    data = "".join(t + "\n" for t in texts).encode("utf-8", "surrogatepass")
    if kind == "truncate":
        data = data[:draw(st.integers(0, len(data)))]
    if kind == "insert":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    return data


def _stores(folder: Path):
    return [MemoryStore(), SqlStore(f"sqlite:///{folder / 'kgen.db'}")]


@settings(max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "150")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=mutated_file())
def test_an_import_stores_only_valid_records_or_nothing(data):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "shared.jsonl"
        path.write_bytes(data)
        for db in _stores(folder):
            try:
                before = db.count()
                try:
                    import_file(path, db)
                except DatabaseError:
                    assert db.count() == before
                    continue
                for family in db.families():
                    for record in db.records(family):
                        validate_line(json.loads(json.dumps(record_to_dict(record))))
            finally:
                db.close()


@pytest.mark.parametrize("index", range(len(BASE)))
def test_the_unmutated_lines_import(index, tmp_path):
    path = tmp_path / "shared.jsonl"
    path.write_text(json.dumps(BASE[index]) + "\n")
    assert import_file(path, MemoryStore()).imported == 1


def _t4_document() -> dict:
    from kgen.db.schema import validate_line
    from kgen.db.t4 import to_t4

    return json.loads(json.dumps(to_t4([validate_line(r) for r in BASE])))


def _paths(obj, prefix=()):
    """Every (path) to a value inside a JSON document."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


T4_PATHS = [p for p in _paths(_t4_document()) if p]


@settings(max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(T4_PATHS), value=json_values | st.sampled_from([10 ** 400, 2 ** 64, "x" * 300]),
       drop=st.booleans())
def test_a_mutated_t4_file_imports_valid_records_or_nothing(path, value, drop):
    doc = _t4_document()
    holder = doc
    for name in path[:-1]:
        holder = holder[name]
    if drop and isinstance(holder, dict):
        holder.pop(path[-1], None)
    else:
        holder[path[-1]] = value
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "shared.json"
        file.write_text(json.dumps(doc))
        db = MemoryStore()
        try:
            import_file(file, db, fmt="t4")
        except DatabaseError:
            assert db.count() == 0
            return
        for family in db.families():
            for record in db.records(family):
                validate_line(json.loads(json.dumps(record_to_dict(record))))
