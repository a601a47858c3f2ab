"""kgen and cuBLAS side by side on random GEMM shapes nobody tuned for.

The shapes (``shape_set``) are drawn from a seed, per dtype: M, N and K log-uniform in
[1, 16384], at most 2e12 flops (2*M*N*K; a shape over it is drawn again), a quarter of
all dimensions not a multiple of 8, the four layouts NN/NT/TN/TT equally often, and every
sixth shape decode-like (M log-uniform in [1, 64]). The default seed's shapes are in no
shipped tuning record (tests/test_bench_shapes.py checks it); a second seed, drawn from the
time unless given, shows whether the figures are a property of one draw.

Modes, each in a fresh KGEN_HOME (a temporary folder: an empty local database, the shipped
``tuning_db/`` read as usual, no dispatch memo):

- ``untuned``         kgen as a new user gets it, generated kernels only (KGEN_VENDOR=0)
- ``untuned+vendor``  the same with cuBLAS a candidate that dispatch may choose (KGEN_VENDOR=1)
- ``tuned``           the first --tune-subset shapes of the first seed's set, after
                      ``kgen tune gemm ... --timeout T`` (into the temporary database), KGEN_VENDOR=0
- ``tuned+vendor``    the same tune, KGEN_VENDOR=1

In every mode the first call of a shape runs dispatch's first-call race where no record
decides (``kgen.ops.race``: cuBLAS where the mode has it and the picks of the
``KGEN_RACE_FAMILIES`` best-ranked families (every one, by default), timed on the call's
operands; ``KGEN_RACE=0`` in the environment: the ranking alone),
and its choice is what is timed (``how`` "raced").

Every (shape, mode) is checked against a float64 reference first (max |err| / max |ref|
within 2e-2 bf16, 5e-3 fp16 and tf32, 1e-4 fp32); a failed check is a row with ``ok`` false,
not timed. Then cuBLAS (torch.matmul on the same memory, on the same stream; tf32 allowed
for tf32 rows only) and kgen are timed alternately (cuBLAS, kgen, kgen, cuBLAS; each side the
mean of its two medians): CUDA events, the L2 flushed before each run, the median of --runs. bfloat16 operands are CuPy uint16 arrays of bfloat16
bits passed with ``dtype="bfloat16"``; tf32 rows are float32 arrays with ``precision="tf32"``.
Cubins compiled by earlier runs are reused (KGEN_CACHE_DIR, or the caller's KGEN_HOME/cubins;
they are keyed by everything that changes the binary) unless --fresh-cubins.

Writes scripts/results/<device>/bench_shapes.json (or --out): {"device", "commit", "date",
"seed", "seed2", "rows", "summary", ...}; one row per (shape, dtype, mode, seed): m, n, k,
layout, dtype, precision, mode, kgen_ms, baselines {"cublas": ms}, ratio (cuBLAS ms / kgen
ms: above 1, kgen is faster), choice (config name, or "cublas"), how, staged (the operands
copied into padded rows first: "a", "b", "ab" or ""), chosen_ms (the time the choice carries:
its record's, or the race's; beside kgen_ms it shows where a tune measured otherwise), seed, relerr, ok,
tuned_subset (the shape is one of the tuned ones), and error where something raised. The file
is rewritten after each dtype, so a run cut short keeps what it measured ("complete": false).

    python3 scripts/bench_shapes.py                                   # 2 seeds x 4 dtypes x 60 shapes, untuned
    python3 scripts/bench_shapes.py --dtypes bfloat16 --count 24 --seed2 none
    python3 scripts/bench_shapes.py --modes tuned,tuned+vendor --dtypes float16 --tune-subset 8 --tune-timeout 30
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MAX_DIM = 16384
DECODE_MAX_M = 64
DECODE_EVERY = 6                 # every sixth shape is decode-like
UNALIGNED_FRACTION = 0.25        # of all dimensions: not a multiple of 8
MAX_FLOPS = 2e12
LAYOUTS = ("NN", "NT", "TN", "TT")
DTYPES = ("bfloat16", "float16", "float32", "tf32")
MODES = ("untuned", "untuned+vendor", "tuned", "tuned+vendor")
DEFAULT_MODES = ("untuned", "untuned+vendor")
TOLERANCE = {"bfloat16": 2e-2, "float16": 5e-3, "tf32": 5e-3, "float32": 1e-4}
# settings a user's environment may carry that would change what dispatch chooses (or write
# into a database other than the temporary one): a new user has none of them
_DISPATCH_ENV = ("KGEN_DB_URL", "KGEN_TEAM_DB_URL", "KGEN_WRITE_TO_TEAM", "KGEN_TUNE_ON_MISS",
                 "KGEN_VERIFIED_ONLY", "KGEN_DISPATCH_POLICY", "KGEN_USE_SHIPPED_DB", "KGEN_UNTUNED",
                 "KGEN_STRICT", "KGEN_ARCH")


# ---- the shape set (pure Python) -------------------------------------------------------------

def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return min(hi, max(lo, round(math.exp(rng.uniform(math.log(lo), math.log(hi))))))


def _shaped(value: int, aligned: bool, hi: int, rng: random.Random) -> int:
    """``value`` made a multiple of 8 (at least 8), or made not one, staying in [1, hi]
    (``hi`` a multiple of 8)."""
    if aligned:
        return min(hi, max(8, round(value / 8) * 8))
    if value % 8 == 0:
        offset = rng.randint(1, 7)
        value = value + offset if value + offset <= hi else value - offset
    return value


def shape_set(seed: int, dtype: str, count: int = 60) -> list[dict]:
    """``count`` GEMM shapes of ``dtype`` (bfloat16, float16, float32, or tf32: float32 with
    precision "tf32"), the same list for the same seed and independent of the other dtypes'.

    >>> s = shape_set(1, "tf32", 8)
    >>> len(s), s == shape_set(1, "tf32", 8), {r["dtype"] for r in s}, {r["precision"] for r in s}
    (8, True, {'float32'}, {'tf32'})
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    rng = random.Random(f"{seed}:{dtype}")
    layouts = [LAYOUTS[i % len(LAYOUTS)] for i in range(count)]
    rng.shuffle(layouts)
    unaligned = round(3 * count * UNALIGNED_FRACTION)
    flags = [True] * unaligned + [False] * (3 * count - unaligned)     # True: not a multiple of 8
    rng.shuffle(flags)
    items = []
    for i in range(count):
        his = (DECODE_MAX_M if i % DECODE_EVERY == 0 else MAX_DIM, MAX_DIM, MAX_DIM)
        while True:
            m, n, k = (_shaped(_log_uniform(rng, 1, hi), not flags[3 * i + j], hi, rng)
                       for j, hi in enumerate(his))
            if 2 * m * n * k <= MAX_FLOPS:
                break
        items.append({"m": m, "n": n, "k": k, "layout": layouts[i],
                      "dtype": "float32" if dtype == "tf32" else dtype,
                      "precision": "tf32" if dtype == "tf32" else None})
    rng.shuffle(items)
    return items


