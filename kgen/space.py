"""Search spaces: parameters with choices, derived values, constraints, configurations.

A ``Space`` is built for one problem on one target, so constraints may close over both.
Constraints are checked before anything is compiled.

>>> space = Space([Param("block", (64, 128, 256)), Param("vec", (1, 2, 4))],
...               constraints=[Constraint("block*vec <= 512", lambda v: v["block"] * v["vec"] <= 512)],
...               namer=lambda v: f"add_b{v['block']}_v{v['vec']}")
>>> len(space.configs())
8
>>> space.config(block=128, vec=4).name
'add_b128_v4'
"""

from __future__ import annotations

import operator
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from kgen.errors import SpaceError

Values = Mapping[str, Any]
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _is_identifier(name: str) -> bool:
    """``_IDENTIFIER.match(name)`` as a bool, the common case without the regex: a string that
    is an ASCII Python identifier is one; anything else (a trailing newline, which ``$`` lets
    through, or no string at all) is left to the regex."""
    return (type(name) is str and name.isascii() and name.isidentifier()) or _IDENTIFIER.match(name) is not None


@dataclass(frozen=True)
class Param:
    """One tunable parameter and the values it may take (ints, floats, strings or bools).

    ``default``, for a parameter added to a family later, is the value configs stored
    before it existed stand for (its namer should leave that value out of the name, so such
    a config keeps its name); None: every config must give one.
    """

    name: str
    choices: tuple
    default: Any = None

    def __post_init__(self):
        object.__setattr__(self, "choices", tuple(self.choices))
        if not _IDENTIFIER.match(self.name):
            raise SpaceError(f"parameter name {self.name!r} is not an identifier")
        if not self.choices:
            raise SpaceError(f"parameter {self.name!r} has no choices")
        if len(set(self.choices)) != len(self.choices):
            raise SpaceError(f"parameter {self.name!r} repeats a choice: {self.choices}")
        if self.default is not None and self.default not in self.choices:
            raise SpaceError(f"parameter {self.name!r} defaults to {self.default!r}, not one of its choices")
        object.__setattr__(self, "_allowed", frozenset((type(c), c) for c in self.choices))
        # a choice's type by its value (choices never compare equal): Space's checks of many configs
        object.__setattr__(self, "_kinds", dict(zip(self.choices, map(type, self.choices))))

    def allows(self, value) -> bool:
        """Whether ``value`` is one of the choices, of the choice's own type (True is not 1,
        1.0 is not 1, "8" is not 8: values read from a shared file render only as declared)."""
        try:
            return (type(value), value) in self._allowed
        except TypeError:           # an unhashable value (a list from a file) is no choice
            return False


