"""Every KGEN_* setting, typed, with its default.

No other module reads the environment: they ask ``knobs``. Values are read at access time,
so a test (or a user) may change ``os.environ`` and see the change at once.

>>> from kgen.knobs import knobs
>>> knobs.bench_runs >= 20
True
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


def _parse_bool(text: str) -> bool:
    return text.strip().lower() in {"1", "true", "yes", "on"}


def _one_of(*options: str) -> Callable[[str], str]:
    """A parser accepting one of ``options`` (any case, spaces around ignored)."""
    expected = "expected " + ", ".join(options[:-1]) + " or " + options[-1]

    def parse(text: str) -> str:
        choice = text.strip().lower()
        if choice not in options:
            raise ValueError(expected)
        return choice

    return parse


def _some_of(*options: str) -> Callable[[str], tuple[str, ...]]:
    """A parser of a comma-separated list of ``options`` (any case; ``none``: none of them)."""
    def parse(text: str) -> tuple[str, ...]:
        if text.strip().lower() == "none":
            return ()
        chosen = tuple(part.strip().lower() for part in text.split(",") if part.strip())
        unknown = [c for c in chosen if c not in options]
        if unknown:
            raise ValueError(f"unknown {', '.join(unknown)}; expected some of {', '.join(options)}")
        return chosen

    return parse


@dataclass(frozen=True)
class _EnvKnob(Generic[T]):
    env: str
    parse: Callable[[str], T]
    default: Callable[[], T]
    doc: str

    def __get__(self, obj, owner=None) -> T:
        if obj is None:
            return self  # type: ignore[return-value]
        raw = os.environ.get(self.env)
        if raw is None or raw == "":
            return self.default()
        try:
            return self.parse(raw)
        except ValueError as exc:
            from kgen.errors import SettingError

            raise SettingError(self.env, raw, str(exc)) from None


def _home() -> Path:
    return Path(os.path.expanduser("~")) / ".kgen"


class Knobs:
    """The settings, one attribute each; ``Knobs.describe()`` lists them."""

    home = _EnvKnob("KGEN_HOME", lambda s: Path(s).expanduser(), _home,
                    "folder of the local database, cubin cache and logs")
    db_url = _EnvKnob("KGEN_DB_URL", str, lambda: "",
                      "SQLAlchemy URL of the local database (default: SQLite under KGEN_HOME)")
    team_db_url = _EnvKnob("KGEN_TEAM_DB_URL", str, lambda: "",
                           "SQLAlchemy URL of a team database read after the local one "
                           "(e.g. postgresql+psycopg://user:password@host/db)")
    write_to_team = _EnvKnob("KGEN_WRITE_TO_TEAM", _parse_bool, lambda: False,
                             "store new measurements in the team database instead of the local one")
    default_family = _EnvKnob("KGEN_FAMILY", str, lambda: "gemm",
                              "the kernel family `kgen tune`, `bench` and `export` take when none is named")
    tune_rivals = _EnvKnob("KGEN_TUNE_RIVALS", int, lambda: 2,
                           "configs (its model's picks first) of each other family that runs a request "
                           "measured after `kgen tune` searched the preferred one (GEMM: the other families "
                           "of the tensor-core path), so that dispatch compares measured times across "
                           "families; 0: none")
    tune_on_miss = _EnvKnob("KGEN_TUNE_ON_MISS", int, lambda: 0,
                            "trials of a background tune started when dispatch meets an untuned problem "
                            "(0: off)")
    verified_only = _EnvKnob("KGEN_VERIFIED_ONLY", _parse_bool, lambda: True,
                             "dispatch uses an imported record only once `kgen db verify` confirmed it on "
                             "this device, or when it was imported with --trust (0: as soon as it is stored)")
    dispatch_policy = _EnvKnob("KGEN_DISPATCH_POLICY", _one_of("device", "arch", "any"), lambda: "device",
                               "records dispatch may borrow for an untuned problem's nearest tuned one: "
                               "device (same device name), arch (same compute capability), any")
    same_arch_records = _EnvKnob("KGEN_SAME_ARCH_RECORDS", _parse_bool, lambda: True,
                                 "a problem with no record on this device runs the best config measured for "
                                 "it on another card of the same compute capability (an H100's on an H200) "
                                 "before any cost model's guess (0: off)")
    cache_dir = _EnvKnob("KGEN_CACHE_DIR", lambda s: Path(s).expanduser(),
                         lambda: knobs.home / "cubins", "on-disk cubin cache")
    use_shipped_db = _EnvKnob("KGEN_USE_SHIPPED_DB", _parse_bool, lambda: True,
                              "read the tuning records shipped with kgen as the last layer")
    arch = _EnvKnob("KGEN_ARCH", str, lambda: "",
                    "compile for this arch (sm_90, sm_90a, ...) instead of the device's")
    compile_workers = _EnvKnob("KGEN_COMPILE_WORKERS", int, lambda: max(1, os.cpu_count() or 1),
                               "processes compiling in parallel during a tune")
    plausible_floor_us = _EnvKnob("KGEN_PLAUSIBLE_FLOOR_US", float, lambda: 1.0,
                                  "the least time (microseconds) a kernel timed by CUDA events can take; "
                                  "dispatch passes over a record faster than it (see kgen/plausible.py)")
    db_max_line_bytes = _EnvKnob("KGEN_DB_MAX_LINE_BYTES", int, lambda: 1 << 20,
                                 "the longest line a database file may hold (bytes); a longer one stops its "
                                 "import with the line's number")
    db_workers = _EnvKnob("KGEN_DB_WORKERS", int, lambda: max(1, os.cpu_count() or 1),
                          "processes parsing and validating a large `kgen db import` (1: this process only)")
    trial_timeout_s = _EnvKnob("KGEN_TRIAL_TIMEOUT", float, lambda: 60.0,
                               "seconds one measurement may take before its worker is killed")
    guard_bytes = _EnvKnob("KGEN_GUARD_BYTES", int, lambda: 2 << 20,
                           "bytes of poisoned guard before and after each output of a tuning trial; a "
                           "changed guard fails the trial as an out-of-bounds write (0: no guards)")
    sanitizer = _EnvKnob("KGEN_SANITIZER", str, lambda: "",
                         "path of compute-sanitizer for `kgen tune --sanitize` (default: on PATH, else "
                         "/usr/local/cuda/bin)")
    bench_warmup = _EnvKnob("KGEN_BENCH_WARMUP", int, lambda: 3, "untimed runs before timing")
    bench_runs = _EnvKnob("KGEN_BENCH_RUNS", int, lambda: 25, "timed runs; the median is kept (>= 20)")
    bench_min_ms = _EnvKnob("KGEN_BENCH_MIN_MS", float, lambda: 0.0,
                            "keep timing past bench_runs until this many ms were timed")
    bench_hold = _EnvKnob("KGEN_BENCH_HOLD", _parse_bool, lambda: True,
                          "hold the GPU (a kernel waiting on a host flag) until each timed run is queued, "
                          "so the host's cost of a launch never shows in its time")
    l2_flush = _EnvKnob("KGEN_L2_FLUSH", _parse_bool, lambda: True,
                        "evict the L2 before each timed run (a sweep of a buffer twice its size)")
    l2_flush_style = _EnvKnob("KGEN_L2_FLUSH_STYLE", _one_of("read", "write"), lambda: "read",
                              "how the sweep evicts: read (the L2 is left holding clean lines) or write "
                              "(fill the buffer: the L2 is left full of dirty lines, which the timed "
                              "kernel pays to write back as it evicts them: 8 us more for a plain "
                              "read of 128 MB on the H200, scripts/results/nvidia-h200/bench_flush.json)")
    strict = _EnvKnob("KGEN_STRICT", _parse_bool, lambda: False,
                      "dispatch raises instead of compiling or falling back to an untuned config")
    record_host = _EnvKnob("KGEN_RECORD_HOST", _parse_bool, lambda: False,
                           "store this machine's host name with each measurement")
    dask_timeout_s = _EnvKnob("KGEN_DASK_TIMEOUT", float, lambda: 2 * knobs.trial_timeout_s + 30,
                              "seconds a measurement sent to a Dask worker may take before that worker "
                              "is restarted and the trial stored as a timeout")
    vendor = _EnvKnob("KGEN_VENDOR", _parse_bool, lambda: True,
                      "the vendor library (cuBLAS) is a candidate of the GEMM families: measured in every "
                      "tune, stored as config 'cublas', and chosen by dispatch where it is the faster "
                      "measured one, or for an untuned problem by its first-call race (KGEN_RACE) or "
                      "ranking (0: generated kernels only)")
    vendor_margin = _EnvKnob("KGEN_VENDOR_MARGIN", float, lambda: 0.03,
                             "the fraction by which a generated kernel must be measured faster than the "
                             "vendor library to be chosen over it, in a first-call race and between records "
                             "(0: the faster by any amount)")
    race = _EnvKnob("KGEN_RACE", _parse_bool, lambda: True,
                    "the first call of a GEMM (batched and grouped included) or conv2d problem that no "
                    "measurement decides (no tuned or vendor record) times its candidates on the call's "
                    "own operands, into a scratch output: the vendor library (where KGEN_VENDOR and the "
                    "path has one) and the picks of the KGEN_RACE_FAMILIES best-ranked families; the "
                    "fastest serves the process from then on (0: the ranking alone: the vendor library, "
                    "else the cost models' pick)")
    race_families = _EnvKnob("KGEN_RACE_FAMILIES", int, lambda: 3,
                             "how many families' generated picks (best predicted first) a first-call race "
                             "times; each is compiled (3: every family of the tensor-core path that runs "
                             "the problem)")
    race_picks = _EnvKnob("KGEN_RACE_PICKS", int, lambda: 3,
                          "how many of the cost model's best-ranked configs of the CUDA-core GEMM family "
                          "(float32 exact) a first-call race times where the model's pick would run "
                          "(each is compiled; 1: its pick alone)")
    race_tc_picks = _EnvKnob("KGEN_RACE_TC_PICKS", int, lambda: 1,
                             "how many of the cost model's best-ranked configs of the best-ranked tensor-core "
                             "family (gemm_wgmma, gemm_mma) a first-call race times beside the other "
                             "families' picks (each is compiled; 1: its pick alone)")
    race_runs = _EnvKnob("KGEN_RACE_RUNS", int, lambda: 10,
                         "timed runs of each candidate in each of a first-call race's two rounds (L2 "
                         "flushed before each, the median kept)")
    skinny_max = _EnvKnob("KGEN_SKINNY_MAX", int, lambda: 16,
                          "the largest small side (min(M, N)) of a gemm request that may go to the family "
                          "gemm_skinny (CUDA cores streaming the big operand; it runs up to 16; 0: none does, "
                          "kgen tune gemm_skinny still tunes it)")
    skinny_dtypes = _EnvKnob("KGEN_SKINNY_DTYPES", _some_of("float32", "float16", "bfloat16"), lambda: ("float32",),
                             "the input dtypes whose gemm requests may go to gemm_skinny (comma-separated, or "
                             "none; float32 covers exact and tf32) on a ranking alone; a first-call race times "
                             "it for every dtype it runs. Its untuned picks beat the tile families' on float32 "
                             "and lost on float16/bfloat16 (docs/untuned_gemm.md)")
    skinny_route = _EnvKnob("KGEN_SKINNY_ROUTE", _one_of("first", "model"), lambda: "first",
                            "how an untuned GEMM whose small side gemm_skinny runs picks its family: first "
                            "(gemm_skinny's pick, before the tile families' cost-model picks; a tuned record "
                            "of any family still ranks by its time) or model (every family's pick by predicted "
                            "time)")
    conv_gradients = _EnvKnob("KGEN_CONV_GRADIENTS", _one_of("kgen", "torch"), lambda: "kgen",
                              "how kgen.torch's conv2d computes gradients: kgen (kgen's forward convolutions and "
                              "GEMMs, kgen.kernels.conv.gradients) or torch (PyTorch's)")
    conv_phase_streams = _EnvKnob("KGEN_CONV_PHASE_STREAMS", int, lambda: 4,
                                  "side streams kgen.torch's strided data gradient runs its phase "
                                  "convolutions on at once (each too small to fill the GPU alone); 0 or 1: one "
                                  "after another on the caller's stream")
    staging = _EnvKnob("KGEN_STAGING", _parse_bool, lambda: True,
                       "operands the Hopper family cannot read by TMA (rows not a multiple of 16 bytes) "
                       "may be copied into padded rows so it runs them, where that wins with the copy's "
                       "cost counted (0: such requests go to the portable family)")
    staging_copy_gbs = _EnvKnob("KGEN_STAGING_COPY_GBS", float, lambda: 3600.0,
                                "the copy rate (GB/s, bytes read plus written) dispatch assumes for staging "
                                "an operand into padded rows")
    staging_launch_us = _EnvKnob("KGEN_STAGING_LAUNCH_US", float, lambda: 3.0,
                                 "the fixed cost (microseconds) dispatch adds per staged operand")
    staging_c_min_bytes = _EnvKnob("KGEN_STAGING_C_MIN_BYTES", int, lambda: 4 << 20,
                                   "the Hopper family writes an output of at least this many bytes whose rows "
                                   "TMA cannot store (the caller's row stride or start not a multiple of 16 "
                                   "bytes, where N's rows are) into padded rows, copied back after the kernel; "
                                   "an N whose rows are not it writes itself (KGEN_STAGING=0 turns it off with "
                                   "the rest of staging)")
    untuned = _EnvKnob("KGEN_UNTUNED", _one_of("model", "nearest", "default"), lambda: "model",
                       "how dispatch picks a config for a problem with no tuned record: model (the "
                       "family's cost model ranks its candidates), nearest (the best config of the "
                       "nearest tuned problem), default (the family's default config)")
    refresh_s = _EnvKnob("KGEN_REFRESH_S", float, lambda: 1.0,
                         "seconds between a background thread's checks of the database files' "
                         "fingerprint; a change drops every cached choice so the next call chooses "
                         "again (0: only kgen.refresh())")
    dispatch_memo = _EnvKnob("KGEN_DISPATCH_MEMO", _parse_bool, lambda: True,
                             "remember dispatch's tuned choices on disk so a new process's first call "
                             "skips the database, the template and the compiler (see kgen/dispatch_memo.py)")
    dist_queue_depth = _EnvKnob("KGEN_DIST_QUEUE_DEPTH", int, lambda: 2,
                                "measurements sent to each Dask GPU worker at once (2: the next one "
                                "waits on the worker, hiding the round trip of each answer)")
    dist_retries = _EnvKnob("KGEN_DIST_RETRIES", int, lambda: 1,
                            "times a trial whose Dask worker was lost is sent again before it is stored "
                            "as a runtime failure")
    seed = _EnvKnob("KGEN_SEED", int, lambda: 0, "seed of the search sampler and of test inputs")
    search_model_picks = _EnvKnob("KGEN_SEARCH_MODEL_PICKS", int, lambda: 3,
                                  "configs a family's device model ranks first (one per tile for "
                                  "gemm_wgmma) that the kgen sampler tries before it walks")
    search_model_after = _EnvKnob("KGEN_SEARCH_MODEL_AFTER", int, lambda: 10,
                                  "successful trials before the kgen sampler's additive model steers it")
    search_ridge = _EnvKnob("KGEN_SEARCH_RIDGE", float, lambda: 1.0,
                            "ridge penalty of that model (larger: estimates stay nearer the mean)")
    search_locality = _EnvKnob("KGEN_SEARCH_LOCALITY", float, lambda: 0.1,
                               "log-time the model trades per unit of distance from the best config")
    search_walk_distance = _EnvKnob("KGEN_SEARCH_WALK_DISTANCE", _one_of("moves", "span"), lambda: "moves",
                                    "how the kgen sampler's walk measures a config's distance from the best "
                                    "until this tune's own model guides it (alone, or beside a warm start's "
                                    "neighbour model): moves (every config one move away first, "
                                    "kgen.samplers.distance.move_distance) or span (config_distance)")
    search_prior_weight = _EnvKnob("KGEN_SEARCH_PRIOR_WEIGHT", float, lambda: 0.1,
                                   "in a warm start, the weight of the nearest tuned problem's model of "
                                   "the log time against the distance, until this tune's own model "
                                   "takes over (0: distance alone)")
    search_warm_distance = _EnvKnob("KGEN_SEARCH_WARM_DISTANCE", float, lambda: 3.0,
                                    "farthest tuned problem a tune warm-starts from: the distance of "
                                    "the shapes' log2 (1000^3 to 2048^3: 1.8; to 128x4096x4096: 4.1)")
    report_points = _EnvKnob("KGEN_REPORT_POINTS", int, lambda: 400,
                             "points `kgen report` draws in one chart at most (a tune's trials, a roofline's "
                             "problems), evenly spaced; the page says where some were left out")
    report_tunes = _EnvKnob("KGEN_REPORT_TUNES", int, lambda: 100,
                            "convergence charts `kgen report` draws per family and device at most (the "
                            "first tunes in problem order); the page counts the rest")
    report_pause_s = _EnvKnob("KGEN_REPORT_PAUSE_S", float, lambda: 600.0,
                              "a gap (seconds) between two records of one tune longer than this is a pause "
                              "(the tune was resumed later): `kgen report` cuts it from the time axis and "
                              "marks it")

    dist_backend = _EnvKnob("KGEN_DIST_BACKEND", _one_of("auto", "mpi", "nccl"), lambda: "auto",
                            "kgen.dist's backend when init() names none: mpi (host-memory ranks, NumPy "
                            "local compute), nccl (GPU ranks: NCCL through CuPy, kgen.gemm), auto (nccl "
                            "where CuPy sees a GPU and NCCL, else mpi)")
    dist_tuned = _EnvKnob("KGEN_DIST_TUNED", _parse_bool, lambda: True,
                          "kgen.dist.gemm runs a product's tuned algorithm (kgen tune dist_gemm) where the "
                          "database has one, else the alpha-beta model's choice")
    dist_check = _EnvKnob("KGEN_DIST_CHECK", _parse_bool, lambda: True,
                          "each kgen.dist collective first allgathers a small descriptor of its operands, so "
                          "ranks that disagree all raise the same MismatchError instead of hanging "
                          "(0: skip it, one message latency less per operation)")
    dist_alpha_us = _EnvKnob("KGEN_DIST_ALPHA_US", float, lambda: 5.0,
                             "the latency (microseconds) kgen.dist's cost model charges per message when "
                             "it picks a distributed GEMM algorithm")
    dist_bandwidth_gbs = _EnvKnob("KGEN_DIST_BANDWIDTH_GBS", float, lambda: 10.0,
                                  "the per-rank bandwidth (GB/s) kgen.dist's cost model charges for the "
                                  "bytes a rank receives")
    dist_timeout_s = _EnvKnob("KGEN_DIST_TIMEOUT", float, lambda: 300.0,
                              "seconds a rank waits for the others at the start of a kgen.dist collective "
                              "before raising RankLostError (a rank died or is stuck; 0: wait for ever)")
    dist_panel = _EnvKnob("KGEN_DIST_PANEL", int, lambda: 256,
                          "the widest k panel one SUMMA step broadcasts (0: whole blocks)")
    dist_chunks = _EnvKnob("KGEN_DIST_CHUNKS", int, lambda: 1,
                           "the pieces kgen.dist's all-gather and reduce-scatter GEMMs overlap their collective "
                           "with the local GEMMs in, where no tuned choice says (1: no overlap)")
    launch_rank = _EnvKnob("RANK", int, lambda: -1,
                           "this process's rank, as torchrun-style launchers set it (-1: not set)")
    launch_world_size = _EnvKnob("WORLD_SIZE", int, lambda: -1,
                                 "the number of ranks, as torchrun-style launchers set it (-1: not set)")
    launch_local_rank = _EnvKnob("LOCAL_RANK", int, lambda: -1,
                                 "this process's rank on its host, as torchrun-style launchers set it "
                                 "(-1: not set)")
    launch_master_addr = _EnvKnob("MASTER_ADDR", str, lambda: "",
                                  "the host where ranks a torchrun-style launcher started meet (rank 0's), "
                                  "for the nccl backend's TCPStore")
    launch_master_port = _EnvKnob("MASTER_PORT", int, lambda: -1,
                                  "the port of that meeting point (-1: not set)")
    launch_agent_store = _EnvKnob("TORCHELASTIC_USE_AGENT_STORE", _parse_bool, lambda: False,
                                  "torchrun's agent serves the store at MASTER_ADDR:MASTER_PORT (every rank "
                                  "a client); else rank 0 serves it")
    launch_restart_count = _EnvKnob("TORCHELASTIC_RESTART_COUNT", int, lambda: 0,
                                    "how often torchrun restarted the ranks (their store keys are kept apart)")

    @classmethod
    def describe(cls) -> list[tuple[str, str, str]]:
        """(variable, current value, meaning) for every knob."""
        rows = []
        for name, knob in vars(cls).items():
            if isinstance(knob, _EnvKnob):
                rows.append((knob.env, str(getattr(knobs, name)), knob.doc))
        return rows


knobs = Knobs()
