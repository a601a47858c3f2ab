"""scripts/bench_shapes.py: the random shape set follows its rules, is reproducible from its
seed and is in no shipped tuning record; the summary and one shape's mode loop (a fake GPU)."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from scripts.bench_shapes import (DTYPES, LAYOUTS, MAX_DIM, MAX_FLOPS, Case, ContextLost,  # noqa: E402
                                  bench_shape, resolve_seed2, shape_set, summarize, tune_command)

DEFAULT_SEED = 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_set_follows_its_rules(dtype):
    shapes = shape_set(DEFAULT_SEED, dtype)
    assert len(shapes) >= 60
    dims = [s[d] for s in shapes for d in ("m", "n", "k")]
    assert all(1 <= v <= MAX_DIM and isinstance(v, int) for v in dims)
    assert all(2 * s["m"] * s["n"] * s["k"] <= MAX_FLOPS for s in shapes)
    assert 0.15 <= sum(v % 8 != 0 for v in dims) / len(dims) <= 0.35
    assert {s["layout"] for s in shapes} == set(LAYOUTS)
    assert all(sum(s["layout"] == lay for s in shapes) == len(shapes) // 4 for lay in LAYOUTS)
    assert sum(s["m"] <= 64 for s in shapes) >= len(shapes) // 6
    if dtype == "tf32":
        assert all(s["dtype"] == "float32" and s["precision"] == "tf32" for s in shapes)
    else:
        assert all(s["dtype"] == dtype and s["precision"] is None for s in shapes)
    assert all(set(s) == {"m", "n", "k", "layout", "dtype", "precision"} for s in shapes)


def test_the_set_is_reproducible_from_its_seed_and_differs_between_seeds_and_dtypes():
    assert shape_set(DEFAULT_SEED, "bfloat16") == shape_set(DEFAULT_SEED, "bfloat16")
    assert shape_set(DEFAULT_SEED, "bfloat16") != shape_set(2, "bfloat16")

    def triples(seed, dtype):
        return [(s["m"], s["n"], s["k"]) for s in shape_set(seed, dtype)]
    assert triples(DEFAULT_SEED, "float32") != triples(DEFAULT_SEED, "tf32")
    assert len(shape_set(DEFAULT_SEED, "float16", 24)) == 24


def _shapes_of(lines) -> set[tuple[int, int, int]]:
    """The (m, n, k) of the GEMM records among ``lines`` (other families' records have none)."""
    found = set()
    for line in lines:
        if line.strip():
            family, *parts = json.loads(line)["problem_key"].split("|")
            if family.startswith("gemm"):
                fields = dict(part.split("=", 1) for part in parts)
                found.add((int(fields["m"]), int(fields["n"]), int(fields["k"])))
    return found


def _test_shapes() -> set[tuple[int, int, int]]:
    return {(s["m"], s["n"], s["k"]) for dtype in DTYPES for s in shape_set(DEFAULT_SEED, dtype)}


def test_no_shape_of_the_default_seed_is_in_the_shipped_tuning_db():
    tuned = set()
    files = sorted((ROOT / "tuning_db").glob("*.jsonl"))
    assert files
    for path in files:
        tuned |= _shapes_of(path.read_text().splitlines())
    assert (4096, 4096, 4096) in tuned          # the keys were read
    assert not _test_shapes() & tuned


def test_no_shape_of_the_default_seed_is_in_the_cost_models_training_data():
    """The cost model is judged on the test set: neither its training grid nor any recording
    it is fitted on holds a test shape."""
    import gzip
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    from record_grid import grid
    from train_gemm_cost import SHIPPED, SPACE_FILES

    trained = {(p["m"], p["n"], p["k"]) for lattice in ("grid", "tiny") for p in grid(lattice=lattice)}
    for path in {f for files in SPACE_FILES.values() for f in files} | set(SHIPPED.values()):
        full = ROOT / path
        if full.exists():
            opener = gzip.open if full.suffix == ".gz" else open
            with opener(full, "rt") as f:
                trained |= _shapes_of(f)
    assert (4096, 4096, 4096) in trained and not _test_shapes() & trained


def test_the_grid_kept_by_dtype_and_smallest_side(capsys):
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import record_grid

    assert record_grid.main(["--list", "--count", "160", "--only", "float32", "--min-side", "17"]) == 0
    kept = capsys.readouterr().out.split("\n")[:-1]
    want = [s for s in record_grid.grid(160) if s["dtype"] == "float32" and s["precision"] is None
            and min(s["m"], s["n"]) >= 17]
    assert len(kept) == len(want) > 10
    assert all(line.endswith(" float32") for line in kept)
    assert all(min(map(int, line.split()[0].split("x")[:2])) >= 17 for line in kept)
    with pytest.raises(SystemExit):
        record_grid.main(["--list", "--only", "fp32"])


def test_the_second_seed():
    assert resolve_seed2("none", 1) is None
    assert resolve_seed2("7", 1) == 7
    assert resolve_seed2("auto", 1, now=12.345) == 12345
    assert resolve_seed2("auto", 12345, now=12.345) == 12346      # never the first seed


def test_the_tune_command():
    cmd = tune_command({"m": 5, "n": 6, "k": 7, "layout": "TN", "dtype": "float32", "precision": "tf32"}, 30)
    assert cmd[1:5] == ["-m", "kgen.cli", "tune", "gemm"]
    assert " ".join(cmd[5:]) == "--m 5 --n 6 --k 7 --dtype float32 --layout TN --precision tf32 --timeout 30"
    assert "--precision" not in tune_command({"m": 5, "n": 6, "k": 7, "layout": "NN", "dtype": "float16",
                                              "precision": None}, 30)


def _row(seed, dtype, mode, m, ratio, ok=True, precision=None):
    return {"m": m, "n": 64, "k": 64, "layout": "NN", "dtype": dtype, "precision": precision, "mode": mode,
            "seed": seed, "ok": ok, "ratio": ratio if ok else None}


def test_summarize_groups_by_seed_dtype_and_mode():
    rows = [_row(1, "bfloat16", "untuned", 64, 2.0), _row(1, "bfloat16", "untuned", 7, 0.5),
            _row(1, "bfloat16", "untuned", 9, 1.0), _row(1, "bfloat16", "untuned", 8, None, ok=False),
            _row(1, "bfloat16", "untuned+vendor", 64, 1.0), _row(2, "bfloat16", "untuned", 64, 4.0),
            _row(1, "float32", "untuned", 64, 0.25, precision="tf32"), _row(1, "float32", "untuned", 64, 1.5)]
    summary = summarize(rows)
    assert [(s["seed"], s["dtype"], s["mode"]) for s in summary] == [
        (1, "bfloat16", "untuned"), (1, "bfloat16", "untuned+vendor"), (2, "bfloat16", "untuned"),
        (1, "tf32", "untuned"), (1, "float32", "untuned")]
    first = summary[0]
    assert first["count"] == 3 and first["untimed"] == 1
    assert math.isclose(first["geomean"], 1.0)                    # (2 * 0.5 * 1) ** (1/3)
    assert first["min_ratio"] == 0.5 and first["min_shape"] == "7x64x64 NN"
    assert first["odd_count"] == 2 and math.isclose(first["odd_geomean"], math.sqrt(0.5))
    assert summary[2]["geomean"] == 4.0 and summary[2]["odd_count"] == 0 and summary[2]["odd_geomean"] is None
    assert summary[3]["min_ratio"] == 0.25 and summary[4]["min_ratio"] == 1.5


class FakeGpu:
    """Operands that are names; a check that answers ``relerr``; times of 2 ms (cuBLAS) and 1 ms."""

    def __init__(self, relerr=1e-3, raise_in=None, alive=True):
        self.relerr, self.raise_in, self._alive = relerr, raise_in, alive
        self.calls, self.released = [], 0

    def prepare(self, shape, seed):
        return Case(a="a", b="b", c="c", kwargs={"dtype": "bfloat16"}, cublas=lambda: None)

    def check(self, case, run):
        run()
        return self.relerr

    def time(self, run):
        self.calls.append(run)
        run()
        return 2.0 if len(self.calls) % 4 in (0, 1) else 1.0     # cuBLAS, kgen, kgen, cuBLAS

    def release(self):
        self.released += 1

    def alive(self):
        return self._alive


@pytest.fixture
def fake_kgen(monkeypatch):
    import kgen

    seen = []

    def choice(a, b, c=None, *, precision=None, dtype=None):
        vendor = os.environ["KGEN_VENDOR"] == "1"
        seen.append(("choice", os.environ["KGEN_VENDOR"], dtype))
        return SimpleNamespace(family="gemm_wgmma", config="cublas" if vendor else "gemm_wgmma_x",
                               how="vendor" if vendor else "model", staged="" if vendor else "a")

    def gemm(a, b, c=None, **kwargs):
        if os.environ.get("FAKE_GEMM_RAISES"):
            raise RuntimeError("boom " * 100)
        seen.append(("gemm", os.environ["KGEN_VENDOR"]))

    monkeypatch.setattr(kgen, "gemm_choice", choice, raising=False)
    monkeypatch.setattr(kgen, "refresh", lambda: seen.append(("refresh",)), raising=False)
    monkeypatch.setattr(kgen, "gemm", gemm)
    return seen


SHAPE = {"m": 7, "n": 64, "k": 64, "layout": "TN", "dtype": "bfloat16", "precision": None}
ROW_FIELDS = {"m", "n", "k", "layout", "dtype", "precision", "mode", "kgen_ms", "baselines", "ratio", "choice",
              "how", "staged", "seed", "relerr", "ok", "tuned_subset", "chosen_ms"}


def test_each_mode_refreshes_checks_then_times_cublas_and_kgen(fake_kgen):
    gpu = FakeGpu()
    lines = []
    rows = bench_shape(SHAPE, ["untuned", "untuned+vendor"], gpu, seed=3, operand_seed=0, log=lines.append)
    assert [set(r) for r in rows] == [ROW_FIELDS, ROW_FIELDS]
    assert [(r["mode"], r["choice"], r["how"]) for r in rows] == [("untuned", "gemm_wgmma_x", "model"),
                                                                   ("untuned+vendor", "cublas", "vendor")]
    assert [r["chosen_ms"] for r in rows] == [None, None]           # no kernel loaded: no time to carry
    assert all(r["ok"] and r["kgen_ms"] == 1.0 and r["baselines"] == {"cublas": 2.0} and r["ratio"] == 2.0
               and r["relerr"] == 1e-3 and r["seed"] == 3 for r in rows)
    assert fake_kgen == [("refresh",), ("choice", "0", "bfloat16"), ("gemm", "0"), ("gemm", "0"), ("gemm", "0"),
                         ("refresh",), ("choice", "1", "bfloat16"), ("gemm", "1"), ("gemm", "1"), ("gemm", "1")]
    # check, then timed alternately: cuBLAS, kgen, kgen, cuBLAS
    cublas = gpu.calls[0]
    assert [c is cublas for c in gpu.calls[:4]] == [True, False, False, True]
    assert gpu.released == 1 and len(lines) == 2 and "ratio  2.000" in lines[0]


def test_a_failed_check_is_a_row_not_timed(fake_kgen):
    gpu = FakeGpu(relerr=0.5)
    rows = bench_shape(SHAPE, ["untuned"], gpu, seed=1, operand_seed=0, log=lambda line: None)
    assert rows[0]["ok"] is False and rows[0]["relerr"] == 0.5 and rows[0]["kgen_ms"] is None
    assert gpu.calls == []
    rows = bench_shape(SHAPE, ["untuned"], FakeGpu(relerr=math.inf), seed=1, operand_seed=0, log=lambda line: None)
    assert rows[0]["ok"] is False and rows[0]["relerr"] is None       # no Infinity in the JSON
    assert rows[0]["error"] == "NaN or infinity in the result"


def test_an_error_is_recorded_and_a_lost_context_stops_the_run(fake_kgen, monkeypatch):
    monkeypatch.setenv("FAKE_GEMM_RAISES", "1")
    rows = bench_shape(SHAPE, ["untuned", "untuned+vendor"], FakeGpu(), seed=1, operand_seed=0,
                       log=lambda line: None)
    assert [r["ok"] for r in rows] == [False, False]
    assert rows[0]["error"].startswith("RuntimeError: boom") and len(rows[0]["error"]) == 300
    with pytest.raises(ContextLost):
        bench_shape(SHAPE, ["untuned"], FakeGpu(alive=False), seed=1, operand_seed=0, log=lambda line: None)


def test_a_cublas_failure_keeps_kgens_time(fake_kgen):
    gpu = FakeGpu()
    gpu.prepare = lambda shape, seed: Case(a="a", b="b", c="c", kwargs={}, cublas=lambda: 1 / 0)
    row, = bench_shape(SHAPE, ["untuned"], gpu, seed=1, operand_seed=0, log=lambda line: None)
    assert row["ok"] and row["kgen_ms"] is not None and row["ratio"] is None
    assert row["baselines"] == {"cublas": None} and row["error"].startswith("cublas: ZeroDivisionError")
    assert len(gpu.calls) == 3                         # cuBLAS once (it failed), kgen twice
