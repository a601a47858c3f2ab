"""Constraints written as Python expressions, compiled once into functions.

A family whose configs are checked often (an import checks every record against its space)
writes its constraints as expressions over the parameter names, named constants (its problem's
and target's values) and named intermediate values (``lets``), and its configs' name as the text
of an f-string. ``Rules`` compiles each constraint into a ``Constraint`` (whose ``params`` are
the parameters it reads, found in the expression, lets included, so enumeration prunes as early
as it can), the name into a namer, and all of them into one function of the parameter values,
in the space's order, that gives the config's name where every constraint holds and None
elsewhere (``Space.check``): one call with the values as arguments instead of a call and a
dictionary lookup a value per constraint. Both come from the same text, so they cannot
disagree. A let is also a function of a config's values (``let``: a space's derived value).

The text is compiled once per distinct set of expressions and name (a family builds a space
per problem: only the constants change). The constants an expression reads are the cells of the
functions' closure, made per space by one call of the compiled text, and the functions share
one global namespace (the builtins) whatever the problem: an import that checks records of many
problems in turn then runs the same code on the same globals, each lookup of a constant one
load from a cell (were they the globals, each space's own, Python's caches of global lookups
in the shared code would be refilled at every change of problem). The expressions
are the family's source, never data: a value read from a file is an argument of the compiled
functions, not part of their text. ``v`` is the compiled functions' own name for the values,
so no parameter, constant or let may take it.

>>> rules = Rules(("block", "vec"), {"limit": 512}, {"work": "block * vec"},
...               [("work fits", "work <= limit"), ("vec divides block", "block % vec == 0")],
...               "add_b{block}_v{vec}")
>>> [c.params for c in rules.constraints()]
[('block', 'vec'), ('block', 'vec')]
>>> rules.check(128, 4), rules.check(256, 4), rules.let("work")({"block": 64, "vec": 2})
('add_b128_v4', None, 128)
"""

from __future__ import annotations

import ast
import builtins
import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from kgen.errors import SpaceError
from kgen.space import Constraint


@dataclass(frozen=True)
class _Program:
    """The compiled text of one set of expressions: ``make``, called with the values of the
    constants ``constants`` in that order, defines and returns (by name) ``rule_<i>`` (each
    rule on the values by name), ``let_<name>`` (each let likewise), ``namer`` (likewise) and
    ``check`` (every rule, then the name, on the values as arguments)."""

    make: Callable[..., dict[str, Callable]]
    constants: tuple[str, ...]                    # the constants the text reads, make's arguments
    rule_params: tuple[tuple[str, ...], ...]      # the parameters each rule reads


class Rules:
    """Named constraint expressions (``rules``: (title, expression) pairs) over ``params``,
    with ``constants`` and ``lets`` (name -> expression, each may read params, constants and
    earlier lets), and the configs' ``name``: the text of an f-string over params and constants."""

    def __init__(self, params: Sequence[str], constants: Mapping[str, Any], lets: Mapping[str, str],
                 rules: Sequence[tuple[str, str]], name: str):
        self.params = tuple(params)
        self.lets = tuple(lets.items())
        self.rules = tuple((str(t), str(e)) for t, e in rules)
        program = _program(self.params, frozenset(constants), self.lets, self.rules, name)
        scope = program.make(*[constants[c] for c in program.constants])   # compiled once, closed over these
        self._scope, self._rule_params = scope, program.rule_params
        self.namer: Callable[[Mapping[str, Any]], str] = scope["namer"]
        """A config's name from its values (an f-string of ``name``'s text)."""
        check = scope["check"]
        check.params = self.params                   # (Space checks that these are its parameters, in
        check.titles = tuple(t for t, _ in self.rules)   # order, these its constraints, this its namer)
        check.namer = self.namer
        self.check: Callable[..., str | None] = check
        """The config's name when every rule holds for the parameter values given in order,
        else None; it may raise where a rule would (ZeroDivisionError, ...): a caller counts
        that as broken."""

    def constraints(self) -> list[Constraint]:
        """One Constraint a rule, reading the values by name (enumeration gives partial values)."""
        return [Constraint(title, self._scope[f"rule_{i}"], params)
                for i, ((title, _), params) in enumerate(zip(self.rules, self._rule_params))]

    def let(self, name: str) -> Callable[[Mapping[str, Any]], Any]:
        """The let ``name`` as a function of a config's values (a space's derived value)."""
        if name not in dict(self.lets):
            raise SpaceError(f"no let {name!r} among {sorted(dict(self.lets))}")
        return self._scope[f"let_{name}"]


