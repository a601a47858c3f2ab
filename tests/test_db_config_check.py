"""A checked parse's config, checked once: ``Validator.passed`` vouches for a config made of its
space's declared choices, so the schema leaves it alone; any other config is checked by the
schema as it was, before its record's validity. Each line is kept, left out or refused exactly
as a parse that checks the whole line with the schema first, then the record, does."""

from __future__ import annotations

import json
import random
import re

import pytest

from kgen import KernelSpec, Param, Problem, Space, registry
from kgen.db import lines as parse
from kgen.db.base import row_of_dict
from kgen.db.codec import loads
from kgen.db.schema import check_line, choices_are_scalars
from kgen.db.validity import Validator
from kgen.errors import DatabaseError
from kgen.kernels.gemm.problem import gemm_problem
from kgen.kernels.gemm.simt import GemmSimt
from kgen.measurement import Measurement, Provenance, Record, record_to_dict
from kgen.problem import Target
from kgen.space import _IDENTIFIER, _is_identifier
from kgen.vendor import VENDOR_CONFIG, VENDOR_DIGEST

SPEC = GemmSimt()
P, OTHER = gemm_problem(512, 512, 512), gemm_problem(256, 256, 256)
CONFIGS = SPEC.space(P, Target.h200()).sample(4, seed=5)


def _dict(i: int, problem: Problem = P, family: str = "gemm", config=None, name=None, digest=None) -> dict:
    config = config or CONFIGS[i % len(CONFIGS)]
    values = config if isinstance(config, dict) else config.as_dict()
    m = Measurement(name or getattr(config, "name", "x"), values, problem.key, times_ms=(0.5,) * 5, error=1e-7)
    return record_to_dict(Record(family, m, Provenance(device="NVIDIA H200", cc="9.0",
                                                        created=f"2026-01-01T00:00:{i:02d}+00:00",
                                                        template_digest=digest or SPEC.template_digest())))


def _line(d: dict, **changes) -> bytes:
    return (json.dumps({**d, **changes}, sort_keys=True) + "\n").encode()


def _with_config(i: int, **values) -> bytes:
    d = _dict(i)
    return _line(d, config={**d["config"], **values})


BAD_CONFIGS = {                                       # what the schema refuses in a config
    "a list": _with_config(3, BK=[16]),
    "an object": _with_config(3, BK={"x": 1}),
    "past 64 bits": _with_config(3, BM=2 ** 64),
    "a long key": _with_config(3, **{"k" * 300: 1}),
    "a long text": _with_config(3, BM="x" * 300),
    "not an object": _line(_dict(3), config=[1, 2]),
    "a list, and a negative time": _line(_dict(3), config=[1], time_ms=-1.0),
}
INVALID = _with_config(2, BM=100)                     # well-formed, no choice of BM
HOSTILE = _with_config(2, DB=True)                    # a scalar, not of its choice's type


def _reference(lines: list[bytes], skip_invalid: bool):
    """Line by line, as before: the whole line by the schema, then its record's validity."""
    validator, kept, skipped = Validator(), [], []
    for number, raw in enumerate(lines, 1):
        try:
            obj = loads(raw)
            check_line(obj)
            row = row_of_dict(obj)
        except DatabaseError as exc:
            return kept, (number, exc.message, False), skipped
        why = validator.why(row[0], row[1], row[5], obj["config"], row[6], row[2], row[3], row[4], row[7])
        if why and not skip_invalid:
            return kept, (number, why, True), skipped
        (skipped.append((number, why)) if why else kept.append(number))
    return kept, None, skipped


def _parsed(lines, batch, monkeypatch, skip_invalid):
    monkeypatch.setattr(parse, "CHECK_LINES", batch)
    monkeypatch.setattr(parse, "_VALIDATOR", None)
    out, error, skipped = parse.parse_chunk(lines, 1, len(lines), "", as_rows=True, check=True,
                                            skip_invalid=skip_invalid)
    return [n for n, _ in out], error, skipped