def dtype_label(row: dict) -> str:
    """bfloat16, float16, float32 or tf32 (float32 rows of precision tf32)."""
    return "tf32" if row.get("precision") == "tf32" else row["dtype"]


def is_odd(row: dict) -> bool:
    """Whether a dimension of the shape is not a multiple of 8."""
    return any(row[d] % 8 for d in ("m", "n", "k"))


def shape_name(row: dict) -> str:
    return f"{row['m']}x{row['n']}x{row['k']} {row['layout']}"


def resolve_seed2(text: str, seed: int, now: float | None = None) -> int | None:
    """The second seed: ``none`` (no second set), a number, or ``auto`` (from the time, never
    the first seed)."""
    if text == "none":
        return None
    if text == "auto":
        value = int((time.time() if now is None else now) * 1000) % 1_000_000_007
        return value + 1 if value == seed else value
    return int(text)


def tune_command(shape: dict, timeout_s: float) -> list[str]:
    """``kgen tune gemm`` for one shape, as a command line."""
    cmd = [sys.executable, "-m", "kgen.cli", "tune", "gemm", "--m", str(shape["m"]), "--n", str(shape["n"]),
           "--k", str(shape["k"]), "--dtype", shape["dtype"], "--layout", shape["layout"]]
    if shape.get("precision"):
        cmd += ["--precision", shape["precision"]]
    return cmd + ["--timeout", f"{timeout_s:g}"]


