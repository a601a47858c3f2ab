"""kgen.dist's parts that need no MPI: the GEMM cost model, how a launch is read, the
agreement message, dtypes, the backends refused, traffic counting and the errors."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kgen.dist as kd
from kgen.dist import dtypes
from kgen.dist.bootstrap import Launch, describe_launch
from kgen.dist.check import agree, describe_disagreement
from kgen.dist.comm import Communicator, Pending
from kgen.dist.cost import GemmCase, choose, estimate, summa_panels
from kgen.dist.layout import resolve
from kgen.errors import BackendError, DistLayoutError, DtypeError, KgenError, MismatchError

ROOT = Path(__file__).resolve().parent.parent


def case(m, n, k, p, a, b, c=None, out=None, itemsize=4):
    r = lambda x: None if x is None else resolve(x, p)
    return GemmCase(m, n, k, p, itemsize, 4, r(a), r(b), r(c), r(out))


MODEL = dict(alpha_s=5e-6, beta_s=1e-10)


def test_cost_model_picks_the_algorithm_whose_layouts_are_already_there():
    assert choose(case(4096, 4096, 4096, 4, "replicated", "cols"), **MODEL) == "allgather"
    assert choose(case(4096, 4096, 4096, 4, "cols", "rows"), **MODEL) == "reduce_scatter"
    assert choose(case(4096, 4096, 4096, 4, "block2d", "block2d"), **MODEL) == "summa"
    assert choose(case(9, 9, 9, 1, "rows", "cols"), **MODEL) == "allgather"      # one rank: all free, first wins


def test_cost_model_counts_bytes_per_rank():
    # allgather from rows: each of 4 ranks lacks 3/4 of A (1024 x 1024 float32)
    e = estimate(case(1024, 512, 1024, 4, "rows", "cols"), "allgather", **MODEL)
    assert e.bytes == 768 * 1024 * 4 and e.steps == 2
    # reduce_scatter: each rank receives 3 partial copies of its 256 x 512 rows, in float32
    e = estimate(case(1024, 512, 1024, 4, "cols", "rows"), "reduce_scatter", **MODEL)
    assert e.bytes == 3 * 256 * 512 * 4
    # summa on 2 x 2: half of A's row panel and half of B's column panel come from the peer
    e = estimate(case(1024, 1024, 1024, 4, "block2d", "block2d"), "summa", **MODEL)
    assert e.bytes == (512 * 512 + 512 * 512) * 4
    # asking for another output layout adds that move
    plain = estimate(case(64, 64, 64, 2, "replicated", "cols"), "allgather", **MODEL)
    moved = estimate(case(64, 64, 64, 2, "replicated", "cols", out="rows"), "allgather", **MODEL)
    assert plain.bytes == 0 and moved.bytes == 32 * 32 * 4


def test_summa_panels_cut_at_both_splits_and_the_width():
    assert summa_panels(10, (2, 2), 0) == [(0, 5), (5, 10)]
    assert summa_panels(10, (2, 2), 2) == [(0, 2), (2, 4), (4, 5), (5, 7), (7, 9), (9, 10)]
    assert summa_panels(0, (2, 2), 4) == []


def test_launches_from_mpiexec_torchrun_or_alone():
    unset = (-1, -1, -1)
    assert describe_launch((3, 4, 1), unset) == Launch(3, 4, 1, "mpiexec")
    assert describe_launch((3, 4, 1), (3, 4, 1)).how == "mpiexec"
    assert describe_launch((0, 1, 0), (0, 1, 0)) == Launch(0, 1, 0, "torchrun")
    assert describe_launch((0, 1, 0), unset) == Launch(0, 1, 0, "single")
    with pytest.raises(BackendError, match="say otherwise"):
        describe_launch((3, 4, 1), (0, 4, 0))
    with pytest.raises(BackendError, match="mpiexec did not start it") as info:
        describe_launch((0, 1, 0), (1, 2, 1))
    assert "mpiexec -n 2" in info.value.remedy


def test_disagreement_is_described_the_same_from_every_rank():
    assert describe_disagreement("gemm", [(1, None), (1, None)]) is None
    assert describe_disagreement("x", [(1, None), (2, None), (1, None)]) == \
        "ranks disagree on x: ranks 0, 2 have 1; rank 1 has 2"
    assert describe_disagreement("from_local", [(1, None), (1, "its shard is 3x4")]) == \
        "from_local: rank 1: its shard is 3x4"


class _Alone(Communicator):
    """A one-rank communicator with no backend: enough for agree() and the traffic counts."""

    def __init__(self):
        super().__init__(0, 1)

    def allgather_object(self, obj):
        return [obj]

    def bcast_object(self, obj, root):
        return obj

    def barrier(self):
        pass

    def split(self, color, key):
        return self

    def _alltoallv(self, send, sc, rc):
        return send.copy()

    def _allgatherv(self, send, counts):
        return send.copy()

    def _gatherv(self, send, counts, root):
        return send.copy()

    def _bcast(self, buf, root):
        return buf

    def _allreduce(self, x, op):
        return x.copy()

    def _reduce_scatter(self, x, counts, op):
        return x.copy()


def test_a_backend_without_asynchronous_collectives_begins_them_done():
    comm = _Alone()
    gathered = comm.allgatherv_start(np.arange(4.0), [4])
    reduced = comm.reduce_scatter_start(np.arange(3.0), [3], "sum")
    sent = comm.bcast_start(np.arange(2.0), 0)
    assert gathered.wait().tolist() == [0.0, 1.0, 2.0, 3.0] and reduced.wait().tolist() == [0.0, 1.0, 2.0]
    assert sent.wait().tolist() == [0.0, 1.0]
    assert gathered.wait() is gathered.wait()                        # waited once, kept
    with pytest.raises(ValueError):
        comm.reduce_scatter_start(np.ones(2), [2], "min")


def test_a_pending_collective_finishes_once():
    calls = []
    pending = Pending(finish=lambda: calls.append(1) or "done")
    assert (pending.wait(), pending.wait(), calls) == ("done", "done", [1])


def test_a_rank_alone_moves_nothing_and_still_raises_its_own_complaint():
    comm = _Alone()
    comm.alltoallv(np.ones(3), [3], [3])
    comm.allreduce(np.ones(3))
    assert (comm.traffic.sent, comm.traffic.received, comm.traffic.messages) == (0, 0, 0)
    with pytest.raises(MismatchError, match="rank 0: bad shard"):
        agree(comm, "from_local", ("d",), "bad shard")
    with pytest.raises(ValueError):
        comm.allreduce(np.ones(2), "min")


def test_dtypes_supported_and_refused(monkeypatch):
    assert dtypes.resolve_dtype(np.float16) == np.float16
    with pytest.raises(DtypeError, match="int64"):
        dtypes.resolve_dtype("int64")
    monkeypatch.setattr(dtypes, "_bfloat16", lambda: None)
    with pytest.raises(DtypeError, match="ml_dtypes") as info:
        dtypes.resolve_dtype("bfloat16")
    assert "pip install ml_dtypes" in info.value.remedy
    assert dtypes.supported() == ("float32", "float64", "float16")


def test_the_gpu_backend_without_a_gpu_and_unknown_backends_are_refused(monkeypatch):
    from kgen.dist import runtime

    monkeypatch.setattr(runtime, "gpu_backend_missing", lambda: "CUDA sees no GPU")
    with pytest.raises(BackendError, match="cannot run here: CUDA sees no GPU") as info:
        kd.init("nccl")
    assert 'init("mpi")' in info.value.remedy
    with pytest.raises(BackendError, match="unknown backend"):
        kd.init("gloo")
    monkeypatch.setenv("KGEN_DIST_BACKEND", "nccl")
    with pytest.raises(BackendError, match="cannot run here"):
        kd.init()
    with pytest.raises(KgenError, match="not initialized"):
        kd.rank()


def test_dist_errors_pickle_with_their_fields():
    err = MismatchError("ranks disagree on gemm", values=[1, 2], complaints=[None, None])
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is MismatchError and back.fields["values"] == [1, 2] and back.remedy
    assert pickle.loads(pickle.dumps(DistLayoutError("bad grid"))).remedy


def test_importing_kgen_dist_starts_no_mpi():
    code = "import sys, kgen.dist; assert 'mpi4py' not in sys.modules and 'kgen.dist' not in sys.modules['kgen'].__all__"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


def test_nothing_below_kgen_dist_imports_it():
    from test_import_cycles import import_graph

    graph = import_graph()
    users = sorted(m for m, deps in graph.items() if not m.startswith("kgen.dist")
                   and any(d == "kgen.dist" or d.startswith("kgen.dist.") for d in deps))
    assert users == [], f"{users} import kgen.dist"


def test_dist_gemm_family_space_default_and_record_checks():
    from kgen.db.validity import Validator
    from kgen.dist.tuned import device_label, problem_of
    from kgen.dist.tuning import DistGemm
    from kgen.problem import Target
    from kgen.registry import get_spec

    spec = get_spec("dist_gemm")
    assert isinstance(spec, DistGemm)
    p = problem_of(4096, 4096, 4096, "float16", "block2d", "block2d", 8, "nccl")
    space = spec.space(p, Target.h200())
    assert sorted(c.name for c in space.configs()) == sorted(
        [f"dist_{a}_p0_c{c}" for a in ("allgather", "reduce_scatter") for c in (1, 2, 4, 8)]
        + [f"dist_summa_p{w}_c1" for w in (0, 256, 1024, 4096)])
    assert space.trusted({"ALG": "allgather", "PANEL": 256, "CHUNKS": 1}) is None    # a panel only SUMMA has
    assert space.trusted({"ALG": "summa", "PANEL": 256, "CHUNKS": 2}) is None        # SUMMA's pieces are panels
    assert spec.default_config(p, Target.h200()).name in {c.name for c in space.configs()}
    assert spec.template_digest() == DistGemm().template_digest() and len(spec.template_digest()) == 16
    device = device_label("nccl", 8, "NVIDIA H200")
    summa = {"ALG": "summa", "PANEL": 256, "CHUNKS": 1}
    why = Validator().why("dist_gemm", p.key, "dist_summa_p256_c1", summa, 5.0, device, "9.0",
                          spec.template_digest())
    assert why is None, why
    # eight GPUs together may beat one GPU's floor, not eight GPUs'
    floor_one = 2 * 4096 ** 3 / 5e15 * 1e3
    assert Validator().why("dist_gemm", p.key, "dist_summa_p256_c1", summa, floor_one / 4,
                           device, "9.0", spec.template_digest()) is None
    assert "faster than any GPU" in Validator().why("dist_gemm", p.key, "dist_summa_p256_c1",
                                                    summa, floor_one / 20, device, "9.0",
                                                    spec.template_digest())
    assert "is not" in Validator().why("dist_gemm", p.key, "dist_evil", {"ALG": "evil", "PANEL": 0, "CHUNKS": 1},
                                       5.0, device, "9.0", spec.template_digest())


def test_dist_gemm_tune_refuses_single_gpu_options(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from kgen.cli import app

    monkeypatch.setenv("KGEN_HOME", str(tmp_path))
    result = CliRunner().invoke(app, ["tune", "dist_gemm", "--m", "64", "--n", "64", "--k", "64", "--replay", "x"])
    assert result.exit_code == 2 and "mpiexec -n N kgen tune dist_gemm" in result.output
    empty = CliRunner().invoke(app, ["tune", "dist_gemm", "--m", "0", "--n", "64", "--k", "64"])
    assert empty.exit_code == 2 and "m=0 must be an integer >= 1" in empty.output


class _Work:
    """The current stream's work as the watchdog sees it: done, or never."""

    def __init__(self, done: bool):
        self.done = done

    def synchronize(self):
        assert self.done, "a wait for ever"