@pytest.mark.parametrize("bad", sorted(BAD_CONFIGS))
@pytest.mark.parametrize("skip_invalid", [False, True])
def test_a_bad_config_stops_the_file_with_the_schemas_words(monkeypatch, bad, skip_invalid):
    lines = [_line(_dict(1)), HOSTILE, _line(_dict(4)), INVALID, BAD_CONFIGS[bad], _line(_dict(6)), INVALID]
    expected = _reference(lines, skip_invalid)
    for batch in (1, 3, 64):
        assert _parsed(lines, batch, monkeypatch, skip_invalid) == expected, batch
    kept, error, skipped = expected
    if skip_invalid:                                  # a malformed line is never skipped
        assert kept == [1, 3] and [n for n, _ in skipped] == [2, 4] and error[0] == 5 and error[2] is False
        assert error[1].startswith("field 'config")
    else:
        assert kept == [1] and error[0] == 2 and error[2] is True


def test_a_bad_config_that_breaks_the_row_is_named_as_the_schema_names_it(monkeypatch):
    """Where making the row fails on what the schema would have refused, the schema's words."""
    real = parse.row_of_dict

    def fragile(d):
        if isinstance(d.get("config"), dict) and isinstance(d["config"].get("BK"), list):
            raise TypeError("made to fail")
        return real(d)

    monkeypatch.setattr(parse, "row_of_dict", fragile)
    lines = [_line(_dict(1)), BAD_CONFIGS["a list"]]
    _, error, _ = _parsed(lines, 64, monkeypatch, False)
    assert error[0] == 2 and error[2] is False and error[1] == _reference(lines, False)[1][1]


def test_records_of_several_problems_in_a_row_are_judged_each_by_its_own(monkeypatch):
    """A config valid for one problem and not another (a 256-row tile for 512 rows, not for 16):
    the same values, two verdicts."""
    small, space = gemm_problem(16, 512, 512), SPEC.space(P, Target.h200())
    big = next(c.as_dict() for c in space.sample(200, seed=2) if c["BM"] == 256)
    assert not space.violations(big) and SPEC.space(small, Target.h200()).violations(big)
    name = space.make(big).name
    lines = [_line(_dict(1, config=big, name=name)), _line(_dict(2, small, config=big, name=name)),
             _line(_dict(3, config=big, name=name))]
    for skip_invalid in (False, True):
        expected = _reference(lines, skip_invalid)
        assert _parsed(lines, 64, monkeypatch, skip_invalid) == expected
    assert expected[0] == [1, 3] and [n for n, _ in expected[2]] == [2]


def test_passed_vouches_only_for_records_why_finds_valid():
    """Over records of every kind, in a random order: ``passed`` stops at or before each record
    ``why`` refuses, never after, and is ``len`` only where every record is valid."""
    digest = SPEC.template_digest()

    def fields(config, name=None, problem=P, time_ms=0.5, kind=None, family="gemm", cc="9.0", d=digest):
        values = config if isinstance(config, dict) else config.as_dict()
        return (family, problem.key, name or SPEC.space(problem, Target.h200()).make(values).name, values, time_ms,
                "NVIDIA H200", cc, d, kind)

    other = SPEC.space(OTHER, Target.h200())                      # c1: a config valid for both problems
    c0 = CONFIGS[0].as_dict()
    c1 = next(c.as_dict() for c in SPEC.space(P, Target.h200()).sample(50, seed=5)[1:]
              if not other.violations(c.as_dict()))
    pool = [fields(c0), fields(c1), fields(c1, problem=OTHER), fields(c0, time_ms=None),
            fields({**c0, "BM": 100}), fields({**c0, "DB": True}, name=CONFIGS[0].name),
            fields({**c0, "GM": 1.0}, name=CONFIGS[0].name), fields(c0, name="evil_entry"), fields(c0, time_ms=1e-9),
            fields(c0, kind="constraints"), fields(c0, family="nosuch"), fields(c0, cc="9.x"),
            fields({}, name=VENDOR_CONFIG, d=VENDOR_DIGEST), fields({**c0, "EXTRA": 1}, name=CONFIGS[0].name),
            fields({k: v for k, v in c0.items() if k != "BM"}, name=CONFIGS[0].name)]
    verdicts = {i: Validator().why(*f) for i, f in enumerate(pool)}
    assert [i for i, why in verdicts.items() if why is None] == [0, 1, 2, 3, 9, 12]
    rng = random.Random(7)
    for _ in range(300):
        picks = [rng.randrange(len(pool)) for _ in range(rng.randrange(1, 12))]
        rows, validator = [pool[i] for i in picks], Validator()
        start = rng.randrange(len(rows))
        stop = validator.passed(rows, start)
        assert start <= stop <= len(rows)
        assert all(verdicts[i] is None for i in picks[start:stop])
        # where it stops: a record why refuses, a failure of kind constraints or a vendor record
        assert stop == len(rows) or verdicts[picks[stop]] is not None or picks[stop] in (9, 12)
        assert stop < len(rows) or all(verdicts[i] is None for i in picks[start:])


