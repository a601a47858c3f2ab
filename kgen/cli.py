"""The ``kgen`` command line: tune, worker, bench, export, report, db (ls, show, export, import,
merge, prune, stats, verify), families, info. Every family, shipped or installed, is reached the same
way: ``kgen tune FAMILY --FIELD VALUE ...`` with the problem fields its KernelSpec declares
(``kgen families`` lists them); without a family, the default one (KGEN_FAMILY).

    kgen tune gemm --m 4096 --n 4096 --k 4096 --dtype float32 --trials 300
    kgen tune gemm --m 1000 --n 1000 --k 1000 --replay recording.jsonl   # no GPU needed
    kgen tune gemm --from problems.jsonl --gpus all --log trials.jsonl     # every GPU here
    kgen worker --scheduler tcp://HOST:8786                                # serve a machine's GPUs
    kgen bench gemm --m 4096 --n 4096 --k 4096
    kgen db ls
    kgen db export -o mine.jsonl && kgen db import theirs.jsonl && kgen db verify
    kgen info
"""

from __future__ import annotations

import statistics
import sys
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from kgen.errors import KgenError

app = typer.Typer(help="CUDA kernel generator and autotuner.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False)
db_app = typer.Typer(help="Inspect, share and maintain the tuning database.", no_args_is_help=True)
app.add_typer(db_app, name="db")
console = Console()
err_console = Console(stderr=True)


def _fail(exc: KgenError) -> None:
    err_console.print(f"[bold red]error:[/] {exc.message}")
    if exc.remedy:
        err_console.print(f"[yellow]remedy:[/] {exc.remedy}")
    raise typer.Exit(2)


def _open_db(url: str):
    from kgen.db import SqlStore, open_default

    return SqlStore(url) if url else open_default()


def _local_db(url: str):
    """The store that import, prune and verify write to: --db, else KGEN_DB_URL, else SQLite."""
    from kgen.db import SqlStore
    from kgen.knobs import knobs

    url = url or knobs.db_url
    return SqlStore(url) if url else SqlStore.default()


_FIELDS_HELP = "[FAMILY] --FIELD VALUE ...: the family (default KGEN_FAMILY) and its problem fields " \
               "(`kgen families` lists them)"
_TAKES_FIELDS = {"allow_extra_args": True, "ignore_unknown_options": True}


def _family_words(words: list[str]) -> tuple[str, list[str]]:
    """(family, field words) of a command's free words: a first word that is no option names
    the family, else the default family."""
    from kgen.knobs import knobs

    if words and not words[0].startswith("-"):
        return words[0], list(words[1:])
    return knobs.default_family, list(words)


def _request(words: list[str], target=None):
    """(spec, problem) of a command's free words: the family's fields, typed and checked, made
    into a problem on ``target`` (default: an H200, for a check before any device is touched)."""
    from kgen.fields import parse_args
    from kgen.problem import Target
    from kgen.registry import get_spec

    family, rest = _family_words(words)
    spec = get_spec(family)
    return spec.request(target or Target.h200(), **parse_args(spec.fields(), rest, family))


def _tuned_request(words: list[str], target=None):
    """``_request``'s (spec, problem), the problem the one whose records serve it (what a tune
    measures and stores; ``KernelSpec.record_problem``), said where it differs."""
    spec, problem = _request(words, target)
    shared = spec.record_problem(problem)
    if shared != problem:
        console.print(f"[dim]{problem.key} shares its records with {shared.key}: tuning that[/]")
    return spec, shared


def _fmt_ms(ms: Optional[float]) -> str:
    return "-" if ms is None else f"{ms:.4f} ms"


class _LiveView:
    """Trials done, failures by kind, best so far and its ratio to the baseline."""

    def __init__(self, problem, flops: float, vendor: str):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.flops, self.vendor = flops, vendor
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[status]}"), console=console)
        self.task = self.progress.add_task(problem.key, total=1, status="starting")

    def __call__(self, p) -> None:
        best = p.best.time_ms if p.best else None
        parts = [f"best {_fmt_ms(best)}"]
        if best and self.flops:
            parts.append(f"{self.flops / best / 1e9:.1f} TFLOP/s")
        if best and p.vendor_ms:
            parts.append(f"x{p.vendor_ms / best:.3f} vs {self.vendor}")
        fails = {k: v for k, v in p.failures.items() if v}
        if fails:
            parts.append("failed: " + ", ".join(f"{k} {v}" for k, v in sorted(fails.items())))
        self.progress.update(self.task, completed=p.done, total=p.budget, status="  ".join(parts))


