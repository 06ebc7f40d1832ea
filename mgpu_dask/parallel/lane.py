"""A lane of its own between a client and the workers on its host, for straight calls.

A straight call (:func:`.direct.run_held`, :func:`.direct.from_client`) through
Dask's RPC pays for Dask's message framing and handler on both sides and the
client's event loop in between, many times what a round trip over a local
socket costs (``docs/performance-history.md`` has the figures).  Each worker
with the :class:`StraightLane` plugin serves the same calls over a Unix socket
of its own: a thread reads a call, answers it with the function the plugin was
made with (:func:`.direct.served`: predictions' calls go from this thread
straight to the worker's task thread, a leader's fit runs in this thread, other
calls on the worker's event loop, as Dask's RPC would run them) and writes the
answer back.  No port is
opened: the socket lives in a folder only this user can enter, and only a
client on the worker's own host can reach it.  Where a worker has no lane (another
host, a cluster that could not load the plugin, ``mgpu-dask.cluster.
straight-lane`` false) the call goes through Dask's RPC as before.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import tempfile
import threading
import weakref
from typing import Any, Callable

from distributed import WorkerPlugin

from .. import config
from . import plugins
from .workers import scheduler_workers

_HEADER = struct.Struct("<QQ")  # a message's pickle, in bytes, and its buffers


class LaneLost(ConnectionError):
    """A lane broke after its calls were sent: the worker may have run them (lost on the
    way, or still running); asking again elsewhere is the caller's choice."""


