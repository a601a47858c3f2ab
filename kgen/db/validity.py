"""Whether a record read from elsewhere may be stored: valid for its family, physically possible.

Shared records end up as CUDA source that is compiled and run, so every record that an
import (``kgen db import``, a T4 file, ``import_file``, ``import_records``) or a merge reads is
checked against what this kgen knows before anything is stored or written:

- its family is installed here (``kgen.registry.get_spec``). Records of a family this kgen
  does not have cannot be checked, so they are refused: install the package that provides the
  family first (``kgen families`` lists those here), or leave them out (``--skip-invalid``);
- its problem key is a problem of that family as kgen writes it (``Problem.key``): shape
  parameters are integers >= 1, text values are words (letters, digits, ``_``, ``.``), and
  the family builds its space for it;
- its config is a config of that space (``Space.trusted``: every parameter and no other, each
  value one of the declared choices, of the declared type, every constraint holding), and its
  ``config_name`` is the name those values give. A failure of kind ``constraints`` (a T4
  file's record of an invalid config) needs only the parameters and their choices;
- a vendor record (template digest ``vendor``) is config ``cublas`` with no parameters;
- its time, if it has one, is no faster than the problem's physical floor (``kgen.plausible``).

The space is built for a GPU-less target named as the record's device, with the record's
compute capability (a Hopper's when it gives none) and an H200's resources; dispatch checks
again on the device it runs on. A record of another template version (its digest is not the
installed template's) is checked against the current space the same way and, when valid, kept
as history: dispatch never uses it (it asks for the installed digest), and ``kgen db verify``
does not re-measure it.

>>> Validator().why("nosuch", "nosuch|n=1", "k_n1", {"n": 1}, None, "NVIDIA H200", "9.0", "d")
"family 'nosuch' is not installed here, so its records cannot be checked"
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

from kgen.db.schema import choices_are_scalars
from kgen.errors import KgenError, SpaceError, UnknownFamilyError
from kgen.measurement import Record
from kgen.vendor import VENDOR_CONFIG, VENDOR_DIGEST

_WORD = re.compile(r"[A-Za-z0-9_.]+")
_CC = re.compile(r"(\d{1,2})\.(\d{1,2})")
_SHOWN = 60                       # characters of a value shown in a message (of a problem key: 200)


def _shown(value: Any, limit: int = _SHOWN) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass(frozen=True)
class _Problem:
    """What records of one (family, problem key, compute capability) are checked against."""

    error: str | None = None
    space: Any = None
    floor: float = 0.0
    name_of: Any = None               # space.name_check(): the config name its values give, or None
    scalars: bool = False             # its configs are the schema's objects of scalars (choices_are_scalars)


def _declared(space, values: dict):
    """The Config of ``values`` when they are the space's parameters, each one of its declared
    choices (constraints not checked); else None."""
    values = space.complete(values)
    if values.keys() != set(space.names) or not all(p.allows(values[p.name]) for p in space.params):
        return None
    try:
        return space.make(values)
    except SpaceError:
        return None


class Validator:
    """Checks records against the installed families; remembers each problem's space while it
    lives (make one per import or merge: a family registered later is seen by the next)."""

    def __init__(self):
        self._problems: dict[tuple, _Problem] = {}
        self._specs: dict[str, Any] = {}
        self._choices: dict[int, tuple] = {}     # id(params) -> (params, choices_are_scalars(params))
        self._targets: dict[tuple[str, str], Any] = {}

    def record(self, r: Record) -> str | None:
        """Why ``r`` may not be stored, or None when it may."""
        m, p = r.measurement, r.provenance
        t = m.time_ms
        return self.why(r.family, m.problem_key, m.config_name, m.config, t, p.device, p.cc, p.template_digest,
                        m.failure.kind if m.failure else None)

    def why(self, family: str, problem_key: str, config_name: str, config: dict, time_ms: float | None,
            device: str, cc: str, digest: str, failure_kind: str | None = None) -> str | None:
        """Why a record of these fields may not be stored, or None when it may. ``time_ms`` is
        the record's usable time (None for a failure)."""
        problem = self._problems.get((family, problem_key, cc)) or self._problem(family, problem_key, device, cc)
        return self._verdict(problem, family, problem_key, config_name, config, time_ms, digest, failure_kind)

    def why_each(self, fields: Iterable[tuple]) -> Iterator[str | None]:
        """``why(*f)`` of each ``f`` of ``fields``, in order: an import reads many records of one
        problem in a row, and each finds its problem without a lookup when it is the last one's."""
        verdict, problems, last, last_fc, problem = self._verdict, self._problems, None, None, None
        for family, key, config_name, config, time_ms, device, cc, digest, failure_kind in fields:
            if key != last or (family, cc) != last_fc:
                problem = problems.get((family, key, cc)) or self._problem(family, key, device, cc)
                last, last_fc = key, (family, cc)
            yield verdict(problem, family, key, config_name, config, time_ms, digest, failure_kind)

    def passed(self, fields: Sequence[tuple], start: int = 0) -> int:
        """The index of the first of ``fields[start:]`` (``why``'s arguments) that is not a
        record of the common case, ``len(fields)`` when there is none: each record before it
        may be stored (``why`` gives None) and its config is an object of scalars as the
        schema wants (``kgen.db.schema.choices_are_scalars``). The common case: a problem whose
        space was built, a config of it named as its values name it, not a vendor record nor a
        failure of kind ``constraints``, a time no faster than the floor. The record at the
        index needs ``why`` (and the schema's check of its config)."""
        problems, vendor_digest, vendor_config = self._problems, VENDOR_DIGEST, VENDOR_CONFIG
        last = last_family = last_cc = name_of = floor = None
        for i in range(start, len(fields)):
            family, key, config_name, config, time_ms, device, cc, digest, failure_kind = fields[i]
            if key != last or family != last_family or cc != last_cc:
                problem = problems.get((family, key, cc))
                if problem is None:
                    try:
                        problem = self._problem(family, key, device, cc)
                    except Exception:     # why() meets it again, at this record
                        return i
                if problem.error is not None or not problem.scalars:
                    return i
                name_of, floor = problem.name_of, problem.floor
                last, last_family, last_cc = key, family, cc
            if failure_kind == "constraints" or digest == vendor_digest or config_name == vendor_config:
                return i
            try:
                if name_of(config) != config_name or (time_ms is not None and time_ms < floor):
                    return i
            except Exception:             # the family's code on a file's values: why() says what failed
                return i
        return len(fields)

    def _verdict(self, problem: _Problem, family: str, problem_key: str, config_name: str, config: dict,
                 time_ms: float | None, digest: str, failure_kind: str | None) -> str | None:
        """``why`` of a record of ``problem``."""
        if problem.error is not None:
            return problem.error
        if digest == VENDOR_DIGEST or config_name == VENDOR_CONFIG:
            if (digest, config_name, config) != (VENDOR_DIGEST, VENDOR_CONFIG, {}):
                return (f"a vendor record is config {VENDOR_CONFIG!r} with no parameters and template digest "
                        f"{VENDOR_DIGEST!r} (this one: config {_shown(config_name)}, digest {_shown(digest)})")
        else:
            try:                          # (a valid config needs only its name, the common case)
                why = None if failure_kind != "constraints" and problem.name_of(config) == config_name else \
                    self._config(problem, config_name, config, problem_key, failure_kind)
            except Exception as exc:      # the family's code on a file's values: any failure refuses it
                why = f"the {family} family cannot check config {_shown(config_name)} ({type(exc).__name__}: {exc})"
            if why is not None:
                return why
        if time_ms is not None and time_ms < problem.floor:
            return (f"time {time_ms:.3g} ms is faster than any GPU runs {problem_key} "
                    f"(at least {problem.floor:.3g} ms, kgen/plausible.py)")
        return None

    def name(self, r: Record) -> str | None:
        """The name the family gives ``r``'s config values, when they are parameters of its
        space with declared choices (constraints aside); else None."""
        m, p = r.measurement, r.provenance
        problem = self._problems.get((r.family, m.problem_key, p.cc)) or self._problem(
            r.family, m.problem_key, p.device, p.cc)
        if problem.error is not None:
            return None
        config = _declared(problem.space, m.config)
        return None if config is None else config.name

    # ---- a problem -------------------------------------------------------------------
    def spec(self, family: str):
        """The installed family ``family``, or None."""
        if family not in self._specs:
            from kgen.registry import get_spec

            try:
                self._specs[family] = get_spec(family)
            except UnknownFamilyError:
                self._specs[family] = None
        return self._specs[family]

    def _problem(self, family: str, key: str, device: str, cc: str) -> _Problem:
        """The space and floor of a problem (remembered), or why its records are refused."""
        found = self._problems[(family, key, cc)] = self._build(family, key, device, cc)
        return found

    def _build(self, family: str, key: str, device: str, cc: str) -> _Problem:
        from kgen.plausible import floor_ms
        from kgen.problem import Problem, Target

        spec = self.spec(family)
        if spec is None:
            return _Problem(f"family {family!r} is not installed here, so its records cannot be checked")
        match = _CC.fullmatch(cc) if cc else None
        if cc and match is None:
            return _Problem(f"provenance.cc {_shown(cc)} is not a compute capability like '9.0'")
        try:
            problem = Problem.from_key(key)
        except (SpaceError, ValueError) as exc:
            return _Problem(f"problem_key {_shown(key, 200)} is not a problem key ({exc})")
        if problem.family != family or problem.key != key:
            return _Problem(f"problem_key {_shown(key, 200)} is not a {family} problem as kgen writes it "
                            f"({_shown(problem.key, 200)})")
        for name, value in problem.params:
            if name in spec.shape_params and not (type(value) is int and value >= 1):
                return _Problem(f"problem_key {_shown(key, 200)}: shape {name}={_shown(value)} is not an integer >= 1")
            if type(value) is str and name not in spec.text_fields and not _WORD.fullmatch(value):
                return _Problem(f"problem_key {_shown(key, 200)}: {name}={_shown(value)} is not a word "
                                "(letters, digits, _ and .)")
        if spec.text_fields:
            try:
                why = spec.text_field_error(problem)
            except Exception as exc:      # a family's own code on a key from a file: any failure refuses it
                why = f"{type(exc).__name__}: {exc}"
            if why:
                return _Problem(f"problem_key {_shown(key, 200)}: {why}")
        target = self._targets.get((device, cc))
        if target is None:                # (a Target is frozen: the problems of one device share it)
            target = self._targets[(device, cc)] = Target.h200(
                device, (int(match[1]), int(match[2])) if match else (9, 0), nvrtc="")
        try:
            # a copy: a family may keep something of the last space it built (gemm_wgmma its SM count)
            space = copy.copy(spec).space(problem, target)
            floor = floor_ms(spec, problem)
            name_of = space.name_check()
        except KgenError as exc:
            return _Problem(f"the {family} family has no space for {_shown(key, 200)}: {exc.message}")
        except Exception as exc:          # a family's own code on a key from a file: any failure refuses it
            return _Problem(f"the {family} family has no space for {_shown(key, 200)} ({type(exc).__name__}: {exc})")
        return _Problem(space=space, floor=floor, name_of=name_of, scalars=self._scalars(space.params))

    def _scalars(self, params: tuple) -> bool:
        """``choices_are_scalars(params)``, remembered while ``params`` (a family's spaces of
        several problems may share one tuple of Params) lives in this Validator."""
        found = self._choices.get(id(params))
        if found is None or found[0] is not params:
            try:
                scalars = choices_are_scalars(params)
            except Exception:             # a family's odd choices: its records take the slower way
                scalars = False
            found = self._choices[id(params)] = (params, scalars)
        return found[1]

    # ---- a config --------------------------------------------------------------------
    @staticmethod
    def _config(problem: _Problem, name: str, values: dict, key: str, failure_kind: str | None) -> str | None:
        if failure_kind == "constraints":          # recorded as breaking them: its choices must still be right
            config = _declared(problem.space, values)
            given = None if config is None else config.name
        else:
            given = problem.name_of(values)
        if given is None:
            return Validator._config_why(problem.space, name, values, key)
        if given != name:
            return f"config_name {_shown(name)} is not the name its values give ({given})"
        return None

    @staticmethod
    def _config_why(space, name: str, values: dict, key: str) -> str:
        try:
            broken = space.violations(values)
        except SpaceError:
            complete = space.complete(values)
            missing = [n for n in space.names if n not in complete]
            unknown = sorted(k for k in complete if k not in space.names)
            parts = ([f"unknown parameter {', '.join(map(_shown, unknown))}"] if unknown else []) + \
                    ([f"missing parameter {', '.join(map(_shown, missing))}"] if missing else [])
            return f"config {_shown(name)} is not one of the family's: {'; '.join(parts)}"
        return f"config {_shown(name)} is not valid for {key}: {'; '.join(broken) or 'rejected'}"