# ---- the summary (pure Python) ---------------------------------------------------------------

def _geomean(values: list[float]) -> float | None:
    return math.exp(math.fsum(math.log(v) for v in values) / len(values)) if values else None


def summarize(rows: list[dict]) -> list[dict]:
    """Per (seed, dtype, mode), in the order the rows first name them: ``count`` timed rows,
    ``untimed`` (failed checks, errors, no cuBLAS time), ``geomean`` of ``ratio`` (cuBLAS ms /
    kgen ms), ``min_ratio`` and ``min_shape``, and ``odd_count`` / ``odd_geomean`` over the timed
    shapes with a dimension not a multiple of 8."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["seed"], dtype_label(row), row["mode"]), []).append(row)
    summary = []
    for (seed, label, mode), group in groups.items():
        timed = [r for r in group if r.get("ok") and r.get("ratio")]
        odd = [r["ratio"] for r in timed if is_odd(r)]
        worst = min(timed, key=lambda r: r["ratio"], default=None)
        summary.append({"seed": seed, "dtype": label, "mode": mode, "count": len(timed),
                        "untimed": len(group) - len(timed),
                        "geomean": _geomean([r["ratio"] for r in timed]),
                        "min_ratio": worst["ratio"] if worst else None,
                        "min_shape": shape_name(worst) if worst else None,
                        "odd_count": len(odd), "odd_geomean": _geomean(odd)})
    return summary


def _fmt(value, spec: str) -> str:
    if value is None:
        width = spec.split(".")[0]
        return "-".rjust(int(width) if width.isdigit() else 1)
    return format(value, spec)


def summary_table(summary: list[dict]) -> str:
    lines = [f"{'seed':>10} {'dtype':8} {'mode':14} {'count':>5} {'untimed':>7} {'geomean':>7} "
             f"{'min':>6} {'min shape':20} {'odd':>4} {'odd gm':>6}"]
    for s in summary:
        lines.append(f"{s['seed']:>10} {s['dtype']:8} {s['mode']:14} {s['count']:>5} {s['untimed']:>7} "
                     f"{_fmt(s['geomean'], '7.3f')} {_fmt(s['min_ratio'], '6.3f')} {s['min_shape'] or '-':20} "
                     f"{s['odd_count']:>4} {_fmt(s['odd_geomean'], '6.3f')}")
    return "\n".join(lines)


# ---- one shape on the GPU --------------------------------------------------------------------

class ContextLost(RuntimeError):
    """The CUDA context is unusable (a sticky error): the run stops, keeping its rows."""


class Stopped(Exception):
    """SIGTERM (a time limit's ``timeout``): the run stops, keeping its rows."""


def _stop_on_sigterm() -> None:
    import signal

    def stop(signum, frame):
        raise Stopped()

    signal.signal(signal.SIGTERM, stop)


def set_mode(mode: str) -> None:
    """The settings of ``mode`` (the vendor candidate on or off); ``kgen.refresh()`` must follow."""
    os.environ["KGEN_VENDOR"] = "1" if mode.endswith("+vendor") else "0"


def new_row(shape: dict, mode: str, seed: int, tuned_subset: bool) -> dict:
    return {"m": shape["m"], "n": shape["n"], "k": shape["k"], "layout": shape["layout"],
            "dtype": shape["dtype"], "precision": shape["precision"], "mode": mode, "kgen_ms": None,
            "baselines": {"cublas": None}, "ratio": None, "choice": None, "how": None, "staged": "", "seed": seed,
            "relerr": None, "ok": False, "tuned_subset": tuned_subset, "chosen_ms": None}


def chosen_ms(family: str, config: str) -> float | None:
    """The time dispatch's choice of ``config`` carries (a record's measured time, or the race's),
    for comparison with the benchmark's own; None where it carries none (a model's pick)."""
    from kgen.dispatch import default_dispatcher

    times = [c.time_ms for _, c in default_dispatcher().loaded(family)
             if c.config is not None and c.config.name == config and c.time_ms is not None]
    return times[-1] if times else None


def progress_line(row: dict) -> str:
    what = f"{dtype_label(row):8} {row['m']:>5}x{row['n']:<5}x{row['k']:<5} {row['layout']} {row['mode']:14}"
    if not row["ok"]:
        why = row.get("error") or f"relerr {_fmt(row['relerr'], '.2e')} over {TOLERANCE[dtype_label(row)]:.0e}"
        return f"{what} FAILED {why}  {row['choice'] or ''} ({row['how'] or ''})"
    return (f"{what} kgen {_fmt(row['kgen_ms'], '9.4f')} ms  cublas {_fmt(row['baselines']['cublas'], '9.4f')} ms"
            f"  ratio {_fmt(row['ratio'], '6.3f')}  {row['choice']} ({row['how']})")


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def bench_shape(shape: dict, modes, gpu, seed: int, operand_seed: int, tuned_subset: bool = False,
                log=print) -> list[dict]:
    """One row per mode of ``shape``: kgen's choice, checked, then cuBLAS and kgen timed side by
    side (``time_side_by_side``). ``gpu`` makes the operands and times (``CudaBench``; tests pass a fake).
    Raises ContextLost when the GPU is left unusable."""
    import kgen

    rows = []
    try:
        case = gpu.prepare(shape, operand_seed)
    except Exception as exc:
        for mode in modes:
            rows.append(dict(new_row(shape, mode, seed, tuned_subset), error=_error(exc)))
            log(progress_line(rows[-1]))
        gpu.release()
        if not gpu.alive():
            raise ContextLost(rows[-1]["error"]) from exc
        return rows
    try:
        for mode in modes:
            row = new_row(shape, mode, seed, tuned_subset)
            try:
                set_mode(mode)
                kgen.refresh()
                choice = kgen.gemm_choice(case.a, case.b, case.c, **case.kwargs)
                row["choice"], row["how"] = choice.config, choice.how
                row["chosen_ms"] = chosen_ms(choice.family, choice.config)
                row["staged"] = choice.staged

                def run(case=case):
                    kgen.gemm(case.a, case.b, case.c, **case.kwargs)

                relerr = gpu.check(case, run)
                row["relerr"] = relerr if math.isfinite(relerr) else None
                row["ok"] = math.isfinite(relerr) and relerr <= TOLERANCE[dtype_label(shape)]
                if not math.isfinite(relerr):
                    row["error"] = "NaN or infinity in the result"
                if row["ok"]:
                    cublas_ms, kgen_ms = time_side_by_side(gpu, case.cublas, run, row)
                    row["kgen_ms"], row["baselines"]["cublas"] = kgen_ms, cublas_ms
                    row["ratio"] = cublas_ms / kgen_ms if cublas_ms and kgen_ms else None
            except Exception as exc:
                row.update(ok=False, error=_error(exc))
                if not gpu.alive():
                    rows.append(row)
                    log(progress_line(row))
                    raise ContextLost(row["error"]) from exc
            rows.append(row)
            log(progress_line(row))
    finally:
        case.__dict__.clear()       # every array (and the views the closures hold) goes now
        gpu.release()
    return rows


def time_side_by_side(gpu, cublas, run, row: dict) -> tuple[float | None, float]:
    """(cuBLAS ms, kgen ms), timed alternately (cuBLAS, kgen, kgen, cuBLAS), each side the mean
    of its two medians. Timed once each, cuBLAS first, kgen's call of the very same cuBLAS
    kernel ran 1-1.5 us slower on small problems (an H200); timed in alternating rounds the two
    agree within 0.05 us (an H100, ``scripts/experiments/vendor_overhead.py``). This order gives
    neither side the first place. A cuBLAS failure is the row's error; kgen's time stands."""
    cublas_times, failed = [], []

    def time_cublas() -> None:
        if cublas is None or failed:
            return
        try:
            cublas_times.append(gpu.time(cublas))
        except Exception as exc:      # kgen's row stands; its ratio is missing
            row["error"] = "cublas: " + _error(exc)[:290]
            failed.append(exc)
            if not gpu.alive():
                raise

    time_cublas()
    kgen_ms = (gpu.time(run) + gpu.time(run)) / 2
    time_cublas()
    return (sum(cublas_times) / 2 if len(cublas_times) == 2 else None), kgen_ms


class Case:
    """One shape's operands on the GPU: ``a``, ``b`` (transposed views where the layout says),
    ``c``, kgen's keyword arguments, the float64 reference and the cuBLAS run."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


class CudaBench:
    """Operands, check and timing on GPU 0 (CuPy; cuBLAS through PyTorch where installed)."""

    def __init__(self, runs: int):
        from kgen.measure.bench import l2_flusher, l2_label
        from kgen.measurement import Timing
        from kgen.problem import Target

        self.target = Target.detect(0)
        self.flush = l2_flusher(self.target.l2_bytes)
        self.timing = Timing(warmup=3, runs=runs, l2=l2_label())
        try:
            import torch
        except ImportError as exc:
            print(f"(no PyTorch, so no cuBLAS times: {exc})")
            torch = None
        self.torch = torch

    def prepare(self, shape: dict, seed: int) -> Case:
        import cupy

        from kgen.kernels.gemm.tc import as_float64, to_bf16

        m, n, k, layout, dtype = shape["m"], shape["n"], shape["k"], shape["layout"], shape["dtype"]
        rng = cupy.random.default_rng(seed)

        def stored(rows: int, cols: int, transposed: bool):
            x = rng.random((cols, rows) if transposed else (rows, cols), dtype=cupy.float32) * 2 - 1
            return to_bf16(x) if dtype == "bfloat16" else x.astype(dtype, copy=False)

        a_t, b_t = layout[0] == "T", layout[1] == "T"
        a_store, b_store = stored(m, k, a_t), stored(k, n, b_t)
        a = a_store.T if a_t else a_store
        b = b_store.T if b_t else b_store
        a64, b64 = as_float64(a_store, dtype), as_float64(b_store, dtype)
        ref = (a64.T if a_t else a64) @ (b64.T if b_t else b64)
        del a64, b64
        ref_max = float(cupy.abs(ref).max())
        c = cupy.empty((m, n), dtype=cupy.uint16 if dtype == "bfloat16" else dtype)
        kwargs = {"precision": "tf32"} if shape["precision"] == "tf32" else {}
        if dtype == "bfloat16":
            kwargs["dtype"] = "bfloat16"
        return Case(a=a, b=b, c=c, kwargs=kwargs, dtype=dtype, ref=ref, ref_max=max(ref_max, 1e-300),
                    cublas=self._cublas(a_store, b_store, a_t, b_t, c, dtype, shape["precision"]))

    def _cublas(self, a_store, b_store, a_t: bool, b_t: bool, c, dtype: str, precision):
        """torch.matmul on the same memory, on CuPy's current stream (tf32 for tf32 rows only)."""
        if self.torch is None:
            return None
        import cupy

        from kgen.kernels.gemm.tc import torch_view

        torch = self.torch
        ta, tb, tc = torch_view(a_store, dtype), torch_view(b_store, dtype), torch_view(c, dtype)
        ta, tb = (ta.T if a_t else ta), (tb.T if b_t else tb)
        tf32 = precision == "tf32"
        ptr = cupy.cuda.get_current_stream().ptr
        stream = torch.cuda.ExternalStream(ptr) if ptr else torch.cuda.default_stream()

        def run():
            allowed = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = tf32
            try:
                with torch.cuda.stream(stream):
                    torch.matmul(ta, tb, out=tc)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = allowed
        return run

    def check(self, case: Case, run) -> float:
        """max |kgen - reference| / max |reference| of one run into a NaN-poisoned ``c``."""
        import cupy

        from kgen.kernels.gemm.tc import as_float64

        case.c.fill(0x7FC0 if case.dtype == "bfloat16" else float("nan"))
        run()
        cupy.cuda.get_current_stream().synchronize()
        err = float(cupy.abs(as_float64(case.c, case.dtype) - case.ref).max())
        return err / case.ref_max if math.isfinite(err) else math.inf

    def time(self, run) -> float:
        """Median ms of the timed runs, the L2 flushed before each."""
        import statistics

        from kgen.measure.bench import time_runs

        return statistics.median(time_runs(run, self.timing, self.flush))

    def release(self) -> None:
        """Memory of the shape done back to the driver (nothing, where the context is lost:
        ``alive`` tells)."""
        import cupy

        try:
            cupy.cuda.get_current_stream().synchronize()
            cupy.get_default_memory_pool().free_all_blocks()
            if self.torch is not None:
                self.torch.cuda.empty_cache()
        except Exception:
            pass

    def alive(self) -> bool:
        import cupy

        try:
            cupy.cuda.Device().synchronize()
            cupy.zeros(1).sum().item()
            return True
        except Exception:
            return False


# ---- the run ---------------------------------------------------------------------------------

def operand_seed(seed: int, label: str, index: int) -> int:
    return random.Random(f"{seed}:{label}:{index}:operands").getrandbits(32)


def _commit() -> str:
    try:
        from scripts.bench_gemm import _commit as commit
    except ImportError:
        return "unknown"
    return commit()


def _cubin_cache(fresh_home: Path, fresh: bool) -> Path:
    """Where compiled kernels are kept: the fresh home's, or the caller's cache (as knobs reads it)."""
    if fresh:
        return fresh_home / "cubins"
    if os.environ.get("KGEN_CACHE_DIR"):
        return Path(os.environ["KGEN_CACHE_DIR"]).expanduser()
    home = os.environ.get("KGEN_HOME") or "~/.kgen"
    return Path(home).expanduser() / "cubins"


def _fresh_environment(home: Path, cache: Path) -> list[str]:
    """A new user's settings in this process (and its tunes): the returned names were removed."""
    removed = [name for name in _DISPATCH_ENV if os.environ.pop(name, None) is not None]
    os.environ.update(KGEN_HOME=str(home), KGEN_CACHE_DIR=str(cache), KGEN_DISPATCH_MEMO="0", KGEN_VENDOR="0")
    return removed


def run_tune(shape: dict, timeout_s: float) -> tuple[float, str | None]:
    """Tune one shape into this process's (temporary) database: seconds taken, and the error
    if the tune failed. The vendor candidate is measured too, so tuned+vendor may choose it."""
    start = time.perf_counter()
    try:
        done = subprocess.run(tune_command(shape, timeout_s), cwd=ROOT, env=dict(os.environ, KGEN_VENDOR="1"),
                              capture_output=True, text=True, timeout=timeout_s + 300)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, "tune: did not finish"
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = (done.stderr or done.stdout or "").strip().splitlines()[-3:]
        return seconds, f"tune: exit {done.returncode}: {' | '.join(tail)}"[:300]
    return seconds, None


def precompile(shapes: list[dict], modes: list[str], target, log=print) -> tuple[int, int]:
    """Compile, in a pool of processes, the kernel dispatch would choose for each way the
    GEMM families can run ``shapes`` in ``modes`` (as fresh arrays give them: rows of their
    natural alignment; staged operands too), so that the timed loop meets a warm cubin cache
    instead of compiling one kernel at a time. (kernels, failures)."""
    from kgen.compile import CompilePool
    from kgen.dispatch import default_dispatcher
    from kgen.kernels.gemm.route import gemm_request, tensor_core_candidates, uses_tensor_cores
    from kgen.render import render

    dispatcher = default_dispatcher()
    sources = {}
    for mode in modes:
        set_mode(mode)
        for shape in shapes:
            m, n, k, dtype, layout, precision = (shape[f] for f in ("m", "n", "k", "dtype", "layout", "precision"))
            try:
                if uses_tensor_cores(dtype, precision, "none", None):
                    pairs = [(spec, problem) for spec, problem, _ in tensor_core_candidates(
                        dict(m=m, n=n, k=k, dtype=dtype, layout=layout), target)]
                else:
                    pairs = gemm_request("gemm", m, n, k, dtype, layout, target, precision=precision)
                for spec, problem in pairs:     # every family's generated pick: what a first-call race compiles
                    choice = dispatcher.choose(spec, problem, target, vendor=False)
                    if not choice.vendor:
                        source = render(spec, problem, choice.config, target)
                        sources[source.digest] = source
            except Exception as exc:         # the timed loop meets it again and records it
                log(f"   (precompile of {shape_name(shape)} {mode}: {_error(exc)})")
    start = time.perf_counter()
    with CompilePool() as pool:
        failed = sum(r.failure is not None for r in pool.map(sources.values()))
    log(f"   precompiled {len(sources)} kernels in {time.perf_counter() - start:.1f} s ({failed} failed)")
    return len(sources), failed


def _list(text: str, allowed, what: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in items if s not in allowed]
    if bad or not items:
        raise SystemExit(f"--{what} {text!r}: expected some of {', '.join(allowed)}")
    return items


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1, help="the shape set's seed (default 1)")
    parser.add_argument("--seed2", default="auto", help="a second set's seed: auto (from the time), N, or none")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated: " + ", ".join(DTYPES))
    parser.add_argument("--count", type=int, default=60, help="shapes per dtype and seed")
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES), help="comma-separated: " + ", ".join(MODES))
    parser.add_argument("--tune-timeout", type=float, default=30, help="seconds of each tune (tuned modes)")
    parser.add_argument("--tune-subset", type=int, default=20, help="shapes tuned per dtype: the first of the set")
    parser.add_argument("--tune-skip", type=int, default=0,
                        help="shapes of the subset left out (already measured by an earlier run): its first N")
    parser.add_argument("--runs", type=int, default=30, help="timed runs; the median is kept")
    parser.add_argument("--out", default="", help="results file (default scripts/results/<device>/bench_shapes.json)")
    parser.add_argument("--commit", default="", help="the commit measured (where the tree has no .git)")
    parser.add_argument("--fresh-cubins", action="store_true", help="compile everything again in the fresh home")
    args = parser.parse_args(argv)
    dtypes = _list(args.dtypes, DTYPES, "dtypes")
    modes = _list(args.modes, MODES, "modes")
    seed2 = resolve_seed2(args.seed2, args.seed)
    seeds = [args.seed] + ([seed2] if seed2 is not None else [])

    home = Path(tempfile.mkdtemp(prefix="kgen-bench-shapes-"))
    try:
        cache = _cubin_cache(home, args.fresh_cubins)
        removed = _fresh_environment(home, cache)          # before kgen is imported or called
        print(f"KGEN_HOME={home} (fresh), cubins {cache}" + (f"; unset {', '.join(removed)}" if removed else ""))
        return _run(args, dtypes, modes, seeds, seed2)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _run(args, dtypes: list[str], modes: list[str], seeds: list[int], seed2: int | None) -> int:
    from kgen.measure.bench import l2_label

    untuned_modes = [m for m in MODES[:2] if m in modes]
    tuned_modes = [m for m in MODES[2:] if m in modes]

    gpu = CudaBench(args.runs)
    target = gpu.target
    out = Path(args.out) if args.out else ROOT / "scripts" / "results" / target.slug / "bench_shapes.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    header = {"device": target.name, "commit": args.commit or _commit(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "seed": args.seed, "seed2": seed2, "count": args.count, "dtypes": dtypes, "modes": modes,
              "tune_timeout_s": args.tune_timeout if tuned_modes else None,
              "tune_subset": args.tune_subset if tuned_modes else 0,
              "tune_skip": args.tune_skip if tuned_modes else 0,
              "timing": gpu.timing.as_dict(), "l2": l2_label(), "nvrtc": target.nvrtc_version,
              "driver": target.driver_version}
    rows: list[dict] = []
    started = time.perf_counter()

    def write(complete: bool) -> None:
        doc = {**header, "complete": complete, "elapsed_s": round(time.perf_counter() - started, 1),
               "rows": rows, "summary": summarize(rows)}
        out.write_text(json.dumps(doc, indent=1) + "\n")

    def in_subset(seed: int, index: int) -> bool:
        return bool(tuned_modes) and seed == args.seed and args.tune_skip <= index < args.tune_subset

    status, complete = 0, False
    _stop_on_sigterm()
    try:
        for seed in seeds if untuned_modes else ():
            for label in dtypes:
                t0 = time.perf_counter()
                precompile(shape_set(seed, label, args.count), untuned_modes, target)
                for i, shape in enumerate(shape_set(seed, label, args.count)):
                    rows += bench_shape(shape, untuned_modes, gpu, seed, operand_seed(seed, label, i), in_subset(seed, i))
                print(f"-- seed {seed} {label}: {args.count} shapes x {len(untuned_modes)} modes in "
                      f"{time.perf_counter() - t0:.1f} s (total {time.perf_counter() - started:.1f} s)", flush=True)
                write(False)
        for label in dtypes if tuned_modes else ():
            t0 = time.perf_counter()
            for i, shape in enumerate(shape_set(args.seed, label, args.count)[:args.tune_subset]):
                if i < args.tune_skip:
                    continue
                seconds, tune_error = run_tune(shape, args.tune_timeout)
                print(f"   tuned {label} {shape_name(shape)} in {seconds:.1f} s" +
                      (f": {tune_error}" if tune_error else ""), flush=True)
                got = bench_shape(shape, tuned_modes, gpu, args.seed, operand_seed(args.seed, label, i), True)
                for row in got:
                    if tune_error:
                        row["tune_error"] = tune_error
                rows += got
                write(False)                    # a run cut short keeps every shape tuned so far
            print(f"-- tuned {label}: {max(0, min(args.count, args.tune_subset) - args.tune_skip)} shapes in "
                  f"{time.perf_counter() - t0:.1f} s (total {time.perf_counter() - started:.1f} s)", flush=True)
            write(False)
        complete = True
    except ContextLost as exc:
        print(f"STOPPED: the CUDA context is lost ({exc}); the rows so far are kept")
        status = 1
    except Stopped:
        print("STOPPED: terminated; the rows so far are kept")
        status = 1
    finally:
        write(complete)
    print(f"wrote {out} ({len(rows)} rows, {time.perf_counter() - started:.1f} s)")
    print("ratio = cuBLAS ms / kgen ms (above 1: kgen faster); odd: a dimension not a multiple of 8")
    print(summary_table(summarize(rows)))
    return status


if __name__ == "__main__":
    sys.exit(main())
