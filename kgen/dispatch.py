"""The call-time path: operands -> Problem -> best Config -> loaded kernel -> launch.

Policy for a problem, in order: the tuned best for this device and template (exact key);
else the best config of the nearest tuned problem of the same family (distance on log2 of
the shape parameters, everything else equal) when it is valid here, among the records
``KGEN_DISPATCH_POLICY`` admits (device: this device's; arch: this compute capability's;
any: every device's; the template digest always matches); else the family's default config. ``KGEN_STRICT=1`` raises instead of falling back. Everything after the first
call of a problem is served from memory: no database, no compiler, no synchronisation.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Mapping

from kgen import dispatch_memo
from kgen.compile import Binary, compile_source
from kgen.errors import CompileError, NoConfigError
from kgen.knobs import knobs
from kgen.problem import Problem, Target, device_name, target_from_dict
from kgen.render import render
from kgen.space import Config

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Choice:
    config: Config
    how: str                 # "tuned" | "nearest" | "default"
    time_ms: float | None = None
    from_problem: str = ""


@dataclass
class _Loaded:
    spec: Any
    problem: Problem
    choice: Choice
    kernel: Any


class Dispatcher:
    """Chooses, compiles, caches and launches; one per process (``default_dispatcher()``)."""

    def __init__(self, db=None, launcher=None, targets: Mapping[int, Target] | None = None,
                 miss_runner=None):
        self._db = db
        self._default_db = db is None   # only the default database's files can vouch for the memo
        self._launcher = launcher
        self._targets: dict[int, Target] = dict(targets or {})
        self._loaded: dict[tuple[str, str, int], _Loaded] = {}
        self.plans: dict = {}    # families' per-signature call plans (see kgen.kernels.gemm.gemm)
        self._lock = threading.Lock()
        self._miss_runner = miss_runner      # device -> Runner, for tune-on-miss (default: local GPU)
        self.background: dict[tuple[str, str, int], threading.Thread] = {}

    # ---- collaborators, made on first use ---------------------------------------------------
    @property
    def db(self):
        if self._db is None:
            from kgen.db import open_default

            self._db = open_default()
        return self._db

    @property
    def launcher(self):
        if self._launcher is None:
            from kgen.measure.launch import CupyLauncher

            self._launcher = CupyLauncher()
        return self._launcher

    def target(self, device: int) -> Target:
        t = self._targets.get(device)
        if t is None:
            t = self._targets[device] = Target.detect(device)
        return t

    # ---- policy -------------------------------------------------------------------------------
    def choose(self, spec, problem: Problem, target: Target) -> Choice:
        digest = spec.template_digest()
        best = self._best(spec.family, problem.key, target.name, digest)
        if best is not None:
            m = best.measurement
            return Choice(spec.space(problem, target).make(m.config), "tuned", m.time_ms, problem.key)
        if knobs.strict:
            raise NoConfigError(f"KGEN_STRICT=1 and {problem.key} is not tuned for {target.name}",
                                remedy=f"tune it (kgen tune {spec.family} ...) or unset KGEN_STRICT")
        nearest = self._nearest(spec, problem, target, digest)
        if nearest is not None:
            return nearest
        return Choice(spec.default_config(problem, target), "default")

    def _best(self, family: str, key: str, device: str, digest: str, **scope):
        """The database's best record, or only among trusted ones under KGEN_VERIFIED_ONLY=1."""
        if knobs.verified_only:
            from kgen.db.verify import trusted_best

            return trusted_best(self.db, family, key, device, digest)
        return self.db.best(family, key, device, digest, **scope)

    def _nearest(self, spec, problem: Problem, target: Target, digest: str) -> Choice | None:
        policy, cc = knobs.dispatch_policy, f"{target.cc[0]}.{target.cc[1]}"
        ranked = []
        for key in self.db.problems(spec.family, target.name, digest, policy=policy, cc=cc):
            try:
                other = Problem.from_key(key)
            except Exception:
                continue
            d = problem.distance(other, tuple(spec.shape_params))
            if d != float("inf"):
                ranked.append((d, key))
        space = None
        for _, key in sorted(ranked):
            best = self._best(spec.family, key, target.name, digest, policy=policy, cc=cc)
            if best is None:
                continue
            space = space or spec.space(problem, target)
            values = dict(best.measurement.config)
            if set(values) == set(space.names) and space.is_valid(values):
                if best.provenance.device != target.name:
                    log.info("%s on %s: using the best config of %s measured on %s (KGEN_DISPATCH_POLICY=%s)",
                             problem.key, target.name, key, best.provenance.device, policy)
                return Choice(space.make(values), "nearest", None, key)
        return None

    # ---- the hot path ---------------------------------------------------------------------------
    def prepare(self, spec, problem: Problem, device: int) -> _Loaded:
        key = (spec.family, problem.key, device)
        loaded = self._loaded.get(key)
        if loaded is not None:
            return loaded
        with self._lock:
            loaded = self._loaded.get(key)
            if loaded is None:
                loaded = self._from_memo(spec, problem, device)
            if loaded is None:
                fingerprint = dispatch_memo.database_fingerprint() if self._default_db else None
                target = self.target(device)
                choice = self.choose(spec, problem, target)
                source = render(spec, problem, choice.config, target)
                result = compile_source(source)
                if result.failure is not None:
                    raise CompileError(f"{choice.config.name} did not compile: {result.failure.detail[:2000]}",
                                       remedy="report it with the saved source; meanwhile tune the problem",
                                       config=choice.config.name)
                loaded = _Loaded(spec, problem, choice, self.launcher.load(result.binary))
                if choice.how == "tuned":
                    dispatch_memo.remember(
                        dispatch_memo.memo_key(spec.family, problem.key, device, spec.template_digest()),
                        fingerprint, {"config": [list(kv) for kv in choice.config.values],
                                      "name": choice.config.name, "time_ms": choice.time_ms,
                                      "cubin": result.binary.path, "source_digest": result.binary.source_digest,
                                      "arch": result.binary.arch, "resources": result.binary.resources,
                                      "target": target.as_dict()})
                if choice.how != "tuned" and knobs.tune_on_miss > 0:
                    self._tune_in_background(spec, problem, device, target)
            self._loaded[key] = loaded
        return loaded

    def _from_memo(self, spec, problem: Problem, device: int) -> _Loaded | None:
        """A tuned choice remembered by an earlier process, when still valid (see dispatch_memo)."""
        if not self._default_db or not knobs.dispatch_memo:
            return None
        key = dispatch_memo.memo_key(spec.family, problem.key, device, spec.template_digest())
        entry = dispatch_memo.lookup(key, dispatch_memo.database_fingerprint())
        if entry is None:
            return None
        try:
            target = self._targets.get(device) or target_from_dict(entry["target"])
            if not _same_device(target, device):
                return None
            config = Config(entry["name"], tuple((k, v) for k, v in entry["config"]))
            binary = Binary(Path(entry["cubin"]).read_bytes(), config.name, entry["source_digest"],
                            entry["arch"], dict(entry["resources"]), entry["cubin"])
        except (KeyError, TypeError, ValueError, OSError) as exc:
            log.debug("dispatch memo entry %s unusable: %s", key, exc)
            return None
        self._targets.setdefault(device, target)
        choice = Choice(config, "tuned", entry.get("time_ms"), problem.key)
        return _Loaded(spec, problem, choice, self.launcher.load(binary))

    # ---- tune on miss ----------------------------------------------------------------------------
    def _tune_in_background(self, spec, problem: Problem, device: int, target: Target) -> None:
        """Tune an untuned problem (KGEN_TUNE_ON_MISS trials) in a thread; calls keep using
        the fallback until it finishes, then the next call picks the tuned best."""
        key = (spec.family, problem.key, device)
        if key in self.background:
            return

        def work() -> None:
            from kgen.search import tune

            try:
                runner = self._miss_runner(device) if self._miss_runner else _local_runner(device, target)
                with runner:
                    tune(spec, problem, target, runner, self.db, trials=knobs.tune_on_miss)
            except Exception as exc:   # a background tune never breaks the caller
                log.warning("tune on miss of %s failed: %s", problem.key, exc)
            finally:
                self.forget(spec.family, problem.key)

        thread = threading.Thread(target=work, name=f"kgen-tune-on-miss-{problem.key}", daemon=True)
        self.background[key] = thread
        thread.start()

    def forget(self, family: str, problem_key: str) -> None:
        """Drop the loaded kernels and call plans of one problem: the next call chooses again."""
        with self._lock:
            for key in [k for k in self._loaded if k[0] == family and k[1] == problem_key]:
                del self._loaded[key]
            for sig in [s for s, plan in self.plans.items() if getattr(plan, "problem", None) is not None
                        and plan.problem.family == family and plan.problem.key == problem_key]:
                del self.plans[sig]

    def call(self, spec, problem: Problem, operands: Mapping[str, Any], device: int) -> None:
        loaded = self.prepare(spec, problem, device)
        spec.run(loaded.kernel, problem, loaded.choice.config, operands)

    def clear(self) -> None:
        with self._lock:
            self._loaded.clear()
            self.plans.clear()