@dataclass(frozen=True)
class Constraint:
    """A named predicate over a config's values.

    ``params`` names the parameters it reads: enumeration then prunes as soon as those are
    set. Leave it ``None`` when it reads derived values (checked on the full config).
    """

    name: str
    holds: Callable[[Values], bool]
    params: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Config:
    """Ordered parameter values plus a procedural name that is the config's identity.

    The name is the database key and the kernel's CUDA symbol.
    """

    name: str
    values: tuple[tuple[str, Any], ...]

    def __getitem__(self, key: str) -> Any:
        for k, v in self.values:
            if k == key:
                return v
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key``, or ``default`` for a parameter this config predates."""
        for k, v in self.values:
            if k == key:
                return v
        return default

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other) -> bool:
        return isinstance(other, Config) and other.name == self.name


def _default_namer(values: Values) -> str:
    parts = []
    for k, v in values.items():
        text = str(v).replace(".", "p").replace("-", "m")
        parts.append(f"{k}{text}")
    return "k_" + "_".join(parts)


@dataclass(frozen=True)
class Space:
    """Parameters, constraints, derived values and a namer.

    ``derived`` maps a name to a function of the parameter values; derived values are visible
    to constraints and templates but are not part of the identity.

    ``check``, when given, is the config's name where every constraint holds and None
    elsewhere, from the parameter values as arguments in the space's order
    (``kgen.space_rules.Rules.check``, compiled from the same text as the constraints and the
    namer): checking a config read from a file then takes one call.
    """

    params: Sequence[Param]
    constraints: Sequence[Constraint] = ()
    derived: Mapping[str, Callable[[Values], Any]] = field(default_factory=dict)
    namer: Callable[[Values], str] = _default_namer
    check: Callable[..., str | None] | None = None

    def __post_init__(self):
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "constraints", tuple(self.constraints))
        names = tuple(p.name for p in self.params)
        if len(set(names)) != len(names):
            raise SpaceError(f"parameter names repeat: {list(names)}")
        object.__setattr__(self, "_names", names)
        if self.check is not None and (getattr(self.check, "params", None), getattr(self.check, "titles", None),
                                       getattr(self.check, "namer", None)) != \
                (names, tuple(c.name for c in self.constraints), self.namer):
            raise SpaceError("the space's check is not compiled from its parameters, constraints and namer "
                             "(kgen.space_rules)")
        object.__setattr__(self, "_name_set", frozenset(names))
        # constraints that declare the parameters they read are checked on the parameters alone
        # (as enumeration checks them); the others on the values with every derived one
        name_set = self._name_set
        object.__setattr__(self, "_on_params", tuple(c.params is not None and name_set.issuperset(c.params)
                                                     for c in self.constraints))
        object.__setattr__(self, "_defaults", tuple((p.name, p.default) for p in self.params
                                                    if p.default is not None))
        object.__setattr__(self, "_choice_sets", tuple((p.name, p._allowed, p.choices) for p in self.params))

    @property
    def names(self) -> tuple[str, ...]:
        return self._names

    def size(self) -> int:
        n = 1
        for p in self.params:
            n *= len(p.choices)
        return n

    def full_values(self, values: Values) -> dict[str, Any]:
        """Parameter values plus every derived value."""
        full = dict(values)
        for name, fn in self.derived.items():
            full[name] = fn(full)
        return full

    def complete(self, values: Values) -> dict[str, Any]:
        """The values with every parameter they lack that has a default given its default."""
        out = dict(values)
        for name, default in self._defaults:
            if name not in out:
                out[name] = default
        return out

    def violations(self, values: Values) -> list[str]:
        """Names of the constraints the values break; empty when the config is valid."""
        return self._violations(self.complete(values))

    def _violations(self, values: dict[str, Any]) -> list[str]:
        """``violations`` of values ``complete`` gave."""
        if values.keys() != self._name_set:
            missing = [n for n in self._names if n not in values]
            unknown = [k for k in values if k not in self._name_set]
            raise SpaceError(f"config values do not match the space: missing {missing}, unknown {unknown}")
        for name, choices, shown in self._choice_sets:
            v = values[name]
            try:
                allowed = (type(v), v) in choices        # Param.allows, inlined: the hot path of import
            except TypeError:
                allowed = False
            if not allowed:
                return [f"{name}={v!r} is not one of {shown}"]
        full = None
        broken = []
        for c, on_params in zip(self.constraints, self._on_params):
            if not on_params and full is None:
                full = self.full_values(values)
            try:
                ok = bool(c.holds(values if on_params else full))
            except (ZeroDivisionError, ValueError, KeyError, TypeError) as exc:
                ok = False
                broken.append(f"{c.name} ({type(exc).__name__})")
                continue
            if not ok:
                broken.append(c.name)
        return broken

    def is_valid(self, values: Values) -> bool:
        return not self.violations(values)

    def make(self, values: Values) -> Config:
        """A Config from values, valid or not (the name never depends on validity)."""
        return self._make(self.complete(values))

    def _make(self, values: dict[str, Any]) -> Config:
        ordered = {n: values[n] for n in self._names}
        name = self.namer(ordered)
        if not _IDENTIFIER.match(name):
            raise SpaceError(f"the namer gave {name!r}, which is not a C identifier")
        return Config(name=name, values=tuple(ordered.items()))

    def _valid_or_none(self, values: Values) -> dict[str, Any] | None:
        """``values`` completed with defaults where they make a valid config, else None."""
        values = self.complete(values)
        try:
            return None if self._violations(values) else values
        except SpaceError:
            return None

    def trusted_name(self, values: Values) -> str | None:
        """``trusted(values).name`` without the Config (None where ``trusted`` gives None)."""
        return (self.__dict__.get("_name_check") or self.name_check())(values)

    def name_check(self) -> Callable[[Mapping[str, Any]], str | None]:
        """``trusted_name`` as one function of the values, made once per space (an import
        checks many records of each problem): for values that name every parameter and no
        other, the import's hot path, the checks of ``_violations`` (declared choices, then
        every constraint) in few lookups; for others, ``trusted``'s."""
        check = self.__dict__.get("_name_check")
        if check is None:
            check = self._name_checker()
            object.__setattr__(self, "_name_check", check)
        return check

    def _name_checker(self) -> Callable[[Mapping[str, Any]], str | None]:
        names, namer, full_values, count = self._names, self.namer, self.full_values, len(self._names)
        # a choice's type by its value: Param refuses choices that compare equal (1 and True, 1 and 1.0)
        kinds = tuple(p._kinds for p in self.params)
        fused = self.check
        on_params = on_full = ()                     # (the constraints one by one, where none is fused)
        if fused is None:
            on_params = tuple(c.holds for c, on in zip(self.constraints, self._on_params) if on)
            on_full = tuple(c.holds for c, on in zip(self.constraints, self._on_params) if not on)
        get, is_, is_identifier = dict.get, operator.is_, _is_identifier
        values_of = operator.itemgetter(*names) if count > 1 else lambda v: tuple(v[n] for n in names)

        def check(values: Mapping[str, Any]) -> str | None:
            try:
                if len(values) != count:
                    raise KeyError
                vals = values_of(values)            # every name found and no other key: the hot path
            except KeyError:
                values = self._valid_or_none(values)
                if values is None:
                    return None
                name = namer({n: values[n] for n in names})
                return name if _is_identifier(name) else None
            try:                                    # Param.allows of each: the choice equal to it, of its type
                if not all(map(is_, map(get, kinds, vals), map(type, vals))):
                    return None
            except TypeError:                       # an unhashable value is no choice
                return None
            if fused is not None:                   # every constraint and the name in one call
                try:
                    name = fused(*vals)
                except (ZeroDivisionError, ValueError, KeyError, TypeError):
                    return None
                return name if name is not None and is_identifier(name) else None
            ordered = dict(zip(names, vals))
            try:
                for holds in on_params:
                    if not holds(ordered):
                        return None
                if on_full:
                    full = full_values(ordered)
                    for holds in on_full:
                        if not holds(full):
                            return None
            except (ZeroDivisionError, ValueError, KeyError, TypeError):
                return None
            name = namer(ordered)
            return name if is_identifier(name) else None

        return check

    def trusted(self, values: Values) -> Config | None:
        """The Config of values read from a record or a file, or None where they are not a
        valid config of this space (a parameter missing or unknown, a value not one of the
        declared choices of its type, a broken constraint). The name comes from the values,
        never from the record."""
        values = self._valid_or_none(values)
        return None if values is None else self._make(values)

    def renamed(self, prefix: str, new_prefix: str) -> "Space":
        """This space with its configs named ``new_prefix`` + what follows ``prefix`` in their
        names here (a family that runs another's kernel, changed, on a problem of its own)."""
        namer = self.namer

        def renamed_namer(values: Values) -> str:
            name = namer(values)
            return new_prefix + (name[len(prefix):] if name.startswith(prefix) else name)

        return Space(self.params, self.constraints, self.derived, renamed_namer)

    def config(self, **values) -> Config:
        """A valid Config; raises SpaceError naming the broken constraints otherwise."""
        broken = self.violations(values)
        if broken:
            raise SpaceError(f"invalid config {values}: breaks {broken}")
        return self.make(values)

    def _staged_constraints(self) -> tuple[list[list[Constraint]], list[Constraint]]:
        """Constraints grouped by the depth at which their last parameter is set."""
        position = {n: i for i, n in enumerate(self.names)}
        stages: list[list[Constraint]] = [[] for _ in self.params]
        final = []
        for c in self.constraints:
            if c.params is None or any(p not in position for p in c.params):
                final.append(c)
            else:
                stages[max((position[p] for p in c.params), default=0)].append(c)
        return stages, final

    @staticmethod
    def _holds(c: Constraint, values: Values) -> bool:
        try:
            return bool(c.holds(values))
        except (ZeroDivisionError, ValueError, KeyError, TypeError):
            return False

    def iter_values(self) -> Iterator[dict[str, Any]]:
        """Every valid config's values, depth first, pruning on early constraints."""
        stages, final = self._staged_constraints()
        names = self.names
        values: dict[str, Any] = {}

        def walk(depth: int) -> Iterator[dict[str, Any]]:
            if depth == len(names):
                full = self.full_values(values)
                if all(self._holds(c, full) for c in final):
                    yield dict(values)
                return
            for choice in self.params[depth].choices:
                values[names[depth]] = choice
                if all(self._holds(c, values) for c in stages[depth]):
                    yield from walk(depth + 1)
            values.pop(names[depth], None)

        yield from walk(0)

    def configs(self) -> list[Config]:
        """Every valid config, in a stable order."""
        return [self.make(v) for v in self.iter_values()]

    def neighbours(self, values: Values) -> list[Config]:
        """The valid configs one parameter away from ``values``, parameter by parameter in the
        order of their choices."""
        values = self.complete(values)
        out = []
        for p in self.params:
            for choice in p.choices:
                other = {**values, p.name: choice}
                if choice != values.get(p.name) and self.is_valid(other):
                    out.append(self.make(other))
        return out

    def find(self, names) -> dict[str, Config]:
        """The valid configs of ``names`` (procedural names), by name; a name no valid config
        has is left out. One pass over the space, however many names."""
        wanted = set(names)
        return {c.name: c for c in self.configs() if c.name in wanted}

    def sample(self, n: int, seed: int = 0) -> list[Config]:
        """Up to n distinct valid configs drawn uniformly from the valid ones.

        Draws from the whole product and keeps the valid (cheap when they are not rare);
        enumerates only when rejection finds too few.
        """
        rng = random.Random(seed)
        draws = max(2000, 200 * n)
        if self.size() > 4 * draws:    # large space: rejection is cheaper than enumerating
            found: dict[str, Config] = {}
            for _ in range(draws):
                values = {p.name: rng.choice(p.choices) for p in self.params}
                if self.is_valid(values):
                    config = self.make(values)
                    found.setdefault(config.name, config)
                    if len(found) >= n:
                        return list(found.values())
        valid = self.configs()
        return rng.sample(valid, min(n, len(valid)))