class _Wide(KernelSpec):
    """A family whose declared choices include one the schema refuses in a file (past 64 bits)."""

    family = "toywide"
    template_source = "extern \"C\" __global__ void {{ entry }}() {}"
    shape_params = ("n",)

    def space(self, problem, target):
        return Space([Param("BIG", (1, 2 ** 70))], namer=lambda v: f"toywide_b{v['BIG']}")


@pytest.fixture
def wide():
    spec = registry.register(_Wide())
    yield spec
    registry._REGISTRY.pop("toywide", None)
    registry._REGISTERED.discard("toywide")


def test_a_family_whose_choices_the_schema_refuses_has_its_configs_checked_by_the_schema(wide, monkeypatch):
    problem = Problem.of("toywide", n=1024)

    def wide_line(i, big):
        m = Measurement(f"toywide_b{big}", {"BIG": big}, problem.key, times_ms=(0.5,) * 5, error=1e-7)
        return _line(record_to_dict(Record("toywide", m, Provenance(
            device="NVIDIA H200", cc="9.0", created=f"2026-01-01T00:00:{i:02d}+00:00",
            template_digest=wide.template_digest()))))

    lines = [wide_line(1, 1), wide_line(2, 2 ** 70), wide_line(3, 1)]
    for skip_invalid in (False, True):
        expected = _reference(lines, skip_invalid)
        assert _parsed(lines, 64, monkeypatch, skip_invalid) == expected
        assert expected[0] == [1] and expected[1][0] == 2 and expected[1][2] is False and "64 bits" in expected[1][1]


def test_choices_are_scalars_within_the_schemas_limits():
    assert choices_are_scalars(SPEC.space(P, Target.h200()).params)
    assert choices_are_scalars([Param("X", (1, 2.5, "a", False))])
    for param in (Param("X", (1, 2 ** 63)), Param("X", (1, -2 ** 63)), Param("X", ("a", "b" * 257)),
                  Param("X" * 257, (1,)), Param("X", (1.0, float("inf")))):
        assert not choices_are_scalars([Param("Y", (1,)), param]), param


def test_a_validator_remembers_each_tuple_of_params_by_itself():
    validator = Validator()
    safe, wide = (Param("X", (1, 2)),), (Param("X", (1, 2 ** 64)),)
    assert validator._scalars(safe) and not validator._scalars(wide) and validator._scalars(safe)


def test_is_identifier_says_what_the_regex_says():
    rng = random.Random(11)
    alphabet = "aZ_09 .-\n\té" + "xyz"
    texts = ["", "a", "_", "9a", "a9", "a\n", "a\n\n", "\na", "é", "aé", "a b", "A_1\n", "if", "None"]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 6))) for _ in range(3000)]
    for text in texts:
        assert _is_identifier(text) == bool(_IDENTIFIER.match(text)), repr(text)
    for other in (None, 5, b"abc"):
        with pytest.raises(TypeError):
            _is_identifier(other)
    assert re.fullmatch(r"\^\[A-Za-z_\]\[A-Za-z0-9_\]\*\$", _IDENTIFIER.pattern)
