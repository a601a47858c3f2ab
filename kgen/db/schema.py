"""The schema of one exchange line: ``validate_line(obj) -> Record`` or a precise error.

Every field ``record_to_dict`` writes is required (``provenance.origin`` may be absent);
unknown fields, wrong types, negative or non-finite times and failure kinds outside the
T4 vocabulary are refused, naming the field.

>>> validate_line({"family": "gemm"})
Traceback (most recent call last):
kgen.errors.DatabaseError: missing field 'problem_key'
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from kgen.errors import DatabaseError
from kgen.measurement import FAILURE_KINDS, Provenance, Record, Timing, record_from_dict

def _kind(v: Any) -> str:
    names = {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string",
             list: "array", dict: "object"}
    text = json.dumps(v)[:40] if isinstance(v, (str, int, float)) else ""
    return f"{names.get(type(v), type(v).__name__)} {text}".strip()


def _bad(path: str, want: str, v: Any) -> DatabaseError:
    return DatabaseError(f"field {path!r} must be {want}, got {_kind(v)}")


def _str(v, path):
    if type(v) is not str:
        raise _bad(path, "a string", v)


def _name(v, path):
    if type(v) is not str or not v:
        raise _bad(path, "a non-empty string", v)


def _int(v, path):
    if type(v) is not int or v < 0:
        raise _bad(path, "an integer >= 0", v)


def _seconds(v, path):
    if type(v) not in (int, float) or not math.isfinite(v) or v < 0:
        raise _bad(path, "a finite number >= 0", v)


def _time_or_null(v, path):
    if v is not None:
        _seconds(v, path)


def _error(v, path):   # a verification error may be inf or NaN; never negative
    if v is not None and (type(v) not in (int, float) or v < 0):
        raise _bad(path, "null or a number >= 0", v)


_NUMBERS = {int, float}


def _times(v, path):
    if v is None or (type(v) is list and set(map(type, v)) <= _NUMBERS
                     and (not v or (min(v) >= 0 and math.isfinite(sum(v))))):   # the common case, fast
        return
    if type(v) is not list:
        raise _bad(path, "null or an array of times", v)
    for i, t in enumerate(v):
        _seconds(t, f"{path}[{i}]")


MAX_SCALAR_TEXT = 256          # characters of a string value or a key in an object of scalars
MAX_SCALAR_INT = 2 ** 63       # |an integer value| below it


def _scalars(v, path):
    if type(v) is not dict:
        raise _bad(path, "an object", v)
    for k, x in v.items():
        if len(k) > MAX_SCALAR_TEXT:
            raise DatabaseError(f"field {path!r} has a key of {len(k)} characters (at most {MAX_SCALAR_TEXT})")
        if x is not None and type(x) not in (str, int, float, bool):
            raise _bad(f"{path}.{k}", "a string, number, boolean or null", x)
        if (type(x) is int and abs(x) >= MAX_SCALAR_INT) or (type(x) is float and not math.isfinite(x)) \
                or (type(x) is str and len(x) > MAX_SCALAR_TEXT):
            raise _bad(f"{path}.{k}", f"a finite number within 64 bits or a string of at most {MAX_SCALAR_TEXT} "
                                      "characters", x)


def _any_object(v, path):
    if type(v) is not dict:
        raise _bad(path, "an object", v)


def _failure_kind(v, path):
    if v not in FAILURE_KINDS:
        raise DatabaseError(f"field {path!r} is {_kind(v)}, not a failure kind "
                            f"({', '.join(FAILURE_KINDS)})")


class _Object:
    """Checks an object at ``path``: no unknown field, every required one, each by its checker."""

    def __init__(self, path: str, fields: dict, optional: frozenset = frozenset(), nullable: bool = False):
        self.path, self.fields, self.nullable = path, fields, nullable
        self.checks = [(n, c, f"{path}.{n}" if path else n) for n, c in fields.items()]
        self.full, self.required = set(fields), set(fields) - optional

    def __call__(self, v, _path=None) -> None:
        if v is None and self.nullable:
            return
        if type(v) is not dict:
            raise _bad(self.path or "record", "null or an object" if self.nullable else "an object", v)
        keys = v.keys()
        if keys != self.full and keys != self.required:
            prefix = f"{self.path}." if self.path else ""
            unknown = sorted(keys - self.full)
            if unknown:
                raise DatabaseError(f"unknown field {prefix + unknown[0]!r} (this kgen reads "
                                    f"{', '.join(sorted(self.full))}{' at ' + self.path if self.path else ''})")
            missing = [n for n in self.fields if n in self.required and n not in keys]
            if missing:
                raise DatabaseError(f"missing field {prefix + missing[0]!r}")
        for name, check, path in self.checks:
            if name in v:
                check(v[name], path)


_BY_TYPE = {"str": _str, "int": _int, "float": _seconds}


def _fields_of(cls, **special) -> dict:
    """Checkers for a dataclass's fields, from their annotations ("str", "int")."""
    return {f.name: special.get(f.name) or _BY_TYPE[str(f.type)] for f in dataclasses.fields(cls)}


