"""Straight calls over the workers' own lanes (``parallel.lane``), not Dask's RPC.

Workers on the client's host serve :func:`.direct.run_held`'s calls over a Unix
socket each.  These tests check that the lane is taken, that it answers what
Dask's RPC answers, that a call's own error comes through it, and that a lane
that is off, missing or broken ends in Dask's RPC with the same answer.
"""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
from distributed import Client, LocalCluster

from mgpu_dask.data import shard
from mgpu_dask.parallel import direct, lane
from mgpu_dask.parallel.placement import locate


def _head(block, n):
    return np.asarray(block)[:n].sum(axis=1)


def _fails(block, n):
    raise ValueError("the call's own error")


async def _where_am_i(tag, dask_worker=None):
    return tag, dask_worker.address, os.getpid()


def _thread_name(block):
    import threading

    return threading.current_thread().name


_LOOP_BUSY = False  # in a worker: its event loop is held by _hold_the_loop


def _hold_the_loop(started, seconds):
    """Run by Dask's ``run`` handler, on the worker's event loop: holds it ``seconds``."""
    import pathlib
    import time

    global _LOOP_BUSY
    _LOOP_BUSY = True
    pathlib.Path(started).touch()
    time.sleep(seconds)
    _LOOP_BUSY = False


def _loop_busy(block):
    return _LOOP_BUSY


def _off_the_loop(tag, dask_worker=None):
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no event loop runs in this thread
        return tag, dask_worker.address, True
    return tag, dask_worker.address, False


def _sync_fails(tag):
    raise KeyError(f"no {tag} here")


@pytest.fixture(scope="module")
def cluster_client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        yield client


@pytest.fixture
def calls(cluster_client):
    rows = np.arange(40 * 3, dtype=np.float64).reshape(40, 3)
    X = shard(rows, cluster_client, device="cpu", timeout=30)  # NumPy blocks, GPU or not
    futures, where = locate(cluster_client, X, remembered=False)
    assert len(set(where)) == 2
    by_worker: dict = {}
    for f, w in zip(futures, where):
        by_worker.setdefault(w, []).append((_head, (direct.Held(f.key), 4)))
    want = {}
    for f, w in zip(futures, where):
        want.setdefault(w, []).append(_head(f.result(), 4))
    yield by_worker, want
    del X  # held until the test is done: the blocks live while their keys do


def _rpc_only(monkeypatch):
    """Dask's RPC: counts its calls."""
    seen = []
    real = direct._run

    async def counted(*args, **kwargs):
        seen.append(args)
        return await real(*args, **kwargs)

    monkeypatch.setattr(direct, "_run", counted)
    return seen


def _same(got, want):
    assert set(got) == set(want)
    for w in want:
        for a, b in zip(got[w], want[w]):
            np.testing.assert_array_equal(a, b)


def test_straight_calls_take_the_workers_lanes(cluster_client, calls, monkeypatch):
    by_worker, want = calls
    rpc = _rpc_only(monkeypatch)
    _same(direct.run_held(cluster_client, by_worker, 30), want)
    assert not [a for a in rpc if a[1] is direct.held_calls]  # none through Dask's RPC
    info = cluster_client.run(lane._lane_of)
    for w in by_worker:
        host, path = info[w]
        folder = os.path.dirname(path)
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700  # only this user reaches it
        assert stat.S_ISSOCK(os.stat(path).st_mode)


def test_the_lane_off_goes_through_dasks_rpc_with_the_same_answer(cluster_client, calls,
                                                                  monkeypatch):
    import dask

    by_worker, want = calls
    rpc = _rpc_only(monkeypatch)
    with dask.config.set({"mgpu-dask.cluster.straight-lane": False}):
        _same(direct.run_held(cluster_client, by_worker, 30), want)
    assert len([a for a in rpc if a[1] is direct.held_calls]) == 2


def test_a_calls_own_error_comes_through_the_lane(cluster_client, calls, monkeypatch):
    by_worker, _ = calls
    rpc = _rpc_only(monkeypatch)
    failing = {w: [(_fails, args)] for w, pairs in by_worker.items() for _, args in pairs[:1]}
    with pytest.raises(ValueError, match="the call's own error"):
        direct.run_held(cluster_client, failing, 30)
    assert not [a for a in rpc if a[1] is direct.held_calls]
    by_worker, want = calls  # the lanes still serve the next call
    _same(direct.run_held(cluster_client, by_worker, 30), want)


