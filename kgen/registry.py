"""The kernel families kgen knows, by name, each loaded on first use: the built-in ones
(``kgen.kernels.BUILTIN_FAMILIES``), a package's through the ``kgen.families`` entry-point
group, and any registered from Python with ``register``. The tuner, the CLI, export and
dispatch find a family here and see nothing else of it.

A package ships a family by naming its KernelSpec subclass (or an instance) in its
pyproject.toml::

    [project.entry-points."kgen.families"]
    vadd = "mypkg.kernels:VectorAdd"

>>> "gemm" in families() and get_spec("gemm").family == "gemm"
True
"""

from __future__ import annotations

import functools
import importlib
import logging
import threading
from importlib import metadata

from kgen.errors import FamilyLoadError, UnknownFamilyError
from kgen.kernels import BUILTIN_FAMILIES
from kgen.spec import KernelSpec

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "kgen.families"
_REGISTRY: dict[str, KernelSpec] = {}
_REGISTERED: set[str] = set()        # names given a spec by register() in this process
_LOCK = threading.RLock()


def register(spec: KernelSpec) -> KernelSpec:
    """Make a family known to the tuner, the CLI and dispatch (replacing one of its name);
    returns the spec."""
    if not isinstance(spec, KernelSpec):
        raise FamilyLoadError(f"register takes a KernelSpec instance, not {type(spec).__name__}",
                              remedy="subclass kgen.KernelSpec and pass an instance: register(MySpec())")
    if not spec.family:
        raise UnknownFamilyError("a KernelSpec needs a non-empty family name",
                                 remedy="set the class attribute `family`")
    with _LOCK:
        _REGISTRY[spec.family] = spec
        _REGISTERED.add(spec.family)
    return spec


def registered_in_process() -> bool:
    """Whether ``register`` gave some family its spec in this process: a process started
    afresh (spawned, not forked) would not see it, or would see another spec of that name."""
    with _LOCK:
        return any(name in _REGISTRY for name in _REGISTERED)


@functools.lru_cache(maxsize=1)
def _entry_points() -> dict[str, metadata.EntryPoint]:
    """The installed packages' families by name (a built-in name is not taken over)."""
    found = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in BUILTIN_FAMILIES:
            log.warning("entry point %s = %s ignored: %r is a built-in family", ep.name, ep.value, ep.name)
        elif ep.name in found and found[ep.name].value != ep.value:
            log.warning("two packages name the family %r (%s, %s); using the first", ep.name,
                        found[ep.name].value, ep.value)
        else:
            found.setdefault(ep.name, ep)
    return found


def rescan() -> None:
    """Read the installed packages' entry points again (after installing one in this process)."""
    _entry_points.cache_clear()


def _load(name: str) -> KernelSpec | None:
    """The family ``name`` from the built-in table or an entry point, instantiated; None if
    neither names it. FamilyLoadError when its code cannot be imported or is no KernelSpec."""
    ep = _entry_points().get(name)
    where = BUILTIN_FAMILIES.get(name) or (ep.value if ep else None)
    if where is None:
        return None
    try:
        if ep is not None and name not in BUILTIN_FAMILIES:
            obj = ep.load()
        else:
            module, _, attr = where.partition(":")
            obj = getattr(importlib.import_module(module), attr)
    except Exception as exc:
        raise FamilyLoadError(f"the kernel family {name!r} ({where}) failed to load: {type(exc).__name__}: {exc}",
                              remedy="fix or reinstall the package that provides it") from exc
    spec = obj() if isinstance(obj, type) and issubclass(obj, KernelSpec) else obj
    if not isinstance(spec, KernelSpec):
        raise FamilyLoadError(f"{where} (family {name!r}) is a {type(obj).__name__}, not a KernelSpec",
                              remedy="name a KernelSpec subclass or instance in the entry point")
    if spec.family != name:
        raise FamilyLoadError(f"{where} declares family {spec.family!r}, registered as {name!r}",
                              remedy="give the entry point the spec's family name")
    return spec


def get_spec(family: str) -> KernelSpec:
    """The registered family ``family``; UnknownFamilyError (listing the known ones) if none."""
    with _LOCK:
        spec = _REGISTRY.get(family)
        if spec is None:
            spec = _load(family)
            if spec is None:
                raise UnknownFamilyError(f"no kernel family named {family!r}; known: {families()}")
            _REGISTRY[family] = spec
        return spec


def families() -> list[str]:
    """Every family's name (built in, installed or registered), none loaded by asking."""
    with _LOCK:
        return sorted(set(_REGISTRY) | set(BUILTIN_FAMILIES) | set(_entry_points()))