_RECORD = _Object("", {
    "family": _name, "problem_key": _name, "config_name": _name, "config": _scalars, "times_ms": _times,
    "time_ms": _time_or_null, "error": _error, "resources": _scalars, "compile_s": _seconds, "measure_s": _seconds,
    "failure": _Object("failure", {"kind": _failure_kind, "detail": _str}, nullable=True),
    "timing": _Object("timing", _fields_of(Timing)),
    "provenance": _Object("provenance", _fields_of(Provenance, device=_name), optional=frozenset({"origin"}))})


# ---------------------------------------------------------------- the same rules, compiled
# One boolean expression per checker, generated from the tables above, tells in one call
# whether a line is right; only a line it does not pass goes through the checkers, which
# say what is wrong (or accept it: the expression may be stricter, never more lenient).

_EXPRESSIONS = {
    _str: "type({v}) is str",
    _name: "(type({v}) is str and {v} != '')",
    _int: "(type({v}) is int and {v} >= 0)",
    _seconds: "(type({v}) in _NUM and _finite({v}) and {v} >= 0)",
    _time_or_null: "({v} is None or (type({v}) in _NUM and _finite({v}) and {v} >= 0))",
    _error: "({v} is None or (type({v}) in _NUM and not {v} < 0))",
    _times: "({v} is None or (type({v}) is list and set(map(type, {v})) <= _NUMSET"
            " and (not {v} or (min({v}) >= 0 and _finite(sum({v}))))))",
    _scalars: "(type({v}) is dict and set(map(type, {v}.values())) <= _SCALARSET and _bounded({v}))",
    _failure_kind: "{v} in _KINDS",
    _any_object: "type({v}) is dict",
}


def _expression(check, v: str, names: dict) -> str:
    if not isinstance(check, _Object):
        return _EXPRESSIONS[check].format(v=v)
    full, required = f"_K{len(names)}", f"_K{len(names) + 1}"
    names[full], names[required] = check.full, check.required
    parts = [f"(type({v}) is dict and ({v}.keys() == {full} or {v}.keys() == {required}))"]
    for name, inner, _ in check.checks:
        test = _expression(inner, f"{v}[{name!r}]", names)
        parts.append(test if name in check.required else f"({name!r} not in {v} or {test})")
    body = "(" + " and ".join(parts) + ")"
    return f"({v} is None or {body})" if check.nullable else body


def _bounded(values: dict) -> bool:
    """The size limits ``_scalars`` checks, in one pass (the fast path's share of them)."""
    for k, x in values.items():
        t = type(x)
        if len(k) > MAX_SCALAR_TEXT or (t is int and not -MAX_SCALAR_INT < x < MAX_SCALAR_INT) \
                or (t is str and len(x) > MAX_SCALAR_TEXT) or (t is float and not math.isfinite(x)):
            return False
    return True


def _compile(check) -> Any:
    names = {"_NUM": (int, float), "_NUMSET": _NUMBERS, "_finite": math.isfinite, "_KINDS": FAILURE_KINDS,
             "_SCALARSET": {str, int, float, bool, type(None)}, "_bounded": _bounded}
    source = f"def passes(v):\n    return {_expression(check, 'v', names)}\n"
    exec(compile(source, "<kgen.db.schema compiled>", "exec"), names)
    return names["passes"]


_RECORD_PASSES = _compile(_RECORD)
# the same but for the config, of which only its being an object is checked: for a line whose
# record kgen.db.validity checks next, which finds the config made of its space's declared
# choices (all of them objects of scalars, ``choices_are_scalars``) or sends the line back here
_RECORD_PASSES_BUT_CONFIG = _compile(_Object("", {**_RECORD.fields, "config": _any_object}))


def check_line(obj: Any, config: bool = True) -> None:
    """DatabaseError saying which field of one parsed exchange line is wrong, if any. With
    ``config=False`` a config that is an object passes whatever it holds: the caller checks
    it otherwise (``choices_are_scalars``), or calls again with ``config=True``."""
    try:
        if (_RECORD_PASSES if config else _RECORD_PASSES_BUT_CONFIG)(obj):
            return
    except (TypeError, ValueError, OverflowError):     # e.g. a huge integer as a time
        pass
    _RECORD(obj)


def check_config(config: Any) -> None:
    """DatabaseError saying what is wrong with the config of a line that ``check_line(obj,
    config=False)`` passed, if anything: the error ``check_line(obj)`` gives that line."""
    _scalars(config, "config")


def choices_are_scalars(params) -> bool:
    """Whether a config whose every key is the name of one of ``params`` (``kgen.space.Param``)
    and whose every value one of that parameter's choices, of the choice's type, passes the
    schema's check of a config (an object of scalars within their limits)."""
    return all(_scalars_pass({p.name: c}) for p in params for c in p.choices)


def _scalars_pass(values: dict) -> bool:
    try:
        _scalars(values, "config")
    except DatabaseError:
        return False
    return True


def validate_line(obj: Any) -> Record:
    """The Record one parsed exchange line holds; DatabaseError saying which field is wrong.

    >>> validate_line([1, 2])
    Traceback (most recent call last):
    kgen.errors.DatabaseError: field 'record' must be an object, got array
    """
    check_line(obj)
    return record_from_dict(obj)