def test_held_calls_run_in_the_workers_task_thread_by_either_route(cluster_client, calls,
                                                                   monkeypatch):
    """Over the lane as through Dask's RPC, held calls run in the thread where the worker
    runs its tasks (one at a time with them), not in the lane's own thread."""
    import dask

    by_worker, _ = calls
    named = {w: [(_thread_name, args[:1])] for w, pairs in by_worker.items()
             for _, args in pairs[:1]}
    rpc = _rpc_only(monkeypatch)
    over_lane = direct.run_held(cluster_client, named, 30)
    assert not rpc
    with dask.config.set({"mgpu-dask.cluster.straight-lane": False}):
        over_rpc = direct.run_held(cluster_client, named, 30)
    assert rpc
    tasks = cluster_client.run(lambda dask_worker: dask_worker.executors["default"].submit(
        _thread_name, None).result())
    for w in named:
        assert over_lane[w] == over_rpc[w] == [tasks[w]]
        assert "lane" not in tasks[w]


def test_held_calls_over_the_lane_do_not_wait_for_the_workers_event_loop(cluster_client,
                                                                        calls, tmp_path):
    """A lane's thread hands held calls straight to the task thread: they run while the
    worker's event loop is busy with something else (here Dask's ``run`` handler holding
    it), where a route through the loop would run them only once it is free."""
    import threading
    import time

    by_worker, _ = calls
    w = sorted(by_worker)[0]
    call = {w: [(_loop_busy, by_worker[w][0][1][:1])]}
    assert direct.run_held(cluster_client, call, 30) == {w: [False]}  # the lane is open
    started = tmp_path / "started"
    holder = threading.Thread(target=cluster_client.run, args=(_hold_the_loop, str(started), 4),
                              kwargs={"workers": [w]})
    holder.start()
    try:
        for _ in range(400):
            if started.exists():
                break
            time.sleep(0.05)
        assert started.exists()
        assert direct.run_held(cluster_client, call, 30) == {w: [True]}
    finally:
        holder.join()
    assert direct.run_held(cluster_client, call, 30) == {w: [False]}


def test_a_call_from_the_client_takes_the_lane_with_dasks_answer(cluster_client, calls,
                                                                 monkeypatch):
    """``from_client`` (the leader's fit is asked this way) over the lane: the answer Dask's
    RPC gives (a coroutine function given its worker), and a call's own error."""
    import dask

    by_worker, _ = calls
    w = sorted(by_worker)[0]
    rpc = _rpc_only(monkeypatch)
    got = direct.from_client(cluster_client, w, _where_am_i, "lane", timeout=30)
    assert not rpc  # not through Dask's RPC
    with dask.config.set({"mgpu-dask.cluster.straight-lane": False}):
        want = direct.from_client(cluster_client, w, _where_am_i, "lane", timeout=30)
    assert len(rpc) == 1
    assert got == want and got[1] == w and got[2] != os.getpid()
    with pytest.raises(KeyError, match="no tag here"):
        direct.from_client(cluster_client, w, _sync_fails, "tag", timeout=30)
    assert len(rpc) == 1
    _same(direct.run_held(cluster_client, by_worker, 30), calls[1])  # the lanes still serve


def test_a_call_from_the_client_in_a_thread_of_its_own_by_either_route(cluster_client, calls,
                                                                       monkeypatch):
    """``from_client(in_thread=True)`` (the leader's fit): off the worker's event loop, over
    the lane (in its thread) as through Dask's RPC, given the worker; without it, a plain
    function runs on the loop, as Dask's ``run`` runs it."""
    import dask

    by_worker, _ = calls
    w = sorted(by_worker)[0]
    rpc = _rpc_only(monkeypatch)
    assert direct.from_client(cluster_client, w, _off_the_loop, "t", timeout=30,
                              in_thread=True) == ("t", w, True)
    assert direct.from_client(cluster_client, w, _off_the_loop, "t", timeout=30) == ("t", w, False)
    assert not rpc
    with dask.config.set({"mgpu-dask.cluster.straight-lane": False}):
        assert direct.from_client(cluster_client, w, _off_the_loop, "t", timeout=30,
                                  in_thread=True) == ("t", w, True)
        assert direct.from_client(cluster_client, w, _off_the_loop, "t",
                                  timeout=30) == ("t", w, False)
    assert len(rpc) == 2
    with pytest.raises(KeyError, match="no tag here"):
        direct.from_client(cluster_client, w, _sync_fails, "tag", timeout=30, in_thread=True)


def test_a_block_gone_is_refused_through_the_lane(cluster_client, calls):
    by_worker, _ = calls
    w = next(iter(by_worker))
    assert direct.run_held(cluster_client, {w: [(_head, (direct.Held("no-such-key"), 4))]},
                           30) is None