class _Nccl:
    """What the watchdog calls on a cupy.cuda.nccl.NcclCommunicator."""

    def __init__(self, error: str | None = None):
        self.error, self.aborted = error, 0

    def check_async_error(self):
        if self.error:
            raise RuntimeError(self.error)

    def abort(self):
        self.aborted += 1


def _watched(nccl, done: bool, host_lost: bool = False):
    from types import SimpleNamespace

    from kgen.dist.comm_nccl import NcclCommunicator
    from kgen.errors import RankLostError

    def alive(timeout_s):
        if host_lost:
            raise RankLostError("rank 1 never came", rank=0, world_size=2)

    host = SimpleNamespace(rank=0, size=2, alive=alive, barrier=lambda: None, free=lambda: None)
    comm = NcclCommunicator(nccl, host)
    comm._current_work = lambda: _Work(done)
    return comm


def test_the_watchdog_aborts_collectives_that_never_end_within_the_timeout():
    import time

    from kgen.errors import RankLostError

    nccl = _Nccl()
    comm = _watched(nccl, done=False)
    start = time.monotonic()
    with pytest.raises(RankLostError, match="did not finish within 0.05 s"):
        comm.wait_stream(0.05)
    assert time.monotonic() - start < 2.0 and nccl.aborted == 1 and comm.nccl_comm is None
    with pytest.raises(RankLostError, match="aborted communicator"):
        comm.wait_stream(10.0)                            # unusable after: at once, not after 10 s
    comm.free()                                           # nothing left to destroy


def test_the_watchdog_stops_at_nccls_own_error_and_passes_finished_work():
    from kgen.errors import RankLostError

    lost = _Nccl("remote process exited")
    with pytest.raises(RankLostError, match="NCCL reported remote process exited"):
        _watched(lost, done=False).wait_stream(300.0)
    assert lost.aborted == 1
    fine = _Nccl()
    _watched(fine, done=True).wait_stream(0.05)
    _watched(fine, done=True).wait_stream(0)
    assert fine.aborted == 0


def test_a_rank_lost_on_the_host_channel_aborts_the_nccl_communicator():
    from kgen.errors import RankLostError

    nccl = _Nccl()
    with pytest.raises(RankLostError, match="never came"):
        _watched(nccl, done=True, host_lost=True).alive(1.0)
    assert nccl.aborted == 1
