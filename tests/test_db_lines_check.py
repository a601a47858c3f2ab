"""An exchange file's lines parsed, then checked a few at a time (kgen.db.lines.parse_chunk):
the records kept, the records left out and the line that stops the file are what a check of
each line right after its parse gives, however many lines are parsed before their check."""

from __future__ import annotations

import json

import pytest

from kgen.db import lines as parse
from kgen.kernels.gemm.problem import gemm_problem
from kgen.kernels.gemm.simt import GemmSimt
from kgen.measurement import Measurement, Provenance, Record, record_to_dict
from kgen.problem import Target

SPEC = GemmSimt()
P = gemm_problem(512, 512, 512)
CONFIGS = SPEC.space(P, Target.h200()).sample(4, seed=3)


def _line(i: int, **changes) -> bytes:
    config = CONFIGS[i % len(CONFIGS)]
    m = Measurement(config.name, config.as_dict(), P.key, times_ms=(0.5,) * 5, error=1e-7)
    d = record_to_dict(Record("gemm", m, Provenance(device="NVIDIA H200", cc="9.0",
                                                     created=f"2026-01-01T00:00:{i:02d}+00:00",
                                                     template_digest=SPEC.template_digest())))
    d.update(changes)
    return (json.dumps(d, sort_keys=True) + "\n").encode()


INVALID = _line(0, config={**CONFIGS[0].as_dict(), "BM": 100})      # no choice of BM
RENAMED = _line(1, config_name="evil_entry")                         # a name its values do not give
MALFORMED = b'{"family": "gemm", \n'
TOO_FAST = _line(2, time_ms=1e-9, times_ms=[1e-9] * 5)


def _file(bad: dict[int, bytes], n: int = 12) -> list[bytes]:
    return [bad.get(i, b"\n" if i == 7 else _line(i)) for i in range(1, n + 1)]


CASES = {
    "all valid": {},
    "invalid, then malformed": {3: INVALID, 9: MALFORMED},
    "malformed, then invalid": {4: MALFORMED, 10: RENAMED},
    "invalid records around a batch's end": {2: RENAMED, 3: INVALID, 4: TOO_FAST, 11: INVALID},
    "the last line invalid": {12: TOO_FAST},
    "the first line malformed": {1: MALFORMED, 2: INVALID},
}


def _parse(lines, batch, monkeypatch, **options):
    monkeypatch.setattr(parse, "CHECK_LINES", batch)
    monkeypatch.setattr(parse, "_VALIDATOR", None)      # a fresh Validator, and none left behind
    parsed, error, skipped = parse.parse_chunk(lines, 1, len(lines), "", check=True, **options)
    return [n for n, _ in parsed], error, skipped


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("as_rows", [True, False])
@pytest.mark.parametrize("skip_invalid", [False, True])
def test_checking_a_few_parsed_lines_at_a_time_finds_what_line_by_line_finds(monkeypatch, case, as_rows,
                                                                            skip_invalid):
    lines = _file(CASES[case])
    one_by_one = _parse(lines, 1, monkeypatch, as_rows=as_rows, skip_invalid=skip_invalid)
    for batch in (2, 3, 5, 64, 10_000):
        assert _parse(lines, batch, monkeypatch, as_rows=as_rows, skip_invalid=skip_invalid) == one_by_one, batch


def test_the_line_that_stops_the_file_and_the_records_kept(monkeypatch):
    lines = _file(CASES["invalid, then malformed"])
    numbers, error, skipped = _parse(lines, 64, monkeypatch, as_rows=True)
    assert numbers == [1, 2] and error[0] == 3 and error[2] is True and "BM=100" in error[1] and skipped == []
    numbers, error, skipped = _parse(lines, 64, monkeypatch, as_rows=True, skip_invalid=True)
    assert numbers == [1, 2, 4, 5, 6, 8] and error[0] == 9 and error[2] is False and [n for n, _ in skipped] == [3]
    lines = _file(CASES["invalid records around a batch's end"])
    numbers, error, skipped = _parse(lines, 3, monkeypatch, as_rows=False, skip_invalid=True)
    assert error is None and [n for n, _ in skipped] == [2, 3, 4, 11]
    assert numbers == [1, 5, 6, 8, 9, 10, 12]
    assert "not the name its values give" in skipped[0][1] and "faster than any GPU" in skipped[2][1]


def test_unchecked_lines_are_parsed_whole(monkeypatch):
    lines = _file(CASES["invalid, then malformed"])
    monkeypatch.setattr(parse, "CHECK_LINES", 2)
    numbers, error, skipped = parse.parse_chunk(lines, 1, len(lines), "", as_rows=True)
    assert [n for n, _ in numbers] == [1, 2, 3, 4, 5, 6, 8] and error[0] == 9 and skipped == []


def test_why_each_gives_why_of_each_record_however_problems_follow_one_another():
    """Validator.why_each (the rows' check) reuses the last record's problem: each verdict is
    still ``why``'s, for a record that differs from a valid one before it in one value, in
    its name, its time or its problem, and for one whose problem comes back after another."""
    from kgen.db.validity import Validator

    other = gemm_problem(256, 256, 256)
    big = {**CONFIGS[0].as_dict(), "BM": 256, "BN": 256}                 # a tile of declared choices
    digest = SPEC.template_digest()

    def fields(config, name=None, key=P.key, time_ms=0.5, cc="9.0", kind=None, family="gemm"):
        return (family, key, name or SPEC.space(P, Target.h200()).make(config).name, config, time_ms,
                "NVIDIA H200", cc, digest, kind)

    c0, c1 = CONFIGS[0].as_dict(), CONFIGS[1].as_dict()
    rows = [fields(c0), fields({**c0, "BM": 100}), fields(c0), fields(c0, name="evil_entry"),
            fields(c1, time_ms=1e-9), fields(c1, key=other.key), fields({**c1, "VA": True}, name=CONFIGS[1].name),
            fields(big, key=other.key), fields(c0), fields(c0, cc="9.x"), fields(c0, family="nosuch"),
            fields(c0, kind="constraints"), fields({**c0, "GM": 1.0}, name=CONFIGS[0].name), fields(c1)]
    expected = [Validator().why(*f) for f in rows]
    assert list(Validator().why_each(rows)) == expected
    assert expected[0] is None and expected[2] is None and expected[-1] is None
    assert all(expected[i] for i in (1, 3, 4, 6, 9, 10, 12))