def test_a_broken_lane_falls_back_to_dasks_rpc(cluster_client, calls, monkeypatch):
    by_worker, want = calls
    direct.run_held(cluster_client, by_worker, 30)  # the lanes are open
    lanes = lane._CLIENTS[cluster_client]
    for w in by_worker:
        lanes.socks[w].close()  # broken under the client's feet
    rpc = _rpc_only(monkeypatch)
    _same(direct.run_held(cluster_client, by_worker, 30), want)
    assert len([a for a in rpc if a[1] is direct.held_calls]) == 2
    monkeypatch.undo()
    rpc = _rpc_only(monkeypatch)
    _same(direct.run_held(cluster_client, by_worker, 30), want)  # new lanes next time
    assert not [a for a in rpc if a[1] is direct.held_calls]


def test_a_worker_without_a_lane_is_asked_through_dasks_rpc(cluster_client, calls,
                                                            monkeypatch):
    by_worker, want = calls
    monkeypatch.setattr(lane, "_CLIENTS", type(lane._CLIENTS)())  # connections asked anew
    monkeypatch.setattr(lane, "_lane_of", lambda dask_worker=None: None)
    rpc = _rpc_only(monkeypatch)
    _same(direct.run_held(cluster_client, by_worker, 30), want)
    assert len([a for a in rpc if a[1] is direct.held_calls]) == 2


def test_a_closing_worker_closes_its_lanes():
    """A worker that closes shuts the lanes it serves: a client waiting on one hears it at
    once and asks through Dask's RPC."""
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        X = shard(np.ones((8, 2)), client, device="cpu", timeout=30)
        futures, where = locate(client, X, remembered=False)
        calls = {where[0]: [(_head, (direct.Held(futures[0].key), 2))]}
        assert direct.run_held(client, calls, 30) is not None  # the lane is open
        sock = lane._CLIENTS[client].socks[where[0]]
        host, path = client.run(lane._lane_of)[where[0]]
        client.run(lambda dask_worker: dask_worker.plugins[lane.StraightLane.name].teardown(
            dask_worker))
        sock.settimeout(10)
        assert sock.recv(1) == b""  # closed at the worker's end, not left hanging
        assert not os.path.exists(path)


async def _close_my_lanes(tag, dask_worker=None):
    """Run on a worker: its lanes' connections shut before the answer goes back."""
    import contextlib
    import socket

    extension = dask_worker.extensions.get("mgpu-dask-lane")
    for conn in list(getattr(extension, "_conns", ())):
        with contextlib.suppress(OSError):  # one the lane closed meanwhile (EBADF)
            conn.shutdown(socket.SHUT_RDWR)
    return tag


def _shut_lanes_then_head(block, n, dask_worker):
    import asyncio

    asyncio.run_coroutine_threadsafe(_close_my_lanes(None, dask_worker),
                                     dask_worker.loop.asyncio_loop).result()
    return _head(block, n)


def test_a_lane_closed_mid_call():
    """A lane that closes after its call went: a held call (it only reads) is asked again
    through Dask's RPC, with the same answer; a call from the client is not asked again
    (it may have run) and raises an OSError, as a connection Dask's RPC lost does."""
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        X = shard(np.arange(16.0).reshape(8, 2), client, device="cpu", timeout=30)
        futures, where = locate(client, X, remembered=False)
        w = where[0]
        plain = {w: [(_head, (direct.Held(futures[0].key), 2))]}
        want = direct.run_held(client, plain, 30)  # over the lane
        shut = {w: [(_shut_lanes_then_head, (direct.Held(futures[0].key), 2, direct.Here()))]}
        _same(direct.run_held(client, shut, 30), want)
        assert direct.from_client(client, w, _where_am_i, "again", timeout=30)[0] == "again"
        with pytest.raises(lane.LaneLost):
            direct.from_client(client, w, _close_my_lanes, "lost", timeout=30)
        assert direct.from_client(client, w, _where_am_i, "then", timeout=30)[0] == "then"
        assert lane._CLIENTS[client].socks[w] is not None  # a new lane, not Dask's RPC