def _same_device(target: Target, device: int) -> bool:
    """Is ``device`` still the GPU (and driver) ``target`` describes? Cheap runtime queries."""
    try:
        from cupy.cuda import runtime

        props = runtime.getDeviceProperties(device)
        return (device_name(props) == target.name and (int(props["major"]), int(props["minor"])) == tuple(target.cc)
                and int(runtime.driverGetVersion()) == target.driver_version)
    except Exception:   # no CuPy or no device here: let the full path decide and explain
        return False


def _local_runner(device: int, target: Target):
    from kgen.runners import LocalGPURunner

    return LocalGPURunner((device,), target.l2_bytes)


_default: Dispatcher | None = None


def default_dispatcher() -> Dispatcher:
    global _default
    if _default is None:
        _default = Dispatcher()
    return _default


def set_default_dispatcher(dispatcher: Dispatcher | None) -> Dispatcher | None:
    """Swap the process-wide dispatcher (tests; a custom launcher); returns the old one."""
    global _default
    old, _default = _default, dispatcher
    return old


def run(spec, problem: Problem, operands: Mapping[str, Any], device: int = 0) -> None:
    """Launch a registered family's best known kernel for ``problem`` on ``operands``.

    The generic call path for user families (``kgen.gemm`` is the GEMM family's own).
    """
    default_dispatcher().call(spec, problem, operands, device)
