"""JSON for records, fast and exact: ``loads`` and ``dumps_sorted``.

``dumps_sorted(obj)`` is byte for byte ``json.dumps(obj, sort_keys=True)``. The standard
library spends a third of a record's encoding on ``float.__repr__`` of its timed runs, so
where orjson is installed the runs are written by it when its text is the same: orjson
writes the shortest round-trip digits, as ``repr`` does, in the same notation for finite
numbers from 1e-4 up (below that the two spell exponents differently, and orjson writes
NaN as null). Any other list, or no orjson, takes the standard library's path.

``loads(raw)`` parses one line with orjson where installed, and with the standard library
where orjson refuses something the standard library reads (``NaN``, lone surrogates) or
reads it otherwise (orjson makes integers outside 64 bits floats: a run of 19 digits goes to
the standard library), so both give the same objects and a bad line fails with the
standard library's message.

>>> dumps_sorted({"times_ms": [0.5, 12.25], "error": 1e-07})
'{"error": 1e-07, "times_ms": [0.5, 12.25]}'
"""

from __future__ import annotations

import json
import math
from typing import Any

try:
    import orjson
except ImportError:          # optional: the standard library gives the same results, slower
    orjson = None

_encode = json.JSONEncoder(sort_keys=True).encode
_DIGITS_AS_ZEROS = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))   # digits -> "0", others -> " "
_SMALL = 1e-4                # below this orjson and repr spell floats differently
_HOLE = 7.77e-301            # stands in for the list while the rest is written; its text must occur once


def _numbers_text(values: list) -> str | None:
    """``json.dumps(values)`` for a list of finite numbers >= 1e-4 (orjson's text is then
    the standard library's, separators aside), else None."""
    try:
        if not (_SMALL <= min(values) and math.isfinite(sum(values))):
            return None                        # NaN fails the sum; strings, None, lists: TypeError
        return orjson.dumps(values).decode().replace(",", ", ")
    except (TypeError, orjson.JSONEncodeError):
        return None


def dumps_sorted(obj: dict[str, Any], numbers: str = "times_ms") -> str:
    """``json.dumps(obj, sort_keys=True)``; the list ``obj[numbers]`` is written fast."""
    values = obj.get(numbers) if type(obj) is dict else None
    if orjson is None or type(values) is not list or not values:
        return _encode(obj)
    text = _numbers_text(values)
    if text is None:
        return _encode(obj)
    out = _encode({**obj, numbers: _HOLE})
    hole = repr(_HOLE)
    if out.count(hole) != 1:                   # the stand-in's text appears elsewhere: no shortcut
        return _encode(obj)
    head, tail = out.split(hole)
    return head + text + tail


def loads(raw: bytes) -> Any:
    """One JSON document from bytes (see the module's note on what both parsers accept)."""
    if orjson is not None and b"0" * 19 not in raw.translate(_DIGITS_AS_ZEROS):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw.decode("utf-8"))