@app.command(context_settings=_TAKES_FIELDS)
def tune(ctx: typer.Context,
         trials: int = typer.Option(100, min=1, help="configs measured for this problem, stored ones included"),
         timeout: Optional[float] = typer.Option(None, help="stop after this many seconds, keeping the best"),
         sampler: str = typer.Option("kgen", help="kgen (default: the nearest tuned problems' bests, the heuristic pick, then a model of the trials so far), tpe, random, gp, cmaes or exhaustive"),
         seed: Optional[int] = typer.Option(None, help="sampler seed (default KGEN_SEED)"),
         replay: Optional[str] = typer.Option(None, help="answer from a recording (JSON lines) instead of a GPU"),
         db: str = typer.Option("", help="database URL (default: KGEN_DB_URL or SQLite under KGEN_HOME)"),
         device: int = typer.Option(0, help="CUDA device to tune on"),
         from_file: Optional[str] = typer.Option(None, "--from", help="tune every problem of this file: a JSON "
                                                 "object of the family's problem fields or a problem key per line"),
         gpus: Optional[str] = typer.Option(None, help="tune on these GPUs of this machine at once: all or "
                                            "0,1 (one Dask worker each; needs kgen[dist])"),
         scheduler: Optional[str] = typer.Option(None, help="tune on the GPU workers of this Dask scheduler "
                                                 "(tcp://HOST:PORT; start workers with `kgen worker`)"),
         log: Optional[str] = typer.Option(None, help="append one JSON line per finished trial to this file"),
         sanitize: bool = typer.Option(False, "--sanitize", help="run the best config once more under "
                                       "compute-sanitizer memcheck (where installed); errors fail the command")) -> None:
    """Search a family's configs for one problem (or many: --from) and store every measurement.

    kgen tune [FAMILY] --FIELD VALUE ... : the family (default KGEN_FAMILY) and its problem
    fields (`kgen families` lists them), e.g. kgen tune gemm --m 4096 --n 4096 --k 4096. A request
    that several families run (gemm) searches the one predicted fastest, then measures the other
    families' first KGEN_TUNE_RIVALS configs (their model picks), so dispatch compares them by time.
    """
    from kgen.problem import Target
    from kgen.runners import LocalGPURunner, Recording, ReplayRunner
    from kgen.samplers import check_sampler
    from kgen.search import tune as run_tune

    if sanitize and replay:
        _fail(KgenError("--sanitize runs the best config on a GPU; a replay has none",
                        remedy="leave out --sanitize or --replay"))
    on_ranks = _tuned_on_ranks(ctx.args)
    if on_ranks is not None:
        if replay or from_file or gpus or scheduler or sanitize:
            _fail(KgenError("a distributed family's tune runs on the ranks mpiexec starts, with no --replay, "
                            "--from, --gpus, --scheduler or --sanitize",
                            remedy="mpiexec -n N kgen tune dist_gemm --m M --n N --k K [--dtype --a --b --trials]"))
        _tune_on_ranks(on_ranks, ctx.args, trials, sampler, seed, db)
        return
    if from_file or gpus or scheduler:
        _tune_many(ctx.args, trials, timeout, sampler, seed, replay, db, device, from_file, gpus, scheduler, log,
                   sanitize)
        return
    try:
        check_sampler(sampler)
        if replay:
            recording = Recording.load(replay)
            target = Target.h200(recording.device_name() or "NVIDIA H200")
            spec, problem = _tuned_request(ctx.args, target)
            if problem.key not in recording.problems():
                raise KgenError(f"{replay} holds no measurements of {problem.key}",
                                remedy="recorded problems: " + ", ".join(sorted(recording.problems())[:5]))
            runner = ReplayRunner(recording, seed=seed or 0)
        else:
            _request(ctx.args)                   # a typo fails before the GPU
            target = Target.detect(device)
            spec, problem = _tuned_request(ctx.args, target)
            runner = LocalGPURunner((device,), target.l2_bytes)
        store = _open_db(db)
        with runner:
            console.print(f"tuning [bold]{problem.key}[/] on {target.name} ({target.arch}), "
                          f"{trials} trials, sampler {sampler}")
            view = _LiveView(problem, spec.flops(problem), spec.baseline_name)
            trial_log = _trial_log(log, runner)
            with view.progress:
                try:
                    result = run_tune(spec, problem, target, runner, store, trials=trials, timeout_s=timeout,
                                      sampler=sampler, seed=seed, on_progress=_both(view, trial_log))
                finally:
                    if trial_log:
                        trial_log.close()
            _measure_rivals(ctx.args, target, runner, store, sampler, seed)
    except KgenError as exc:
        _fail(exc)
    _summary(result, spec.flops(problem), spec.baseline_name)
    if result.best is None:
        raise typer.Exit(1)
    if sanitize and not _sanitized([result], target, device):
        raise typer.Exit(1)