def _read(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise ConnectionError("the lane closed")
        got += k
    return buf


def _message(sock: socket.socket) -> Any:
    """One message of :func:`_send`: its pickle, then its out-of-band buffers, each read
    into memory of its own that the unpickled arrays keep (no copy after the socket's)."""
    from distributed.protocol import pickle

    size, count = _HEADER.unpack(_read(sock, _HEADER.size))
    lengths = struct.unpack(f"<{count}Q", _read(sock, 8 * count)) if count else ()
    payload = _read(sock, size)
    return pickle.loads(payload, buffers=[_read(sock, n) for n in lengths])


def _send(sock: socket.socket, value: Any) -> None:
    """``value`` pickled with its arrays' memory out of band (pickle protocol 5): the
    pickle is a few hundred bytes and each array goes to the socket as it lies, where an
    in-band pickle would copy it twice and Dask's pickle scan it -- a straight answer's
    predictions, on the way back to the client.  Everything is pickled before the first
    byte goes, so a value that does not pickle leaves the lane clean for the error."""
    from distributed.protocol import pickle  # cloudpickle where plain pickle cannot

    buffers: list[Any] = []
    payload = pickle.dumps(value, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]  # pickle.PickleBuffer: contiguous memory, as bytes
    sock.sendall(_HEADER.pack(len(payload), len(raws))
                 + struct.pack(f"<{len(raws)}Q", *(r.nbytes for r in raws)) + payload)
    for raw in raws:
        sock.sendall(raw)


class StraightLane(WorkerPlugin):
    """Worker plugin: serves ``serve(calls, dask_worker=...)``, a function named
    ``"module:function"`` (looked up at each call, as Dask's RPC finds it) and called in
    the lane's thread, over a Unix socket (see the module)."""

    name = "mgpu-dask-straight-lane"
    idempotent = True

    def __init__(self, serve: str) -> None:
        self.serve = serve

    def _serve(self) -> Callable[..., Any]:
        import importlib

        module, name = self.serve.split(":")
        return getattr(importlib.import_module(module), name)

    def setup(self, worker: Any) -> None:
        self._folder = tempfile.mkdtemp(prefix="mgpu-dask-lane-")  # mode 0700
        self.path = os.path.join(self._folder, "lane")
        try:
            self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._server.bind(self.path)  # fails where TMPDIR makes the path too long
            self._server.listen(16)
        except (OSError, AttributeError):  # no lane here: Dask's RPC serves this worker
            shutil.rmtree(self._folder, ignore_errors=True)
            return
        self._conns: set[socket.socket] = set()

        def serve(conn: socket.socket) -> None:
            self._conns.add(conn)
            try:
                with conn:
                    answer_calls(conn)
            finally:
                self._conns.discard(conn)

        def answer_calls(conn: socket.socket) -> None:
            while True:
                try:
                    calls = _message(conn)
                except Exception:  # closed, or calls this process cannot unpickle:
                    return  # the caller then asks through Dask's RPC
                try:
                    answer = ("ok", self._serve()(calls, dask_worker=worker))
                except BaseException as exc:  # raised again by the caller
                    answer = ("error", exc)
                try:
                    _send(conn, answer)
                except OSError:
                    return
                except Exception as exc:  # an answer that does not pickle
                    _send(conn, ("error", RuntimeError(f"the answer did not pickle: {exc}")))

        def accept() -> None:
            while True:
                try:
                    conn, _ = self._server.accept()
                except OSError:  # closed in teardown
                    return
                threading.Thread(target=serve, args=(conn,), daemon=True,
                                 name="mgpu-dask-lane").start()

        threading.Thread(target=accept, daemon=True, name="mgpu-dask-lane-accept").start()
        worker.extensions["mgpu-dask-lane"] = self

    def teardown(self, worker: Any) -> None:
        """The worker closes: its lanes close too, so that a client waiting on one hears
        it at once (and asks through Dask's RPC, which says the worker is gone)."""
        if worker.extensions.pop("mgpu-dask-lane", None) is self:
            self._server.close()
            for conn in list(self._conns):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            shutil.rmtree(self._folder, ignore_errors=True)


def _lane_of(dask_worker: Any = None) -> tuple[str, str] | None:
    """Run on a worker: its host name and its lane's socket (None: no lane here)."""
    lane = getattr(dask_worker, "extensions", {}).get("mgpu-dask-lane")
    return (socket.gethostname(), lane.path) if lane is not None else None


class _Lanes:
    """A client's connections to its workers' lanes, each used by one call at a time."""

    def __init__(self) -> None:
        self.socks: dict[str, socket.socket | None] = {}  # None: no lane to that worker
        self.paths: dict[str, str] = {}  # each lane's socket, for the workers' own calls
        self.locks: dict[str, threading.Lock] = {}
        self.lock = threading.Lock()

    def connect(self, client: Any, worker: str) -> socket.socket | None:
        with self.lock:
            if worker in self.socks:
                return self.socks[worker]
        if worker not in scheduler_workers(client):
            # Not a worker the client knows of (lost, or not yet heard of): no lane now, and
            # no ``run`` for Dask to wait out its 30 s connect timeout on.  Not remembered.
            return None
        sock = None
        try:
            found = client.run(_lane_of, workers=[worker], on_error="return",
                               wait=True).get(worker)
            if isinstance(found, tuple) and found[0] == socket.gethostname():
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(found[1])
        except Exception:  # no lane to that worker: Dask's RPC serves it
            sock = None
        with self.lock:
            if sock is not None:
                self.paths[worker] = found[1]
            self.socks[worker] = sock
            self.locks.setdefault(worker, threading.Lock())
        return sock

    def forget(self, workers: list[str]) -> None:
        """Close these workers' connections: their next call connects anew."""
        with self.lock:
            socks = [self.socks.pop(worker, None) for worker in workers]
            for worker in workers:
                self.paths.pop(worker, None)
        for sock in socks:
            if sock is not None:
                sock.close()


_CLIENTS: "weakref.WeakKeyDictionary[Any, _Lanes]" = weakref.WeakKeyDictionary()
_CLIENTS_LOCK = threading.Lock()


def _lanes(client: Any, serve: str) -> _Lanes | None:
    """The client's connections to its workers' lanes (None: lanes are off, or the plugin
    could not be registered)."""
    if not config.get("cluster.straight-lane", True):
        return None
    if plugins.register_once(client, StraightLane.name, lambda: StraightLane(serve)) is not None:
        return None
    with _CLIENTS_LOCK:
        return _CLIENTS.setdefault(client, _Lanes())


def paths(client: Any, workers: list[str], serve: str) -> dict[str, str]:
    """The lane socket of each of ``workers`` on this client's host that has one, for the
    workers to call each other over (:func:`call_peer`): a worker on that host reaches
    another's lane as this client does."""
    lanes = _lanes(client, serve)
    if lanes is None:
        return {}
    for w in workers:
        lanes.connect(client, w)
    with lanes.lock:
        return {w: lanes.paths[w] for w in workers if w in lanes.paths}


_PEERS: dict[str, tuple[socket.socket, threading.Lock]] = {}
_PEERS_LOCK = threading.Lock()


def call_peer(path: str, message: Any, timeout: float | None) -> Any:
    """On a worker: ``message`` (as :func:`ask` sends one) over another worker's lane at
    ``path`` (one connection per lane and process, one call at a time on it), and its
    answer.  ``ConnectionError`` where the lane cannot be reached (another host's path,
    a worker gone) or closes before the answer (the connection is dropped: the next
    call connects anew); past ``timeout`` seconds, ``TimeoutError``; an exception raised
    by the call is raised here."""
    with _PEERS_LOCK:
        if path not in _PEERS:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(path)
            except OSError as exc:
                sock.close()
                raise ConnectionError(f"no lane at {path}: {exc}") from None
            _PEERS[path] = (sock, threading.Lock())
        sock, lock = _PEERS[path]
    with lock:
        try:
            sock.settimeout(timeout)
            _send(sock, message)
            status, value = _message(sock)
        except (OSError, EOFError) as exc:  # an answer may still come: this connection is spent
            with _PEERS_LOCK:
                if _PEERS.get(path, (None,))[0] is sock:
                    del _PEERS[path]
            sock.close()
            if isinstance(exc, socket.timeout):
                raise TimeoutError(f"no answer over the lane at {path} within {timeout} s") \
                    from None
            raise ConnectionError(f"the lane at {path} closed: {exc}") from None
    if status == "error":
        raise value
    return value


def ask(client: Any, calls: dict[str, list[tuple[Any, tuple]]], timeout: float | None,
        serve: str) -> dict[str, Any] | None:
    """Each worker's answer to ``calls[worker]`` over its lane, where the lane serves
    ``serve`` (``"module:function"``, :func:`.direct.served`), every worker asked at
    once; None where a worker has no lane or its lane closed before the calls went (the
    caller asks through Dask's RPC instead).  A lane that closes after they went raises
    :class:`LaneLost` (the calls may have run).  An exception raised by a call is raised
    here; past ``timeout`` seconds, ``TimeoutError``."""
    lanes = _lanes(client, serve)
    if lanes is None:
        return None
    workers = sorted(calls)
    socks = {w: lanes.connect(client, w) for w in workers}
    if any(s is None for s in socks.values()):
        return None
    held = [lanes.locks[w] for w in workers]  # one call at a time on a lane, in one order
    for lock in held:
        lock.acquire()
    try:
        try:
            for w in workers:
                socks[w].settimeout(timeout)
                _send(socks[w], calls[w])
        except OSError:  # a lane closed before its call went: Dask's RPC says why
            lanes.forget(workers)
            return None
        try:
            answers = {w: _message(socks[w]) for w in workers}
        except socket.timeout:  # an answer may still be on its way: these lanes are spent
            lanes.forget(workers)
            raise TimeoutError(f"no answer from the workers within {timeout} s") from None
        except (OSError, EOFError) as exc:  # a worker lost on the way, or its lane closed
            lanes.forget(workers)
            raise LaneLost(f"a worker's lane closed before its answer came ({exc})") from None
    finally:
        for lock in held:
            lock.release()
    for status, value in answers.values():
        if status == "error":
            raise value
    return {w: answer[1] for w, answer in answers.items()}