@functools.lru_cache(maxsize=64)
def _program(params: tuple[str, ...], constants: frozenset, lets: tuple[tuple[str, str], ...],
             rules: tuple[tuple[str, str], ...], name: str) -> _Program:
    if "v" in set(params) | set(constants) | {n for n, _ in lets}:
        raise SpaceError("'v' names the values in the compiled functions: give the parameter, constant or let "
                         "another name")
    known = set(params) | set(constants) | set(vars(builtins))
    named = f"f{name!r}"
    unknown = _names(named, "name") - known
    if unknown:
        raise SpaceError(f"the name {name!r} reads unknown names {sorted(unknown)}")
    reads: dict[str, set[str]] = {}                  # a let's name, or a rule's index -> the names it reads
    let_text: dict[str, str] = {}
    for which, text in [*lets, *((i, text) for i, (_, text) in enumerate(rules))]:
        found = _names(text, which if isinstance(which, str) else rules[which][0])
        unknown = found - known
        if unknown:
            raise SpaceError(f"constraint expression {text!r} reads unknown names {sorted(unknown)}")
        reads[which] = found
        if isinstance(which, str):
            if not which.isidentifier() or which in params or which in constants or which in let_text:
                raise SpaceError(f"let {which!r} is not a new identifier")
            known.add(which)
            let_text[which] = text

    def lets_of(names: set[str]) -> list[str]:
        """The lets ``names`` needs, in definition order (what they read included)."""
        needed: set[str] = set()
        todo = [n for n in names if n in let_text]
        while todo:
            name = todo.pop()
            if name not in needed:
                needed.add(name)
                todo.extend(n for n in reads[name] if n in let_text)
        return [n for n, _ in lets if n in needed]

    def by_name(names: set[str]) -> tuple[tuple[str, ...], list[str]]:
        """(parameters, lines) of a function of values ``v`` that computes the lets ``names`` needs."""
        needed = lets_of(names)
        used = set(names).union(*(reads[n] for n in needed))
        own = tuple(p for p in params if p in used)
        return own, [f"    {p} = v[{p!r}]" for p in own] + [f"    {n} = {let_text[n]}" for n in needed]

    source, rule_params, defined = [], [], []
    for i, (_, text) in enumerate(rules):
        own, body = by_name(reads[i])
        rule_params.append(own)
        source += [f"def rule_{i}(v):", *body, f"    return bool({text})"]
        defined.append(f"rule_{i}")
    for let, _ in lets:
        source += [f"def let_{let}(v):", *by_name({let})[1], f"    return {let}"]
        defined.append(f"let_{let}")
    source += ["def namer(v):", *[f"    {p} = v[{p!r}]" for p in params], f"    return {named}"]
    source.append(f"def check({', '.join(params)}):")
    done: set[str] = set()
    for i, (_, text) in enumerate(rules):
        for let in lets_of(reads[i]):
            if let not in done:
                source.append(f"    {let} = {let_text[let]}")
                done.add(let)
        source += [f"    if not ({text}):", "        return None"]
    source.append(f"    return {named}")
    # the functions above, nested in one that takes the constants they read (their closure)
    used = sorted(set(constants) & (_names(named, "name").union(*reads.values())))
    source = [f"def make({', '.join(used)}):", *["    " + line for line in source],
              f"    return {{{', '.join(f'{n!r}: {n}' for n in [*defined, 'namer', 'check'])}}}"]
    try:
        code = compile("\n".join(source), "<kgen.space_rules>", "exec")
    except SyntaxError as exc:            # a keyword for a name, a comment in an expression, ...
        raise SpaceError(f"the constraint expressions do not compile: {exc.msg} in {exc.text!r}") from None
    scope: dict[str, Any] = {}
    exec(code, scope)                     # the family's own expressions, compiled once
    return _Program(scope["make"], tuple(used), tuple(rule_params))


def _names(text: str, where: str) -> set[str]:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise SpaceError(f"constraint expression {where!r} is not an expression: {exc.msg}") from None
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