def _measure_rivals(words, target, runner, store, sampler: str, seed: Optional[int]) -> None:
    """The first KGEN_TUNE_RIVALS configs of each other family the request may run on
    (``kgen.search.measure_rivals``), a line each."""
    from kgen.fields import parse_args
    from kgen.knobs import knobs
    from kgen.registry import get_spec
    from kgen.search import measure_rivals

    family, rest = _family_words(words)
    spec = get_spec(family)
    rivals = spec.rivals(target, **parse_args(spec.fields(), rest, family))
    if not rivals or knobs.tune_rivals < 1:
        return
    for r in measure_rivals(rivals, target, runner, store, knobs.tune_rivals, sampler, seed):
        best = f"{_fmt_ms(r.best.time_ms)} ({r.best.config_name})" if r.best else "nothing ran"
        console.print(f"also measured {r.problem.family}'s first {knobs.tune_rivals} configs "
                      f"(KGEN_TUNE_RIVALS): {best}")


def _sanitized(results, target, device: int) -> bool:
    """Each result's best config run under memcheck (kgen.sanitize), reported; False on any finding."""
    from kgen.registry import get_spec
    from kgen.sanitize import sanitize
    from kgen.vendor import is_vendor_config

    clean = True
    for r in results:
        if r.best is None or is_vendor_config(r.best.config_name):
            continue
        spec = get_spec(r.problem.family)
        console.print(f"sanitizing {r.best.config_name} (compute-sanitizer memcheck, one run)...")
        report = sanitize(spec, r.problem, spec.space(r.problem, target).make(r.best.config), target, device)
        if not report.ran:
            console.print(f"[yellow]{report.detail}[/]")
            continue
        verdict = ("[green]clean[/]" if report.ok else
                   f"[red]{report.errors} memcheck errors[/]" if report.errors else "[red]wrong outputs[/]")
        console.print(f"{r.problem.key}: {verdict}" + (f"\n{report.detail}" if not report.ok else ""))
        clean = clean and report.ok
    return clean


def _tuned_on_ranks(words):
    """The family named, if all ranks of a distributed run tune it together (``tunes_on_ranks``);
    else None (an unknown family included: the usual path says so)."""
    from kgen.registry import get_spec

    try:
        spec = get_spec(_family_words(words)[0])
    except KgenError:
        return None
    return spec if spec.tunes_on_ranks else None


def _tune_on_ranks(spec, words, trials: int, sampler: str, seed: Optional[int], db: str) -> None:
    """A distributed family's tune (e.g. ``mpiexec -n 4 kgen tune dist_gemm ...``): every rank
    runs this; rank 0 searches, stores and prints."""
    from kgen.fields import parse_args

    try:
        family, rest = _family_words(words)
        result = spec.tune_on_ranks(parse_args(spec.fields(), rest, family), trials=trials, sampler=sampler,
                                    seed=seed, open_db=lambda: _open_db(db), say=console.print)
    except KgenError as exc:
        _fail(exc)
    if result is not None:
        _summary(result, spec.flops(result.problem), "the cost model")
        if result.best is None:
            raise typer.Exit(1)


def _trial_log(path: Optional[str], runner):
    from kgen.multi import TrialLog

    return TrialLog(path, runner) if path else None


def _both(view, trial_log):
    if trial_log is None:
        return view

    def progress(p) -> None:
        view(p)
        trial_log(p)
    return progress


def _dask_client(gpus: Optional[str], scheduler: Optional[str]):
    """A Dask client: of a local one-worker-per-GPU cluster (--gpus) or of a running scheduler."""
    try:
        from distributed import Client

        from kgen.runners.dask import gpu_cluster, parse_gpus
    except ImportError as exc:
        raise KgenError(f"--gpus and --scheduler need dask.distributed ({exc})",
                        remedy="pip install 'kgen[dist]'") from None
    if gpus and scheduler:
        raise KgenError("--gpus and --scheduler exclude each other",
                        remedy="give --gpus for this machine, or start `kgen worker --gpus ...` on each "
                               "machine and give --scheduler")
    if scheduler:
        try:
            client = Client(scheduler, timeout=30)
        except OSError as exc:
            raise KgenError(f"cannot reach the Dask scheduler {scheduler} ({exc})",
                            remedy="start one with `dask scheduler` and check the address") from None
        client.wait_for_workers(1, timeout=120)
        return client, None
    cluster = gpu_cluster(parse_gpus(gpus))
    return Client(cluster), cluster


