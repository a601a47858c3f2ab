"""The nccl backend's host channel for ranks torchrun started: object collectives over a key-value
store (kgen.dist.comm_store), checked with ranks as threads over an in-memory store, and, where
PyTorch is installed, as processes over its TCPStore."""

from __future__ import annotations

import multiprocessing
import socket
import threading

import pytest

from kgen.dist.bootstrap import describe_launch
from kgen.dist.comm_store import DictStore, StoreChannel
from kgen.errors import BackendError, RankLostError


def _on_threads(size: int, body, store=None, timeout_s: float = 20.0) -> list:
    """body(channel) on ``size`` ranks that are threads sharing one store; their results in rank
    order (an exception in any rank is raised here)."""
    store = store or DictStore(timeout_s=timeout_s)
    results, errors = [None] * size, []

    def run(rank):
        try:
            results[rank] = body(StoreChannel(store, rank, size, "t", timeout_s))
        except BaseException as exc:            # carried to the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return results


def test_object_collectives_agree_on_every_rank():
    def body(ch):
        got = [ch.allgather_object({"rank": ch.rank, "square": ch.rank ** 2})]
        got.append(ch.bcast_object(f"from {ch.rank}" if ch.rank == 2 else None, 2))
        ch.barrier()
        got.append(ch.allgather_object(ch.rank * 10))
        return got

    results = _on_threads(4, body)
    for got in results:
        assert got[0] == [{"rank": r, "square": r * r} for r in range(4)]
        assert got[1] == "from 2"
        assert got[2] == [0, 10, 20, 30]


def test_split_orders_each_colour_by_key_and_exchanges_within_it():
    def body(ch):
        sub = ch.split(ch.rank % 2, -ch.rank)             # two groups, each in descending rank order
        return sub.rank, sub.size, sub.allgather_object(ch.rank), ch.allgather_object("after")

    results = _on_threads(5, body)
    assert [(r[0], r[1]) for r in results] == [(2, 3), (1, 2), (1, 3), (0, 2), (0, 3)]
    assert results[0][2] == [4, 2, 0] and results[1][2] == [3, 1]
    assert all(r[3] == ["after"] * 5 for r in results)


def test_keys_of_finished_exchanges_are_deleted():
    store = DictStore()

    def body(ch):
        for i in range(50):
            assert ch.allgather_object(i) == [i] * 3
        return None

    _on_threads(3, body, store)
    assert len(store.keys()) <= 3              # the last exchange's keys at most


def test_a_root_that_runs_ahead_never_deletes_what_a_slow_rank_has_still_to_read():
    import time

    def body(ch):
        got = []
        for i in range(6):
            if ch.rank != 0:
                time.sleep(0.02 * ch.rank)        # the root broadcasts on while the others lag
            got.append(ch.bcast_object(i if ch.rank == 0 else None, 0))
            if i % 3 == 2:
                got.append(tuple(ch.allgather_object(i)))
        return got

    want = [0, 1, 2, (2, 2, 2), 3, 4, 5, (5, 5, 5)]
    assert _on_threads(3, body) == [want] * 3


def test_a_rank_that_never_arrives_is_a_rank_lost_error_not_a_hang():
    store = DictStore(timeout_s=0.3)
    lonely = StoreChannel(store, 0, 2, "t", timeout_s=0.3)
    with pytest.raises(RankLostError, match="1 of the 2 ranks"):
        lonely.alive(0.3)
    with pytest.raises(RankLostError, match="within 0.3 s"):
        lonely.allgather_object("hello")


def test_alive_returns_once_every_rank_arrived():
    assert _on_threads(3, lambda ch: ch.alive(10.0)) == [None, None, None]


def test_torchrun_ranks_are_a_launch_for_the_gpu_backend_only():
    launch = describe_launch((0, 1, 0), (2, 4, 0), "nccl")
    assert (launch.rank, launch.world_size, launch.how) == (2, 4, "torchrun")
    with pytest.raises(BackendError, match="joins torchrun's ranks"):
        describe_launch((0, 1, 0), (2, 4, 0), "mpi")
    with pytest.raises(BackendError, match="out of range"):
        describe_launch((0, 1, 0), (4, 4, 0), "nccl")


def test_the_store_channel_of_a_torchrun_launch_keeps_attempts_and_inits_apart(monkeypatch):
    from kgen.dist import comm_store, runtime
    from kgen.dist.bootstrap import Launch

    store = DictStore()
    seen = []
    monkeypatch.setattr(comm_store, "torchrun_store", lambda *a: seen.append(a) or store)
    monkeypatch.setenv("MASTER_ADDR", "node0")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    first = runtime._store_channel(Launch(0, 1, 0, "torchrun"))
    second = runtime._store_channel(Launch(0, 1, 0, "torchrun"))
    assert seen[0][:5] == (0, 1, "node0", 29500, True)
    assert first.prefix.startswith("kgen.dist/restart2/") and first.prefix != second.prefix


def test_without_a_meeting_point_the_error_says_what_to_set():
    pytest.importorskip("torch.distributed")
    from kgen.dist.comm_store import torchrun_store

    with pytest.raises(BackendError, match="MASTER_ADDR"):
        torchrun_store(1, 2, "", -1, False, 5.0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tcp_rank(rank: int, size: int, port: int, out) -> None:
    from kgen.dist.comm_store import StoreChannel, torchrun_store

    store = torchrun_store(rank, size, "127.0.0.1", port, False, 30.0)
    ch = StoreChannel(store, rank, size, "p", 30.0)
    gathered = ch.allgather_object(rank * 3)
    root = ch.bcast_object({"uid": b"\x01\x02"} if ch.rank == 0 else None, 0)
    sub = ch.split(rank // 2, rank)
    ch.alive(30.0)
    out.put((rank, gathered, root, sub.allgather_object(rank)))


def test_processes_meet_through_pytorchs_tcp_store():
    pytest.importorskip("torch.distributed")
    ctx = multiprocessing.get_context("spawn")
    out, port, size = ctx.Queue(), _free_port(), 3
    procs = [ctx.Process(target=_tcp_rank, args=(r, size, port, out)) for r in range(size)]
    for p in procs:
        p.start()
    results = sorted(out.get(timeout=120) for _ in range(size))
    for p in procs:
        p.join(30)
    assert [r[1] for r in results] == [[0, 3, 6]] * 3
    assert all(r[2] == {"uid": b"\x01\x02"} for r in results)
    assert [r[3] for r in results] == [[0, 1], [0, 1], [2]]