def _over_a_lane(value):
    """``value`` through :func:`lane._send` and :func:`lane._message` over a socket pair:
    what came out, and the bytes of each ``sendall``."""
    import socket as sockets
    from concurrent.futures import ThreadPoolExecutor

    a, b = sockets.socketpair(sockets.AF_UNIX, sockets.SOCK_STREAM)
    sent = []

    class Recording:
        def sendall(self, data):
            sent.append(memoryview(data).nbytes)
            a.sendall(data)

    with a, b, ThreadPoolExecutor(1) as reader:  # the other end reads as the bytes go
        received = reader.submit(lane._message, b)
        lane._send(Recording(), value)
        return received.result(timeout=30), sent


def test_a_lane_message_carries_arrays_out_of_band_and_whole():
    """Arrays cross a lane as their own bytes after a small pickle (no in-band copy), and
    come out equal in value, dtype, shape and order, writable, beside what is not an array."""
    big = np.arange(70_000, dtype=np.int32) % 10
    got, sent = _over_a_lane(("ok", {"results": [big]}))
    assert sent[0] < 1024 and sent[1:] == [big.nbytes]  # the pickle, then the array as it lies
    np.testing.assert_array_equal(got[1]["results"][0], big)
    value = [big, np.asfortranarray(np.arange(12.0).reshape(3, 4)), np.empty(0, np.uint8),
             big[::2], "text", 7]
    got, _ = _over_a_lane(value)
    assert got[4:] == ["text", 7]
    for want, have in zip(value[:4], got[:4]):
        assert have.dtype == want.dtype and have.shape == want.shape
        np.testing.assert_array_equal(have, want)
    assert got[0].flags.writeable and got[1].flags.f_contiguous


def _who(tag, dask_worker=None):
    return tag, dask_worker.address, os.getpid()


def _ask_peer(other, path, tag, function=_who):
    """In a worker's task: ``function`` asked of worker ``other`` (over ``path``, a
    lane), and how many calls this worker made over lanes meanwhile."""
    before = direct.PEER_LANE_CALLS[0]
    answer = direct.from_worker(other, function, tag, lane_path=path).result(timeout=30)
    return answer, direct.PEER_LANE_CALLS[0] - before


def test_a_worker_asks_another_over_its_lane_else_through_dasks_rpc(cluster_client):
    """A worker reaches another worker's lane as the client does (the same answer as Dask's
    RPC gives); a lane it cannot reach (another host's path) and a coroutine function
    (which Dask's RPC awaits) go through Dask's RPC."""
    client = cluster_client
    a, b = sorted(client.nthreads())
    paths = lane.paths(client, [a, b], direct.SERVED)
    assert set(paths) == {a, b}
    (tag, where, _), over = client.submit(_ask_peer, b, paths[b], "x", workers=[a],
                                          pure=False).result()
    assert (tag, where, over) == ("x", b, 1)
    (tag, where, _), over = client.submit(_ask_peer, b, "/nonexistent/lane", "y", workers=[a],
                                          pure=False).result()
    assert (tag, where, over) == ("y", b, 0)
    (tag, where, _), over = client.submit(_ask_peer, b, paths[b], "z", _where_am_i,
                                          workers=[a], pure=False).result()
    assert (tag, where, over) == ("z", b, 0)


def _refuses(tag):
    raise LookupError(f"no {tag} here")


def _ask_here(other, path, tag, function=_who):
    """In a worker's task: ``function`` asked of ``other`` in this very thread (``here``):
    whether the future came back done, the thread that made the call, and the answer (or
    the exception's type and text)."""
    import threading

    seen = []
    real = lane.call_peer

    def watched(*args, **kwargs):
        seen.append(threading.current_thread().name)
        return real(*args, **kwargs)

    lane.call_peer = watched
    try:
        future = direct.from_worker(other, function, tag, lane_path=path, here=True, timeout=30)
    finally:
        lane.call_peer = real
    done = future.done()
    try:
        answer = future.result()
    except LookupError as exc:
        answer = (type(exc).__name__, str(exc))
    return done, seen == [threading.current_thread().name], answer


def test_a_worker_asks_another_in_its_own_thread_when_it_says_here(cluster_client):
    """``here``: the call over the lane is made in the caller's thread (no pool), and the
    future comes back done, with the answer or with the exception raised there."""
    client = cluster_client
    a, b = sorted(client.nthreads())
    paths = lane.paths(client, [a, b], direct.SERVED)
    done, in_caller, (tag, where, _) = client.submit(_ask_here, b, paths[b], "h", workers=[a],
                                                     pure=False).result()
    assert (done, in_caller, tag, where) == (True, True, "h", b)
    done, in_caller, answer = client.submit(_ask_here, b, paths[b], "x", _refuses, workers=[a],
                                            pure=False).result()
    assert (done, in_caller, answer) == (True, True, ("LookupError", "no x here"))