def _tune_many(words, trials, timeout, sampler, seed, replay, db, device, from_file, gpus, scheduler, log,
               sanitize=False) -> None:
    """Many problems, or many GPUs: one Tuner per problem over one shared runner."""
    from kgen.multi import read_problems, tune_many
    from kgen.problem import Target
    from kgen.registry import get_spec
    from kgen.runners import LocalGPURunner, Recording, ReplayRunner

    client = cluster = None
    try:
        if from_file:
            family, rest = _family_words(words)
            if rest:
                raise KgenError(f"problem fields given beside --from: {' '.join(rest)}",
                                remedy="write every problem's fields in the file, one JSON object per line")
            problems = read_problems(from_file, get_spec(family), Target.h200())
        else:
            problems = [_tuned_request(words)]
        recording = Recording.load(replay) if replay else None
        if recording is not None:
            missing = [p.key for _, p in problems if p.key not in recording.problems()]
            if missing:
                raise KgenError(f"{replay} holds no measurements of {missing[0]}",
                                remedy="recorded problems: " + ", ".join(sorted(recording.problems())[:5]))
        if gpus or scheduler:
            from kgen.runners import DaskRunner

            client, cluster = _dask_client(gpus, scheduler)
            if client.dashboard_link:
                console.print(f"Dask dashboard: {client.dashboard_link}")
            runner = DaskRunner(client, measure=ReplayRunner(recording, seed=seed or 0).answer if recording else None)
            target = Target.h200(recording.device_name() or "NVIDIA H200") if recording else runner.target()
        elif recording is not None:
            runner = ReplayRunner(recording, seed=seed or 0)
            target = Target.h200(recording.device_name() or "NVIDIA H200")
        else:
            target = Target.detect(device)
            runner = LocalGPURunner((device,), target.l2_bytes)
        store = _open_db(db)
        trial_log = _trial_log(log, runner)
        console.print(f"tuning {len(problems)} problems on {runner.slots} x {target.name} ({target.arch}), "
                      f"{trials} trials each, sampler {sampler}")
        done = {}

        def progress(p) -> None:
            done[p.problem.key] = p.done
            if trial_log:
                trial_log(p)

        try:
            with runner:
                results = tune_many(None, problems, target, runner, store, trials=trials, timeout_s=timeout,
                                    sampler=sampler, seed=seed, on_progress=progress)
        finally:
            if trial_log:
                trial_log.close()
    except KgenError as exc:
        _fail(exc)
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    table = Table(title=f"{len(results)} problems on {target.name}")
    for col in ("problem", "measured / known", "failures", "best", "config"):
        table.add_column(col)
    for r in results:
        fails = ", ".join(f"{k} {v}" for k, v in sorted(r.failures.items()) if v) or "none"
        table.add_row(r.problem.key, f"{r.measured} / {r.known}", fails,
                      _fmt_ms(r.best.time_ms if r.best else None), r.best.config_name if r.best else "-")
    console.print(table)
    if any(r.best is None for r in results):
        raise typer.Exit(1)
    if sanitize and not _sanitized(results, target, device):
        raise typer.Exit(1)


@app.command()
def worker(scheduler: str = typer.Option(..., help="the Dask scheduler's address, tcp://HOST:PORT"),
           gpus: str = typer.Option("all", help="this machine's GPUs to serve: all or 0,1")) -> None:
    """Serve this machine's GPUs to a Dask scheduler: one single-threaded worker per GPU.

    Equivalent, per GPU d:
    CUDA_VISIBLE_DEVICES=d DASK_DISTRIBUTED__WORKER__DAEMON=False
    dask worker tcp://HOST:PORT --nthreads 1 --resources GPU=1 --name HOST-gpud
    """
    import asyncio

    try:
        try:
            from kgen.runners.dask import parse_gpus, serve_workers
        except ImportError as exc:
            raise KgenError(f"kgen worker needs dask.distributed ({exc})", remedy="pip install 'kgen[dist]'") from None
        devices = parse_gpus(gpus)
        console.print(f"serving GPUs {', '.join(map(str, devices))} to {scheduler} (Ctrl-C stops)")
        asyncio.run(serve_workers(scheduler, devices))
    except KgenError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        pass


def _summary(result, flops, vendor: str) -> None:
    table = Table(title=f"tune of {result.problem.key}")
    table.add_column("what")
    table.add_column("value")
    table.add_row("measured now / from the database", f"{result.measured} / {result.known}")
    table.add_row("wall time (compile, measure)", f"{result.seconds:.1f} s ({result.compile_s:.1f} s, "
                                                  f"{result.measure_s:.1f} s summed over processes)")
    fails = ", ".join(f"{k} {v}" for k, v in sorted(result.failures.items()) if v) or "none"
    table.add_row("failures", fails)
    saved = [m.failure.detail.rsplit("source saved at ", 1)[1] for m in result.trials
             if m.failure and "source saved at " in m.failure.detail]
    if saved:
        table.add_row("template bugs", f"{len(saved)} configs failed to compile; first source: {saved[0]}")
    if result.best:
        table.add_row("best config", result.best.config_name)
        table.add_row("best time", f"{_fmt_ms(result.best.time_ms)}"
                      + (f" ({flops / result.best.time_ms / 1e9:.1f} TFLOP/s)" if flops else ""))
        if result.vendor is not None:
            vendor_ms = result.vendor.time_ms
            table.add_row(f"{vendor} (config {result.vendor.config_name})",
                          f"{_fmt_ms(vendor_ms)}  ratio x{vendor_ms / result.best.time_ms:.3f}"
                          + (f"  (dispatch takes {vendor})" if vendor_ms < result.best.time_ms else ""))
    else:
        table.add_row("best config", "[red]none: every trial failed[/]")
    console.print(table)


