"""The call-time path: operands -> Problem -> best Config -> loaded kernel -> launch.

Policy for a problem, in order: the tuned best for this device and template (exact key),
or the vendor library's measured time for it (``kgen.vendor``) where that is faster; for an
untuned problem the vendor library (a problem nobody tuned has no measurement saying a
generated kernel is faster), unless ``KGEN_VENDOR=0`` or the family has no vendor call —
a ranking that a caller holding the operands may replace by a measurement: the GEMM call
paths race the vendor call against the generated picks (``generated``) on the first call
and keep the winner (``settle``, how "raced"; ``kgen.ops.race``); else, by ``KGEN_UNTUNED``:
the family's cost model's pick (``model``, the default), the best config of the nearest
tuned problem of the same family (distance on log2 of the shape parameters, everything else
equal) when it is valid here, among the records
``KGEN_DISPATCH_POLICY`` admits (device: this device's; arch: this compute capability's;
any: every device's; the template digest always matches), and the family's default config.
Records are used only where dispatch may trust them (``kgen.db.trust``): under
``KGEN_VERIFIED_ONLY`` (the default) an imported record once ``kgen db verify`` confirmed it
here, or when it was imported with ``--trust``. ``KGEN_STRICT=1`` raises instead of falling
back. Everything after the first call of a problem is served from memory: no database, no compiler, no synchronisation. A background
thread looks at the database files' fingerprint every ``KGEN_REFRESH_S`` seconds and drops
every cached choice when it changed (another process tuned or imported); ``kgen.refresh()``
does it at once, and is the only way for a database on a server.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Mapping

from kgen import dispatch_memo
from kgen.compile import Binary, compile_source
from kgen.errors import CompileError, NoConfigError
from kgen.knobs import knobs
from kgen.nearest import nearest_problems
from kgen.plausible import floor_ms
from kgen.problem import Problem, Target, device_name, target_from_dict
from kgen.render import render
from kgen.space import Config
from kgen.vendor import VENDOR_CONFIG, VENDOR_DIGEST, is_vendor_config, ranking_ms

log = logging.getLogger(__name__)
_RANK = {"tuned": 0, "raced": 0, "vendor": 1, "arch": 2, "model": 3, "nearest": 3, "default": 4}


def _usable(record, floor: float) -> bool:
    """Whether dispatch may run a record's config: measured (not replayed), with a time at or
    above the problem's physical floor (``kgen.plausible``)."""
    from kgen.db.base import is_replayed, usable_time

    time_ms = usable_time(record)
    return time_ms is not None and time_ms >= floor and not is_replayed(record)


@dataclass(frozen=True)
class Choice:
    config: Config
    how: str                 # "tuned" | "raced" | "vendor" | "arch" | "model" | "nearest" | "default"
    time_ms: float | None = None
    from_problem: str = ""
    predicted_ms: float | None = None     # the cost model's prediction ("model"), the other card's time ("arch")

    @property
    def vendor(self) -> bool:
        return is_vendor_config(self.config.name)

    @property
    def rank(self) -> tuple:
        """Order among the choices of several families for one call: measured ones by time (the
        vendor library's less KGEN_VENDOR_MARGIN: ``kgen.vendor.ranking_ms``), then the vendor
        library, then configs measured on another card of this architecture by that card's time,
        then the models' picks by predicted time, then defaults."""
        if self.time_ms is not None:
            return (0, ranking_ms(self.time_ms, self.vendor))
        return (_RANK[self.how], self.predicted_ms if self.predicted_ms is not None else float("inf"))


@dataclass
class _Loaded:
    spec: Any
    problem: Problem
    choice: Choice
    kernel: Any
    binary: Binary | None = None


