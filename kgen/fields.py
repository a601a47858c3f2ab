"""A family's problem fields: what a user gives to name a problem (``kgen tune FAMILY --m 4096
...``, a line of a ``--from`` file, ``kgen export --problems``), declared once by the
family's KernelSpec and read, typed and checked here for every front door.

>>> fields = (Field("n", int, "elements"), Field("dtype", str, "element type", "float32", ("float32", "float16")))
>>> parse_args(fields, ["--n", "1000", "--dtype=float16"], "vadd")
{'n': 1000, 'dtype': 'float16'}
>>> complete(fields, {"n": 7}, "vadd")
{'n': 7, 'dtype': 'float32'}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from kgen.errors import FieldError


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
_TYPES = {int: "integer", float: "number", str: "text", bool: "true or false"}


@dataclass(frozen=True)
class Field:
    """One problem field: its name, type (int, float, str or bool), help, default (REQUIRED:
    the user must give it; None: optional) and, where the values are few, their choices."""

    name: str
    type: type = int
    help: str = ""
    default: Any = REQUIRED
    choices: tuple = ()

    def __post_init__(self) -> None:
        if self.type not in _TYPES:
            raise FieldError(f"field {self.name!r} has type {self.type!r}",
                             remedy="declare int, float, str or bool")
        if not self.name.isidentifier():
            raise FieldError(f"field name {self.name!r} is not an identifier", remedy="use letters, digits and _")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    def describe(self) -> str:
        """One line: option, type, default or 'required', choices, help."""
        parts = [f"{self.option} {_TYPES[self.type]}"]
        parts.append("required" if self.required else f"default {self.default}")
        if self.choices:
            parts.append("one of " + ", ".join(map(str, self.choices)))
        return "  ".join(parts) + (f": {self.help}" if self.help else "")

    def convert(self, value: Any, family: str) -> Any:
        """``value`` (text from a command line, or a JSON value) as this field's type."""
        if value is None and self.default is None:
            return None
        try:
            if self.type is bool:
                if isinstance(value, str):
                    lowered = value.strip().lower()
                    if lowered not in ("1", "0", "true", "false", "yes", "no"):
                        raise ValueError(value)
                    out: Any = lowered in ("1", "true", "yes")
                elif isinstance(value, bool):
                    out = value
                else:
                    raise ValueError(value)
            elif self.type is int:
                if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                    raise ValueError(value)
                out = int(value)
            elif self.type is float:
                if isinstance(value, bool):
                    raise ValueError(value)
                out = float(value)
            else:
                if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                    raise ValueError(value)
                out = str(value)
        except (TypeError, ValueError):
            raise FieldError(f"{family}: {self.option} takes {_TYPES[self.type]}, not {value!r}",
                             remedy=self.describe()) from None
        if self.choices and out not in self.choices:
            raise FieldError(f"{family}: {self.option} is {out!r}, not one of {list(self.choices)}",
                             remedy=self.describe())
        return out


def _by_name(fields: Iterable[Field]) -> dict[str, Field]:
    return {f.name: f for f in fields}


def complete(fields: Iterable[Field], values: Mapping[str, Any], family: str) -> dict[str, Any]:
    """``values`` typed and checked, with every missing field's default; FieldError names an
    unknown or missing field and lists the family's fields."""
    known = _by_name(fields)
    listing = "; ".join(f.describe() for f in known.values()) or "none"
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise FieldError(f"{family} has no problem field {unknown[0]!r}", remedy=f"its fields: {listing}")
    out = {}
    for name, field in known.items():
        if name in values:
            out[name] = field.convert(values[name], family)
        elif field.required:
            raise FieldError(f"{family} needs {field.option}", remedy=f"its fields: {listing}")
        else:
            out[name] = field.default
    return out


def parse_args(fields: Iterable[Field], argv: list[str], family: str) -> dict[str, Any]:
    """Field values from command-line words (``--name value``, ``--name=value``, a bool field
    also as ``--name`` / ``--no-name``), typed and completed with defaults."""
    known = _by_name(fields)
    by_option = {f.option: f for f in known.values()}
    values: dict[str, Any] = {}
    words = list(argv)
    while words:
        word = words.pop(0)
        if not word.startswith("--"):
            raise FieldError(f"unexpected argument {word!r}", remedy="give problem fields as --name value")
        option, eq, text = word.partition("=")
        field = by_option.get(option)
        if field is None and option.startswith("--no-") and ("--" + option[5:]) in by_option:
            bool_field = by_option["--" + option[5:]]
            if bool_field.type is bool and not eq:
                values[bool_field.name] = False
                continue
        if field is None:
            listing = "; ".join(f.describe() for f in known.values()) or "none"
            raise FieldError(f"{family} has no problem field {option}", remedy=f"its fields: {listing}")
        if not eq:
            if field.type is bool and (not words or words[0].startswith("--")):
                text = "true"
            elif not words:
                raise FieldError(f"{option} needs a value", remedy=field.describe())
            else:
                text = words.pop(0)
        values[field.name] = text
    return complete(known.values(), values, family)


def parse_json(fields: Iterable[Field], line: str, family: str) -> dict[str, Any]:
    """Field values from a JSON object (one line of a problems file), typed and completed."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise FieldError(f"not JSON ({exc})", remedy='write {"field": value, ...}') from None
    if not isinstance(obj, dict):
        raise FieldError("a problem line must be a JSON object", remedy='write {"field": value, ...}')
    return complete(fields, obj, family)