@app.command(context_settings=_TAKES_FIELDS)
def bench(ctx: typer.Context, runs: int = typer.Option(50, help="timed runs (median kept)"),
          device: int = typer.Option(0),
          replay: Optional[str] = typer.Option(None, help="answer from a recording instead of a GPU: the recorded "
                                               "times of the config dispatch chooses and of the vendor library"),
          db: str = typer.Option("")) -> None:
    """Time the config dispatch chooses (tuned best, model pick or default) against the family's
    baseline library, side by side: kgen bench [FAMILY] --FIELD VALUE ..."""
    from kgen.dispatch import Dispatcher
    from kgen.problem import Target

    try:
        if replay:
            from kgen.runners import Recording

            recording = Recording.load(replay)
            target = Target.h200(recording.device_name() or "NVIDIA H200")
            spec, problem = _request(ctx.args, target)
            choice = Dispatcher(db=_open_db(db), targets={device: target}).choose(spec, problem, target)
            kgen_ms, base_ms, check = _replayed(recording, problem, choice)
            how = f"{choice.how}, replayed"
        else:
            _request(ctx.args)                       # a typo fails before the GPU
            target = Target.detect(device)
            spec, problem = _request(ctx.args, target)
            choice = Dispatcher(db=_open_db(db), targets={device: target}).choose(spec, problem, target)
            kgen_ms, base_ms, check = _timed(spec, problem, choice, target, runs)
            how = choice.how
    except KgenError as exc:
        _fail(exc)
    flops, nbytes = spec.flops(problem), spec.bytes(problem)
    rate, unit = (flops / 1e9, "TFLOP/s") if flops else (nbytes / 1e6, "GB/s")
    table = Table(title=f"{problem.key} on {target.name}")
    for col in ("kernel", "config", "time", unit, f"vs {spec.baseline_name}"):
        table.add_column(col)
    table.add_row(f"kgen ({how})", choice.config.name, _fmt_ms(kgen_ms), f"{rate / kgen_ms:.1f}" if kgen_ms else "-",
                  f"x{base_ms / kgen_ms:.3f}" if base_ms and kgen_ms else "-")
    if base_ms:
        table.add_row(spec.baseline_name, "", _fmt_ms(base_ms), f"{rate / base_ms:.1f}", "x1.000")
    console.print(table)
    if check is not None:
        console.print(f"verification: {'ok' if check.ok else '[red]FAILED[/] ' + check.detail} (error {check.error:.2e})")
    if kgen_ms is None or (check is not None and not check.ok):
        raise typer.Exit(1)


def _timed(spec, problem, choice, target, runs: int):
    """(kgen ms, baseline ms or None, check) of the chosen config, measured here."""
    import cupy

    from kgen.compile import compile_source
    from kgen.measure.bench import l2_flusher, time_runs
    from kgen.measure.launch import CupyKernel
    from kgen.measurement import Timing
    from kgen.render import render

    binary = compile_source(render(spec, problem, choice.config, target)).binary
    kernel = CupyKernel(binary.cubin, binary.entry, binary.path)
    ops = spec.inputs(problem, seed=7)
    want = spec.reference(problem, ops)
    spec.run(kernel, problem, choice.config, ops)
    cupy.cuda.get_current_stream().synchronize()
    check = spec.check(problem, ops, want)
    timing, flush = Timing(runs=runs), l2_flusher(target.l2_bytes)
    kgen_ms = statistics.median(time_runs(lambda: spec.run(kernel, problem, choice.config, ops), timing, flush))
    base = spec.baseline(problem, ops)
    base_ms = statistics.median(time_runs(base, timing, flush)) if base else None
    return kgen_ms, base_ms, check


def _replayed(recording, problem, choice):
    """(kgen ms, vendor ms or None, None) from a recording: the chosen config's recorded median
    time and the vendor library's, where recorded."""
    from kgen.vendor import VENDOR_CONFIG

    def median(name: str):
        m = recording.entries.get((problem.key, name))
        return statistics.median(m.times_ms) if m is not None and m.ok and m.times_ms else None

    kgen_ms = median(choice.config.name)
    if kgen_ms is None:
        raise KgenError(f"the recording holds no time of {choice.config.name} on {problem.key}",
                        remedy="record that config, or bench on a GPU")
    return kgen_ms, median(VENDOR_CONFIG), None