class Dispatcher:
    """Chooses, compiles, caches and launches; one per process (``default_dispatcher()``)."""

    def __init__(self, db=None, launcher=None, targets: Mapping[int, Target] | None = None,
                 miss_tuner=None):
        self._db = db
        self._default_db = db is None   # only the default database's files can vouch for the memo
        self._launcher = launcher
        self._targets: dict[int, Target] = dict(targets or {})
        self._loaded: dict[tuple[str, str, int], _Loaded] = {}
        self._decided: dict[tuple[str, str, int], Choice] = {}   # choices made, by record problem
        # loaded kernels by binary and device: problems that differ only in what the kernel takes
        # as arguments (a grouped GEMM's token count) render one source, loaded once
        self._kernels: dict[tuple[str, str, str, int], Any] = {}
        self.plans: dict = {}    # families' per-signature call plans (see kgen.kernels.gemm.gemm)
        self._lock = threading.Lock()
        self._miss_tuner = miss_tuner        # (spec, problem, target, device, db) -> None: tune on miss
        self.background: dict[tuple[str, str, int], threading.Thread] = {}
        self._watcher: threading.Thread | None = None

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
    def choose(self, spec, problem: Problem, target: Target, vendor: bool = True) -> Choice:
        """The choice for ``problem``: that of the problem whose records serve it
        (``spec.record_problem``), by the module's policy (``vendor=False``: among the
        generated kernels alone, what a first-call race times against an unmeasured vendor call)."""
        problem = spec.record_problem(problem)
        digest = spec.template_digest()
        best = self._valid_best(spec, problem, target, digest)
        vendor = self._vendor(spec, problem, target) if vendor else None
        if best is not None:
            record, config = best
            tuned = Choice(config, "tuned", record.measurement.time_ms, problem.key)
            return vendor if vendor is not None and vendor.rank < tuned.rank else tuned
        if vendor is not None and (vendor.time_ms is not None or not knobs.strict):
            return vendor
        if knobs.strict:
            raise NoConfigError(f"KGEN_STRICT=1 and {problem.key} is not tuned for {target.name}",
                                remedy=f"tune it (kgen tune {spec.family} ...) or unset KGEN_STRICT")
        return self._untuned(spec, problem, target, digest)

    def _vendor(self, spec, problem: Problem, target: Target) -> Choice | None:
        """The vendor library as this problem's candidate: with its stored time, or unmeasured."""
        if not knobs.vendor or not spec.vendor_supported(problem):
            return None
        record = self._best(spec.family, problem.key, target.name, VENDOR_DIGEST)
        if record is not None and record.measurement.time_ms < floor_ms(spec, problem):
            record = None                   # an invented time: the candidate counts as unmeasured
        time_ms = record.measurement.time_ms if record is not None else None
        return Choice(Config(VENDOR_CONFIG, ()), "vendor", time_ms, problem.key if record else "")

    def _untuned(self, spec, problem: Problem, target: Target, digest: str) -> Choice:
        """A generated kernel for a problem with no record on this device: the same problem's
        best on another card of this compute capability (``_same_arch``), then KGEN_UNTUNED's
        order of fallbacks."""
        policy = knobs.untuned
        if policy != "default":
            borrowed = self._same_arch(spec, problem, target, digest)
            if borrowed is not None:
                return borrowed
        if policy == "model":
            picked = spec.model_choice(problem, target)
            if picked is not None:
                return Choice(picked[0], "model", predicted_ms=picked[1])
        if policy in ("model", "nearest"):
            nearest = self._nearest(spec, problem, target, digest)
            if nearest is not None:
                return nearest
        return Choice(spec.default_config(problem, target), "default")

    def _valid_best(self, spec, problem: Problem, target: Target, digest: str):
        """(record, config) of the fastest tuned record dispatch may use: its config valid in the
        family's space, its time above the physical floor (``kgen.plausible``), measured (not
        replayed), and trusted (``kgen.db.trust``: under KGEN_VERIFIED_ONLY, the default, an
        imported record only once verified here or imported with --trust). A record that is
        not (a shared file's bad or hostile values, an invented time, an unverified import) is
        passed over, with a warning for the first two, and never rendered."""
        from kgen.db.base import is_replayed, usable_time      # (importing kgen loads no database code)
        from kgen.db.trust import is_trusted, needs_verdict

        best = self._best(spec.family, problem.key, target.name, digest)
        if best is None:
            return None
        space = spec.space(problem, target)
        floor = floor_ms(spec, problem)
        config = space.trusted(best.measurement.config) if _usable(best, floor) else None
        if config is not None:
            return best, config
        if not is_replayed(best):
            log.warning("%s: the best record (%r, %s ms) is not a valid %s config or is faster than any GPU "
                        "(%.4f ms); passed over", problem.key, best.measurement.config_name,
                        best.measurement.time_ms, spec.family, floor)
        records = self.db.records(spec.family, problem.key, target.name, digest)
        timed = [r for r in records if _usable(r, floor)
                 and (not knobs.verified_only or not needs_verdict(r) or is_trusted(r, records))]
        for record in sorted(timed, key=lambda r: (usable_time(r), r.measurement.config_name)):
            config = space.trusted(record.measurement.config)
            if config is not None:
                return record, config
        return None

    def _best(self, family: str, key: str, device: str, digest: str, **scope):
        """The database's best record; only among trusted ones under KGEN_VERIFIED_ONLY (the default)."""
        if knobs.verified_only:
            from kgen.db.trust import trusted_best

            return trusted_best(self.db, family, key, device, digest, **scope)
        return self.db.best(family, key, device, digest, **scope)

    def _same_arch(self, spec, problem: Problem, target: Target, digest: str) -> Choice | None:
        """The best config of this very problem measured on another card of this compute
        capability (an H100's record on an H200), under KGEN_SAME_ARCH_RECORDS: a measurement of
        the problem on the same SMs ranks above any model's guess; its time, the other card's,
        is a prediction here ("arch"), so a first-call race still times it where one runs. A
        record that is replayed, faster than any GPU, or not a valid config here is passed over."""
        from kgen.db.base import usable_time

        if not knobs.same_arch_records:
            return None
        best = self._best(spec.family, problem.key, target.name, digest, policy="arch",
                          cc=f"{target.cc[0]}.{target.cc[1]}")
        if best is None or best.provenance.device == target.name or not _usable(best, floor_ms(spec, problem)):
            return None
        config = spec.space(problem, target).trusted(best.measurement.config)
        if config is None:
            return None
        return Choice(config, "arch", from_problem=problem.key, predicted_ms=usable_time(best))

    def _nearest(self, spec, problem: Problem, target: Target, digest: str) -> Choice | None:
        from kgen.db.base import is_replayed

        policy, cc = knobs.dispatch_policy, f"{target.cc[0]}.{target.cc[1]}"
        keys = self.db.problems(spec.family, target.name, digest, policy=policy, cc=cc)
        space = None
        for key in nearest_problems(problem, keys, spec.shape_params):
            best = self._best(spec.family, key, target.name, digest, policy=policy, cc=cc)
            if best is None or is_replayed(best):
                continue
            space = space or spec.space(problem, target)
            config = space.trusted(best.measurement.config)
            if config is not None:
                if best.provenance.device != target.name:
                    log.info("%s on %s: using the best config of %s measured on %s (KGEN_DISPATCH_POLICY=%s)",
                             problem.key, target.name, key, best.provenance.device, policy)
                return Choice(config, "nearest", None, key)
        return None

    # ---- the hot path ---------------------------------------------------------------------------
    def decide(self, spec, problem: Problem, device: int) -> Choice:
        """The choice ``prepare`` would load for ``problem``, made (and kept) without compiling
        or loading anything: a request that several families can run decides for each, then
        prepares the winner alone."""
        loaded = self._loaded.get((spec.family, problem.key, device))
        if loaded is not None:
            return loaded.choice
        return self._decision(spec, spec.record_problem(problem), device)

    def _decision(self, spec, shared: Problem, device: int) -> Choice:
        """The choice for the record problem ``shared``, made once (the memo's, else ``choose``)
        and kept for every problem it serves."""
        key = (spec.family, shared.key, device)
        choice = self._decided.get(key)
        if choice is None:
            with self._lock:
                choice = self._decided.get(key)
                if choice is None:
                    entry = self._memo_entry(spec, shared, device)
                    if entry is not None:
                        choice = Choice(_memo_config(entry), "tuned", entry.get("time_ms"), shared.key)
                    else:
                        self._watch()
                        choice = self.choose(spec, shared, self.target(device))
                    self._decided[key] = choice
        return choice

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
                self._watch()
                fingerprint = dispatch_memo.database_fingerprint() if self._default_db else None
                target = self.target(device)
                shared = spec.record_problem(problem)
                decided = (spec.family, shared.key, device)
                choice = self._decided.get(decided) or self.choose(spec, shared, target)
                self._decided[decided] = choice     # kept for the other problems it serves
                loaded = self.load(spec, problem, device, choice)
                if loaded.kernel is not None and choice.how == "tuned":
                    binary = loaded.binary
                    dispatch_memo.remember(
                        dispatch_memo.memo_key(spec.family, shared.key, device, spec.template_digest()),
                        fingerprint, {"config": [list(kv) for kv in choice.config.values],
                                      "name": choice.config.name, "time_ms": choice.time_ms,
                                      "cubin": binary.path, "source_digest": binary.source_digest,
                                      "arch": binary.arch, "resources": binary.resources,
                                      "target": target.as_dict()})
                if choice.how not in ("tuned", "raced") and choice.time_ms is None and knobs.tune_on_miss > 0:
                    self._tune_in_background(spec, shared, device, target)
            self._loaded[key] = loaded
        return loaded

    def generated(self, spec, problem: Problem, device: int) -> Choice:
        """The choice for ``problem`` among the generated kernels alone (not kept: ``settle``
        keeps what a race decided)."""
        return self.choose(spec, spec.record_problem(problem), self.target(device), vendor=False)

    def load(self, spec, problem: Problem, device: int, choice: Choice) -> _Loaded:
        """``choice`` for ``problem``, its kernel compiled and loaded (none for the vendor's,
        which the plan calls itself); nothing kept but the loaded binary."""
        return self.load_many([(spec, problem, choice)], device)[0]

    def load_many(self, wanted, device: int) -> list[_Loaded]:
        """``load`` of each (spec, problem, choice) of ``wanted``, their compiles side by side in
        threads (NVRTC releases the GIL; a first-call race's three candidates: 0.86 s one after
        another, 0.65 s at once on two host cores, ``scripts/experiments/parallel_compile.py``),
        the kernels then loaded in order."""
        sources = [None if choice.vendor else self._source(spec, problem, device, choice)
                   for spec, problem, choice in wanted]
        todo = [source for source in sources if source is not None]
        if len(todo) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(len(todo), max(1, knobs.compile_workers))) as pool:
                compiled = iter(list(pool.map(compile_source, todo)))
        else:
            compiled = iter([compile_source(source) for source in todo])
        loaded = []
        for (spec, problem, choice), source in zip(wanted, sources):
            if source is None:
                loaded.append(_Loaded(spec, problem, choice, None))
                continue
            result = next(compiled)
            if result.failure is not None:
                raise CompileError(f"{choice.config.name} did not compile: {result.failure.detail[:2000]}",
                                   remedy="report it with the saved source; meanwhile tune the problem",
                                   config=choice.config.name)
            loaded.append(_Loaded(spec, problem, choice, self._kernel(result.binary, device), result.binary))
        return loaded

    def _source(self, spec, problem: Problem, device: int, choice: Choice):
        """The rendered kernel of ``choice`` for ``problem``: the config is one of the record
        problem's space (a grouped call's fewer tokens may prune tiles its kernel runs all the same)."""
        shared = spec.record_problem(problem)
        target = self.target(device)
        return render(spec, problem, choice.config, target,
                      space=spec.space(shared, target) if shared != problem else None)

    def settle(self, loaded: _Loaded, device: int, time_ms: float) -> Choice:
        """Keep ``loaded`` as its problem's choice from now on, measured at ``time_ms`` by a
        first-call race (``kgen.ops.race``): later signatures of the problem rank it by that time."""
        spec, problem = loaded.spec, loaded.problem
        shared = spec.record_problem(problem)
        choice = Choice(loaded.choice.config, "raced", time_ms, shared.key if loaded.choice.from_problem else "",
                        loaded.choice.predicted_ms)
        with self._lock:
            self._decided[(spec.family, shared.key, device)] = choice
            self._loaded[(spec.family, problem.key, device)] = _Loaded(spec, problem, choice, loaded.kernel,
                                                                       loaded.binary)
        if knobs.tune_on_miss > 0:          # a race measured a few candidates; a tune measures the space
            self._tune_in_background(spec, shared, device, self.target(device))
        return choice

    def _kernel(self, binary: Binary, device: int):
        """``binary`` loaded on ``device`` (the current one), once for every problem it serves."""
        key = (binary.source_digest, binary.arch, binary.entry, device)
        kernel = self._kernels.get(key)
        if kernel is None:
            kernel = self._kernels[key] = self.launcher.load(binary)
        return kernel

    def _memo_entry(self, spec, problem: Problem, device: int) -> dict | None:
        """A tuned choice remembered by an earlier process, when still valid (see dispatch_memo)."""
        if not self._default_db or not knobs.dispatch_memo:
            return None
        key = dispatch_memo.memo_key(spec.family, spec.record_problem(problem).key, device, spec.template_digest())
        return dispatch_memo.lookup(key, dispatch_memo.database_fingerprint())

    def _from_memo(self, spec, problem: Problem, device: int) -> _Loaded | None:
        """The remembered tuned choice with its kernel loaded from the cubin it names."""
        entry = self._memo_entry(spec, problem, device)
        if entry is None:
            return None
        try:
            target = self._targets.get(device) or target_from_dict(entry["target"])
            if not _same_device(target, device):
                return None
            config = _memo_config(entry)
            binary = Binary(Path(entry["cubin"]).read_bytes(), config.name, entry["source_digest"],
                            entry["arch"], dict(entry["resources"]), entry["cubin"])
        except (KeyError, TypeError, ValueError, OSError) as exc:
            log.debug("dispatch memo entry of %s unusable: %s", problem.key, exc)
            return None
        self._targets.setdefault(device, target)
        choice = Choice(config, "tuned", entry.get("time_ms"), spec.record_problem(problem).key)
        return _Loaded(spec, problem, choice, self._kernel(binary, device))

    # ---- tune on miss ----------------------------------------------------------------------------
    def _tune_in_background(self, spec, problem: Problem, device: int, target: Target) -> None:
        """Tune an untuned problem (KGEN_TUNE_ON_MISS trials) in a thread; calls keep using
        the fallback until it finishes, then the next call picks the tuned best."""
        key = (spec.family, problem.key, device)
        if key in self.background:
            return

        tuner = self._miss_tuner or _miss_tuner
        if tuner is None:
            log.debug("no tuner given to dispatch: %s stays untuned", problem.key)
            return

        def work() -> None:
            try:
                tuner(spec, problem, target, device, self.db)
            except Exception as exc:   # a background tune never breaks the caller
                log.warning("tune on miss of %s failed: %s", problem.key, exc)
            finally:
                self.forget(spec.family, problem.key)

        thread = threading.Thread(target=work, name=f"kgen-tune-on-miss-{problem.key}", daemon=True)
        self.background[key] = thread
        thread.start()

    def forget(self, family: str, problem_key: str) -> None:
        """Drop the loaded kernels and call plans of one problem, and of every problem it is the
        record problem of: the next call chooses again."""
        with self._lock:
            keys = {problem_key}
            for key, loaded in list(self._loaded.items()):
                if key[0] == family and (key[1] == problem_key
                                         or loaded.spec.record_problem(loaded.problem).key == problem_key):
                    keys.add(key[1])
                    del self._loaded[key]
            for key in [k for k in self._decided if k[0] == family and k[1] == problem_key]:
                del self._decided[key]
            for sig in [s for s, plan in self.plans.items() if getattr(plan, "problem", None) is not None
                        and plan.problem.family == family and plan.problem.key in keys]:
                del self.plans[sig]

    def call(self, spec, problem: Problem, operands: Mapping[str, Any], device: int) -> None:
        loaded = self.prepare(spec, problem, device)
        spec.run(loaded.kernel, problem, loaded.choice.config, operands)

    def loaded(self, family: str) -> list[tuple[Problem, Choice]]:
        """(problem, choice) of each of ``family``'s loaded kernels, in the order they were loaded."""
        return [(loaded.problem, loaded.choice) for key, loaded in list(self._loaded.items()) if key[0] == family]

    def clear(self) -> None:
        """Drop every loaded kernel and call plan: the next call of each problem chooses again."""
        with self._lock:
            self._loaded.clear()
            self._decided.clear()
            self._kernels.clear()
            self.plans.clear()

    refresh = clear

    # ---- seeing other processes' records --------------------------------------------------------
    def _watch(self) -> None:
        """Start, once, the thread that drops the cached choices when the database files change."""
        if self._watcher is not None or not self._default_db or knobs.refresh_s <= 0:
            return
        first = dispatch_memo.database_fingerprint()
        if first is None:       # a database on a server: no cheap check; kgen.refresh() only
            self._watcher = threading.current_thread()
            return

        def watch(last=first) -> None:
            while True:
                time.sleep(knobs.refresh_s)
                now = dispatch_memo.database_fingerprint()
                if now != last:
                    log.info("the tuning database changed: choosing again at the next call of each problem")
                    last = now
                    self.clear()

        self._watcher = threading.Thread(target=watch, name="kgen-database-watch", daemon=True)
        self._watcher.start()


