"""DaskRunner and tune_many on a local cluster of CPU workers replaying a real H200 recording."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'kgen[dist]')")

from distributed import Client, LocalCluster  # noqa: E402

from kgen.db import MemoryStore  # noqa: E402
from kgen.errors import KgenError  # noqa: E402
from kgen.kernels.gemm.simt import GemmSimt  # noqa: E402
from kgen.multi import TrialLog, read_problems, tune_many  # noqa: E402
from kgen.problem import Problem, Target  # noqa: E402
from kgen.runners import DaskRunner, FaultyReplay, Recording, ReplayRunner  # noqa: E402

DATA = Path(__file__).parent / "data"
SPEC = GemmSimt()
TARGET = Target.h200()
RECORDING = Recording.load(DATA / "h200_gemm_f32_simt.jsonl.gz")
KEYS = sorted(RECORDING.problems())
SMALL = [k for k in KEYS if "k=1000|" in k or "k=256|" in k or "m=128|" in k]   # 150 configs each
NT = next(k for k in KEYS if "layout=NT" in k)      # optimum clear of the noise of resampling
BIG = next(k for k in KEYS if "m=8192" in k)
TT = next(k for k in KEYS if "layout=TT" in k)


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, resources={"GPU": 1},
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


def stored(db, key):
    return [r.measurement for r in db.records("gemm", key, TARGET.name, SPEC.template_digest())]


def recorded_optimum(key):
    return min((m.time_ms, name) for (k, name), m in RECORDING.entries.items() if k == key and m.ok)[1]


def test_tune_many_measures_every_trial_once(client, tmp_path):
    runner = DaskRunner(client, measure=ReplayRunner(RECORDING, seed=1).answer)
    assert runner.slots == 2 and not runner.needs_binaries
    db = MemoryStore()
    problems = [Problem.from_key(k) for k in SMALL]
    log = TrialLog(tmp_path / "trials.jsonl", runner)
    try:
        results = tune_many(SPEC, problems, TARGET, runner, db, trials=12, sampler="random", seed=3,
                            on_progress=log)
    finally:
        log.close()
        runner.close()
    assert [r.problem.key for r in results] == SMALL
    for r in results:
        names = [m.config_name for m in stored(db, r.problem.key)]
        assert r.measured == 12 == len(names) == len(set(names))          # none lost, none twice
        assert all(m.ok for m in stored(db, r.problem.key))
        assert r.best.config_name in names
    assert runner.retries == runner.lost == runner.timeouts == 0
    rows = [json.loads(line) for line in (tmp_path / "trials.jsonl").read_text().splitlines()]
    assert len(rows) == 36 and all(row["worker"].startswith("tcp://") and row["time_ms"] for row in rows)
    assert len({row["worker"] for row in rows}) == 2                      # both slots were used


def test_exhaustive_over_the_cluster_finds_the_recorded_optimum(client):
    runner = DaskRunner(client, measure=ReplayRunner(RECORDING, seed=2).answer)
    db = MemoryStore()
    try:
        results = tune_many(SPEC, [Problem.from_key(NT), Problem.from_key(BIG)], TARGET, runner, db,
                            trials=10_000, sampler="exhaustive")
    finally:
        runner.close()
    for r in results:
        n = len(runner.measurable(r.problem.key))
        assert r.measured == n == len({m.config_name for m in stored(db, r.problem.key)})
        assert r.best.config_name == recorded_optimum(r.problem.key)


def test_planted_faults_are_stored_and_the_tune_goes_on(client):
    space = SPEC.space(Problem.from_key(TT), TARGET)
    names = sorted(n for (k, n), m in RECORDING.entries.items() if k == TT and space.is_valid(m.config))
    planted = {names[5]: "crash", names[40]: "hang", names[80]: "wrong"}
    runner = DaskRunner(client, measure=FaultyReplay(RECORDING, planted), timeout_s=4, retries=1)
    db = MemoryStore()
    try:
        (result,) = tune_many(SPEC, [Problem.from_key(TT)], TARGET, runner, db, trials=10_000,
                              sampler="exhaustive")
    finally:
        runner.close()
    rows = {m.config_name: m for m in stored(db, TT)}
    assert len(rows) == len(names) == result.measured                     # every trial has one outcome
    kinds = {name: rows[name].failure.kind for name in planted}
    assert kinds == {names[5]: "runtime", names[40]: "timeout", names[80]: "correctness"}
    assert "worker lost" in rows[names[5]].failure.detail
    assert all(m.ok for name, m in rows.items() if name not in planted)
    assert result.failures == Counter({"runtime": 1, "timeout": 1, "correctness": 1})
    assert runner.timeouts == 1 and runner.retries >= 1
    assert result.best.config_name == min((m.time_ms, n) for n, m in rows.items() if m.ok)[1]


def test_problem_files_parse_json_and_keys(tmp_path):
    problems = read_problems(DATA / "problems_example.jsonl", SPEC, TARGET)
    assert [p["layout"] for _, p in problems] == ["NN", "NT"]
    assert {s.family for s, _ in problems} == {"gemm"}
    f = tmp_path / "p.txt"
    f.write_text(f"# a comment\n{NT}\n")
    assert [p.key for _, p in read_problems(f, SPEC, TARGET)] == [NT]
    f.write_text('{"m": 64, "n": 64, "k": 64, "dtype": "bfloat16"}\n{"m": 8, "n": 8}\n')
    with pytest.raises(KgenError, match=r"p.txt:2: .*needs --k"):
        read_problems(f, SPEC, TARGET)
    f.write_text('{"m": 64, "n": 64, "k": 64, "dtype": "bfloat16"}\n')
    assert read_problems(f, SPEC, TARGET)[0][0].family in ("gemm_wgmma", "gemm_mma")   # routed as kgen tune routes


@pytest.mark.multi_gpu
def test_cli_tunes_two_problems_on_every_gpu(tmp_path):
    from typer.testing import CliRunner

    from kgen.cli import app

    db = f"sqlite:///{tmp_path / 'kgen.db'}"
    log = tmp_path / "trials.jsonl"
    out = CliRunner().invoke(app, ["tune", "gemm", "--from", str(DATA / "problems_example.jsonl"),
                                   "--gpus", "all", "--trials", "6", "--sampler", "random",
                                   "--db", db, "--log", str(log)])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert Counter(row["problem"] for row in rows) == Counter({p.key: 6 for _, p in
                                                              read_problems(DATA / "problems_example.jsonl", SPEC, TARGET)})
    assert len({row["worker"] for row in rows}) >= 2


def _cli(args):
    from typer.testing import CliRunner

    from kgen.cli import app

    return CliRunner().invoke(app, args)


def _problem_file(tmp_path, keys):
    f = tmp_path / "problems.txt"
    f.write_text("\n".join(keys) + "\n")
    return f


def test_cli_tunes_a_file_of_problems_on_a_scheduler(client, tmp_path):
    f = _problem_file(tmp_path, SMALL[:2])
    log = tmp_path / "trials.jsonl"
    out = _cli(["tune", "gemm", "--from", str(f), "--scheduler", client.scheduler.address, "--trials", "5",
                "--sampler", "random", "--replay", str(DATA / "h200_gemm_f32_simt.jsonl.gz"),
                "--db", f"sqlite:///{tmp_path / 'kgen.db'}", "--log", str(log)])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert Counter(row["problem"] for row in rows) == Counter({k: 5 for k in SMALL[:2]})
    assert all(row["worker"].startswith("tcp://") for row in rows)


def test_cli_gpus_starts_one_pinned_worker_per_gpu(tmp_path):
    """--gpus 0,1 with a replay: the per-GPU cluster starts and serves, no GPU needed."""
    f = _problem_file(tmp_path, [NT])
    log = tmp_path / "trials.jsonl"
    out = _cli(["tune", "gemm", "--from", str(f), "--gpus", "0,1", "--trials", "6", "--sampler", "random",
                "--replay", str(DATA / "h200_gemm_f32_simt.jsonl.gz"),
                "--db", f"sqlite:///{tmp_path / 'kgen.db'}", "--log", str(log)])
    assert out.exit_code == 0, out.output
    workers = {json.loads(line)["worker"] for line in log.read_text().splitlines()}
    assert 1 <= len(workers) <= 2 and "2 x NVIDIA H200" in out.output


def test_cli_from_file_without_dask_options_tunes_locally(tmp_path):
    f = _problem_file(tmp_path, SMALL[:2])
    out = _cli(["tune", "gemm", "--from", str(f), "--trials", "4", "--sampler", "random",
                "--replay", str(DATA / "h200_gemm_f32_simt.jsonl.gz"), "--db", f"sqlite:///{tmp_path / 'kgen.db'}"])
    assert out.exit_code == 0, out.output
    assert "4 / 0" in out.output


def test_cli_bad_gpu_list_is_a_kgen_error(tmp_path):
    out = _cli(["tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--gpus", "zero"])
    assert out.exit_code == 2 and "remedy" in out.output


class _FakeDaskFuture:
    def add_done_callback(self, fn):
        pass

    def cancel(self):
        pass


class _FakeClient:
    """Just what DaskRunner calls when it sends: no cluster."""

    def __init__(self):
        self.sent = []

    def run_on_scheduler(self, *a, **kw):
        pass

    def register_plugin(self, *a, **kw):
        pass

    def submit(self, fn, name, task, key, **kw):
        self.sent.append(key)
        return _FakeDaskFuture()


def test_a_trial_queued_behind_a_dead_worker_is_sent_again_free():
    """A trial lost with its worker before it ran is not charged an attempt; its result
    future is already running, and sending it again must not try to start it twice
    (that raised inside the watchdog and left the trial unanswered: a tune that never ended)."""
    from kgen.measure.task import MeasureTask
    from kgen.measurement import Timing

    problem = Problem.from_key(TT)
    config = SPEC.space(problem, TARGET).configs()[0]
    fake = _FakeClient()
    runner = DaskRunner(fake, slots=1, measure=ReplayRunner(RECORDING).answer, timeout_s=60, retries=1)
    try:
        task = MeasureTask(spec=SPEC, problem=problem, config=config, cubin=b"", entry=config.name,
                           resources={}, timing=Timing(warmup=1, runs=20, l2="warm"), seed=0)
        fut = runner.submit(task)
        assert fut.running() and len(fake.sent) == 1
        (entry,) = runner._running.values()
        runner._running.clear()
        runner._lost(entry, "KilledWorker: queued behind the trial that killed it", charged=False)
        runner._pump()
        assert len(fake.sent) == 2 and entry.attempts == 1 and not fut.done()
    finally:
        runner.close()