@db_app.command("ls")
def db_ls(family: Optional[str] = typer.Option(None), device: Optional[str] = typer.Option(None),
          db: str = typer.Option("")) -> None:
    """Tuned problems: records measured (and replayed: answered from a recording, never used by
    dispatch), failures, the best measured generated kernel's time, config and trust (local;
    imported and trusted, verified, unverified or rejected: dispatch uses an unverified or
    rejected import only under KGEN_VERIFIED_ONLY=0), and the vendor library's time (config
    ``cublas``, measured beside it)."""
    from kgen.db.base import is_replayed, usable_time
    from kgen.db.trust import trust_state
    from kgen.vendor import is_vendor_record

    def fastest(records):
        timed = [r for r in records if usable_time(r) is not None]
        return min(timed, key=lambda r: (usable_time(r), r.measurement.config_name), default=None)

    try:
        store = _open_db(db)
        table = Table(title="tuned problems")
        for col in ("family", "device", "problem", "records", "replayed", "failed", "best", "config", "trust",
                    "cuBLAS"):
            table.add_column(col)
        for fam in ([family] if family else store.families()):
            for key in store.problems(fam, device):
                records = store.records(fam, key, device)
                for dev in sorted({r.provenance.device for r in records}):
                    mine = [r for r in records if r.provenance.device == dev]
                    replayed = sum(1 for r in mine if is_replayed(r))
                    best = fastest(r for r in mine if not is_vendor_record(r) and not is_replayed(r))
                    vendor = fastest(r for r in mine if is_vendor_record(r))
                    table.add_row(fam, dev, key, str(len(mine) - replayed), str(replayed),
                                  str(sum(1 for r in mine if r.measurement.failure)),
                                  _fmt_ms(best.measurement.time_ms) if best else "-",
                                  best.measurement.config_name if best else "-",
                                  trust_state(best, mine) if best else "-",
                                  _fmt_ms(vendor.measurement.time_ms) if vendor else "-")
    except KgenError as exc:
        _fail(exc)
    console.print(table)


@db_app.command("show")
def db_show(problem_key: str = typer.Argument(..., help="a problem key, as `kgen db ls` prints it"),
            family: Optional[str] = typer.Option(None), limit: int = typer.Option(20),
            db: str = typer.Option("")) -> None:
    """Every record of one problem, fastest first, failures last."""
    try:
        store = _open_db(db)
        fam = family or problem_key.split("|", 1)[0]
        records = store.records(fam, problem_key)
        if not records:
            raise KgenError(f"no records of {problem_key!r}", remedy="list problems with `kgen db ls`")
    except KgenError as exc:
        _fail(exc)
    records.sort(key=lambda r: (r.measurement.time_ms is None, r.measurement.time_ms or 0, r.measurement.config_name))
    table = Table(title=f"{problem_key}: {len(records)} records")
    for col in ("config", "time", "error", "failure", "device", "when"):
        table.add_column(col)
    for r in records[:limit]:
        m = r.measurement
        table.add_row(m.config_name, _fmt_ms(m.time_ms), f"{m.error:.1e}" if m.error is not None else "-",
                      f"{m.failure.kind}: {m.failure.detail[:60]}" if m.failure else "",
                      r.provenance.device, r.provenance.created)
    console.print(table)


_DB_OPT = typer.Option("", help="database URL (default: KGEN_DB_URL or SQLite under KGEN_HOME)")


@db_app.command("export")
def db_export(output: str = typer.Option(..., "--output", "-o", help="file to write"),
              device: Optional[str] = typer.Option(None, help="only this device (its name, as `kgen db ls` shows)"),
              family: Optional[str] = typer.Option(None, help="only this family"),
              fmt: str = typer.Option("jsonl", "--format", help="jsonl (kgen's exchange format) or t4"),
              db: str = _DB_OPT) -> None:
    """Write the local database's records to a file others can import."""
    from kgen.db.exchange import collect, write_records

    try:
        if fmt not in ("jsonl", "t4"):
            raise KgenError(f"unknown format {fmt!r}", remedy="use --format jsonl or --format t4")
        records = collect(_local_db(db), device, family)
        if not records:
            raise KgenError("no records match: nothing was written",
                            remedy="list what is stored with `kgen db ls`, or drop --device / --family")
        n = write_records(output, records, fmt)
    except KgenError as exc:
        _fail(exc)
    console.print(f"wrote {n} records to {output} ({fmt})")