def _memo_config(entry: dict) -> Config:
    return Config(entry["name"], tuple((k, v) for k, v in entry["config"]))


def _same_device(target: Target, device: int) -> bool:
    """Is ``device`` still the GPU (and driver) ``target`` describes? Cheap runtime queries."""
    try:
        from cupy.cuda import runtime

        props = runtime.getDeviceProperties(device)
        return (device_name(props) == target.name and (int(props["major"]), int(props["minor"])) == tuple(target.cc)
                and int(runtime.driverGetVersion()) == target.driver_version)
    except Exception:   # no CuPy or no device here: let the full path decide and explain
        return False


_default: Dispatcher | None = None
_miss_tuner = None     # the tuner of dispatchers given none (``set_miss_tuner``; kgen installs one)


def set_miss_tuner(tuner) -> None:
    """The function (spec, problem, target, device, db) that tunes a missed problem for every
    dispatcher made without one (``kgen`` installs ``kgen.tune_on_miss.miss_tuner()``)."""
    global _miss_tuner
    _miss_tuner = tuner


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


def refresh() -> None:
    """Drop every cached choice of this process: the next call of each problem reads the
    database again (records another process tuned or imported). Done on its own every
    ``KGEN_REFRESH_S`` seconds when the database files changed; needed by hand only for a
    database on a server (``KGEN_DB_URL`` / ``KGEN_TEAM_DB_URL`` not SQLite).

    >>> refresh()
    """
    if _default is not None:
        _default.refresh()

