"""The fast paths of import give the standard library's answers exactly: JSON text
(``kgen.db.codec``), the compiled line check (``kgen.db.schema``) and rows built from a
checked line (``kgen.db.base.row_of_dict``)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from kgen.db import codec
from kgen.db.base import row_of, row_of_dict
from kgen.db.schema import _RECORD, _RECORD_PASSES, check_line
from kgen.errors import DatabaseError
from kgen.measurement import Failure, Measurement, Provenance, Record, Timing, normalized_dict, record_from_dict, record_to_dict

pytestmark = pytest.mark.skipif(codec.orjson is None, reason="orjson is not installed: only the standard path exists")

_text = st.text(max_size=12)
_float = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.floats(1e-6, 1e-3), st.floats(1e-4, 1e4), st.floats(1e15, 1e17),
                   st.sampled_from([0.0, -0.0, 1e-4, 9.9999e-5, 1e16, 5e-324, 1.5, 100.0, codec._HOLE]))
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), _float, _text)
_json = st.recursive(_scalar, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                     st.dictionaries(_text, inner, max_size=5)), max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_text, _json, max_size=6), st.lists(st.one_of(_float, st.integers(0, 2**66), st.booleans()),
                                                           max_size=30), st.booleans())
def test_dumps_sorted_is_the_standard_librarys_text(rest, times, with_times):
    obj = {**rest, "times_ms": times} if with_times else rest
    assert codec.dumps_sorted(obj) == json.dumps(obj, sort_keys=True)


def test_dumps_sorted_takes_the_fast_path_for_timed_runs(monkeypatch):
    calls = []
    monkeypatch.setattr(codec, "_encode", lambda obj: calls.append(obj) or json.dumps(obj, sort_keys=True))
    obj = {"times_ms": [0.123456789012345, 1.0, 2.5e3, 1e20], "error": 1e-7, "name": "x, y: z"}
    assert codec.dumps_sorted(obj) == json.dumps(obj, sort_keys=True)
    assert calls == [{**obj, "times_ms": codec._HOLE}]            # the runs were not written by json
    calls.clear()
    text_holding_the_stand_in = {"times_ms": [1.0, 2.0], "note": repr(codec._HOLE), "x": codec._HOLE}
    assert codec.dumps_sorted(text_holding_the_stand_in) == json.dumps(text_holding_the_stand_in, sort_keys=True)
    assert calls[-1] == text_holding_the_stand_in                 # the shortcut saw the clash and stepped aside


@settings(max_examples=300, deadline=None)
@given(_json)
def test_loads_reads_what_the_standard_library_reads(value):
    raw = json.dumps(value).encode()
    assert repr(codec.loads(raw)) == repr(json.loads(raw))        # repr: NaN equal to NaN, 1 not equal to 1.0


@pytest.mark.parametrize("raw", [b'{"a": 18446744073709551616}', b"-9223372036854775809", b'[NaN, Infinity]', b'"\\ud800"', b"1E400"])
def test_loads_falls_back_where_orjson_differs(raw):
    assert repr(codec.loads(raw)) == repr(json.loads(raw))


def test_loads_fails_as_the_standard_library_does():
    with pytest.raises(json.JSONDecodeError, match="Expecting"):
        codec.loads(b'{"family": ')


# ---------------------------------------------------------------- the compiled check and rows

def _record(failed=False, origin="", error=1e-7, times=(1.25, 1.5, 1.0)) -> Record:
    m = Measurement(config_name="gemm_x", config={"BM": 64, "flag": True, "name": "a", "none": None},
                    problem_key="gemm|m=1", times_ms=None if failed else tuple(times),
                    failure=Failure("compile", "ptxas") if failed else None, error=error,
                    timing=Timing(), resources={"registers": 64}, compile_s=0.25, measure_s=0.0)
    return Record("gemm", m, Provenance(device="NVIDIA H200", cc="9.0", driver=13000, template_digest="d",
                                        created="2026-12-01T00:00:00+00:00", origin=origin))


VALID = [_record(), _record(failed=True), _record(origin="import:x"), _record(error=float("nan")),
         _record(times=(3, 1, 2)), _record(error=None)]


def _mutations(d: dict):
    """Single-field edits of a line's dict: types swapped, fields dropped or added."""
    odd_values = [None, True, -1, 1.5, float("nan"), float("inf"), "", "x", [], [1.0], {}, {"a": [1]}, 2 ** 70]
    for path in [("family",), ("problem_key",), ("config_name",), ("config",), ("times_ms",), ("time_ms",),
                 ("error",), ("resources",), ("compile_s",), ("measure_s",), ("failure",), ("timing",),
                 ("provenance",), ("timing", "runs"), ("timing", "method"), ("provenance", "device"),
                 ("provenance", "driver"), ("provenance", "origin"), ("config", "BM")]:
        for value in odd_values + ["<drop>"]:
            e = json.loads(json.dumps(d))
            where = e
            for key in path[:-1]:
                where = where[key]
            if value == "<drop>":
                where.pop(path[-1], None)
            else:
                where[path[-1]] = value
            yield e
    yield {**json.loads(json.dumps(d)), "colour": "red"}
    yield [1, 2]


@pytest.mark.parametrize("record", VALID, ids=range(len(VALID)))
def test_the_compiled_check_passes_valid_lines_and_is_never_more_lenient(record):
    d = json.loads(json.dumps(record_to_dict(record)))
    assert _RECORD_PASSES(d)
    check_line(d)
    for edited in _mutations(d):
        try:
            passes = _RECORD_PASSES(edited)
        except (TypeError, ValueError, OverflowError):
            passes = False
        if passes:
            _RECORD(edited)                                       # the checkers accept it too
        else:
            try:
                _RECORD(edited)
            except DatabaseError:
                continue
            check_line(edited)                                    # stricter than the checkers: still accepted


@pytest.mark.parametrize("record", VALID, ids=range(len(VALID)))
def test_rows_from_a_checked_line_are_the_rows_of_its_record(record):
    d = json.loads(json.dumps(record_to_dict(record)))
    d["time_ms"] = 99.0                      # a stored time_ms is recomputed from the runs, as a Record does
    assert json.dumps(normalized_dict(d), sort_keys=True) == json.dumps(record_to_dict(record_from_dict(d)), sort_keys=True)
    assert row_of_dict(d) == row_of(record_from_dict(d))
    assert all(type(a) is type(b) for a, b in zip(row_of_dict(d), row_of(record_from_dict(d))))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=40))
def test_the_import_median_is_statistics_median(values):
    import statistics

    from kgen.measurement import _median

    assert repr(_median(values)) == repr(statistics.median(values))