@db_app.command("import")
def db_import(file: str = typer.Argument(..., help="a file from `kgen db export` (.gz too) or a T4 results file"),
              fmt: str = typer.Option("auto", "--format", help="auto, jsonl or t4"),
              problem: Optional[str] = typer.Option(None, help="problem key of T4 results that carry no kgen keys"),
              device: Optional[str] = typer.Option(None, help="device name of T4 results that carry no kgen keys"),
              skip_invalid: bool = typer.Option(False, "--skip-invalid",
                                                help="leave out (and count) records invalid here instead of "
                                                     "importing nothing"),
              trust: bool = typer.Option(False, "--trust", help="dispatch may use the file's records at once, "
                                                                "without `kgen db verify`"),
              db: str = _DB_OPT) -> None:
    """Check a file (every record a valid config of its family with a plausible time), then store
    its records in one transaction (or none)."""
    from kgen.db.exchange import import_file

    try:
        keys = {k: v for k, v in (("problem_key", problem), ("device", device)) if v}
        report = import_file(file, _local_db(db), fmt, skip_invalid=skip_invalid, trust=trust, **keys)
    except KgenError as exc:
        _fail(exc)
    console.print(report.summary(), markup=False, highlight=False, soft_wrap=True)


@db_app.command("merge")
def db_merge(inputs: list[str] = typer.Argument(..., help="exchange files to merge"),
             output: str = typer.Option(..., "--output", "-o", help="file to write"),
             skip_invalid: bool = typer.Option(False, "--skip-invalid",
                                               help="leave out (and count) records invalid here instead of "
                                                    "writing nothing")) -> None:
    """Merge exchange files into one (identical records once, conflicting ones all), each record
    checked as an import checks it, in a fixed order."""
    from kgen.db.exchange import merge

    try:
        report = merge(inputs, output, skip_invalid=skip_invalid)
    except KgenError as exc:
        _fail(exc)
    console.print(report.summary(len(inputs), output), markup=False, highlight=False, soft_wrap=True)


@db_app.command("prune")
def db_prune(keep: int = typer.Option(..., help="fastest successful records kept per problem, device and template"),
             db: str = _DB_OPT) -> None:
    """Delete all but the fastest records of each problem (failures too)."""
    from kgen.db.exchange import prune

    try:
        deleted = prune(_local_db(db), keep)
    except KgenError as exc:
        _fail(exc)
    console.print(f"deleted {deleted} records, kept the {keep} fastest per problem, device and template")


@db_app.command("stats")
def db_stats(db: str = _DB_OPT) -> None:
    """Records, problems, devices, families, failures by kind and file size."""
    from kgen.db.exchange import stats

    try:
        store = _local_db(db)
        s = stats(store)
    except KgenError as exc:
        _fail(exc)
    table = Table(title=f"tuning database {getattr(store, '_shown', store.url)}")
    table.add_column("what")
    table.add_column("value")
    for what in ("records", "problems"):
        table.add_row(what, str(s[what]))
    table.add_row("devices", ", ".join(s["devices"]) or "-")
    table.add_row("families", ", ".join(s["families"]) or "-")
    table.add_row("failures", ", ".join(f"{k} {v}" for k, v in s["failures"].items()) or "none")
    table.add_row("origins", ", ".join(f"{k} {v}" for k, v in s["origins"].items()) or "-")
    table.add_row("file size", "-" if s["file_bytes"] is None else f"{s['file_bytes'] / 1e6:.2f} MB")
    console.print(table)


@db_app.command("verify")
def db_verify(device: int = typer.Option(0, help="CUDA device to measure on"),
              family: Optional[str] = typer.Option(None, help="only this family"),
              replay: Optional[str] = typer.Option(None, help="answer from a recording instead of a GPU"),
              db: str = _DB_OPT) -> None:
    """Re-measure the best imported config of each problem here; store verified / rejected."""
    from kgen.db.verify import verify
    from kgen.problem import Target
    from kgen.runners import LocalGPURunner, Recording, ReplayRunner

    try:
        if replay:
            recording = Recording.load(replay)
            target = Target.h200(recording.device_name() or "NVIDIA H200")
            runner = ReplayRunner(recording)
        else:
            target = Target.detect(device)
            runner = LocalGPURunner((device,), target.l2_bytes)
        with runner:
            verdicts = verify(_local_db(db), runner, target, family)
    except KgenError as exc:
        _fail(exc)
    if not verdicts:
        console.print(f"nothing to verify on {target.name}: no unverified imported records")
        return
    table = Table(title=f"imported configs re-measured on {target.name}")
    for col in ("problem", "config", "imported", "here", "verdict", "detail"):
        table.add_column(col)
    for v in verdicts:
        colour = {"verified": "green", "rejected": "red"}.get(v.verdict, "yellow")
        table.add_row(v.problem_key, v.config_name, _fmt_ms(v.imported_ms), _fmt_ms(v.measured_ms),
                      f"[{colour}]{v.verdict}[/]", v.detail)
    console.print(table)


@app.command("export")
def export_cmd(family: Optional[str] = typer.Argument(None, help="kernel family (default KGEN_FAMILY)"),
               output: str = typer.Option(..., "--output", "-o", help="folder to write the package into"),
               name: str = typer.Option("kgen_kernels", help="the Python package's name"),
               device: Optional[str] = typer.Option(None, help="device whose records to export (default: the only one)"),
               problems: Optional[str] = typer.Option(None, help="file of problems to export: a key or a JSON "
                                                               "object of the family's problem fields per line"),
               db: str = typer.Option("", help="database URL (default: the layered default)")) -> None:
    """Write the tuned kernels as a Python package: CuPy its runtime dependency (and cuda-bindings
    for kernels that read through TMA maps); no kgen."""
    from kgen.export import export_package
    from kgen.knobs import knobs

    family = family or knobs.default_family
    try:
        summary = export_package(family, output, name=name, device=device, problems=problems, db=_open_db(db))
    except KgenError as exc:
        _fail(exc)
    console.print(f"wrote {summary.path}: {summary.problems} problems, {summary.kernels} kernels "
                  f"({summary.device}, cubins for {summary.arch} and PTX for newer GPUs)")
    if summary.skipped:
        console.print(f"[yellow]left out {len(summary.skipped)} problems whose best record is not a valid "
                      f"config[/]: {', '.join(summary.skipped[:5])}" + (" ..." if len(summary.skipped) > 5 else ""))
    console.print(f"use: cd {output} && python -c 'import {name}; print({name}.problems())'")


@app.command()
def report(output: str = typer.Option(..., "--output", "-o", help="HTML file to write"),
           family: Optional[str] = typer.Option(None, help="only this family"),
           device: Optional[str] = typer.Option(None, help="only this device (its name, as `kgen db ls` shows)"),
           db: str = typer.Option("", help="database URL (default: the layered default)")) -> None:
    """One self-contained HTML page (works offline) of the database: per family and device, each
    problem's best against its baseline, each tune's convergence, a roofline of the bests. A
    database with nothing to report gets a page saying so (exit 0)."""
    from kgen.report import write_report

    try:
        store = _open_db(db)
        try:
            written = write_report(store, output, family=family, device=device)
        finally:
            store.close()
    except KgenError as exc:
        _fail(exc)
    if not written.sections:
        console.print(f"[yellow]nothing to report[/]: wrote {output}, a page saying so")
        return
    console.print(f"wrote {output}: {len(written.sections)} family and device sections, "
                  f"{sum(len(s.rows) for s in written.sections)} problems, {written.records} records")


@app.command()
def families(family: Optional[str] = typer.Argument(None, help="only this family")) -> None:
    """The kernel families (shipped, installed by a package's entry point, or registered) and
    the problem fields each takes."""
    from kgen.registry import families as names, get_spec

    try:
        table = Table(title="kernel families")
        for col in ("family", "problem fields", "export"):
            table.add_column(col)
        for name in ([family] if family else names()):
            spec = get_spec(name)
            table.add_row(name, "\n".join(f.describe() for f in spec.fields()) or "-",
                          spec.export_runtime or "-")
    except KgenError as exc:
        _fail(exc)
    console.print(table)


@app.command()
def info() -> None:
    """Device, versions, paths, database location and settings."""
    import platform

    from kgen.compile import nvrtc_version
    from kgen.knobs import Knobs, knobs
    from kgen.problem import Target
    from kgen.provenance import kgen_version
    from kgen.render import data_root
    from kgen.registry import families, get_spec

    table = Table(title="kgen")
    table.add_column("what")
    table.add_column("value")
    table.add_row("kgen", kgen_version())
    table.add_row("python", platform.python_version())
    table.add_row("nvrtc", nvrtc_version())
    try:
        t = Target.detect(0)
        table.add_row("device 0", f"{t.name} (sm_{t.cc[0]}{t.cc[1]}, {t.sm_count} SMs, driver {t.driver_version})")
    except KgenError as exc:
        table.add_row("device", f"none ({exc.message})")
    table.add_row("families", ", ".join(families()))
    models = {}
    for family in families():
        version = get_spec(family).model_version()
        if version:
            models.setdefault(version, []).append(family)
    table.add_row("cost models", "; ".join(f"{v} ({', '.join(f)})" for v, f in models.items()) or "none")
    table.add_row("database", knobs.db_url or f"sqlite:///{knobs.home / 'kgen.db'}")
    table.add_row("shipped records", str(data_root() / "tuning_db"))
    table.add_row("templates", str(data_root() / "templates"))
    for env, value, doc in Knobs.describe():
        table.add_row(env, f"{value}  [dim]{doc}[/]")
    console.print(table)


def main() -> None:
    try:
        app()
    except KgenError as exc:   # anything not caught by a command
        err_console.print(f"[bold red]error:[/] {exc}")
        sys.exit(2)


if __name__ == "__main__":
    main()
