"""A first device fit's leader-to-be starts compiling the L-BFGS's kernels as the fit
begins (``single_host.compile_soon``), on a thread of its own (``by_name.in_background``),
once per client and leader."""

from __future__ import annotations

import sys
import textwrap
import threading
import time

import dask.array as da

from mgpu_dask.logreg import single_host
from mgpu_dask.parallel import by_name


def test_the_leader_holds_the_most_rows_the_first_such_on_a_tie():
    assert single_host.leader_of((5, 5, 5), ["a", "b", "b"]) == "b"
    assert single_host.leader_of((6, 3, 3), ["a", "b", "b"]) == "a"
    assert single_host.leader_of((4, 4), ["b", "a"]) == "b"


class _Client:
    def __init__(self, name: str, fails: bool = False) -> None:
        self.id, self.fails, self.runs = name, fails, []

    def run(self, fn, *args, workers=None):
        self.runs.append((fn, args, workers))
        if self.fails:
            raise OSError("the worker is gone")


def test_asked_of_the_leader_once_per_client_and_only_for_device_fits(monkeypatch):
    monkeypatch.setattr(single_host, "_COMPILING", set())
    X = da.zeros((15, 4), chunks=((5, 5, 5), 4))
    rows = ([None] * 3, ["a", "b", "b"])
    one, other = _Client("one"), _Client("other")
    single_host.compile_soon(one, X, rows, "auto")
    assert one.runs == []  # host rows: nothing runs on the device
    monkeypatch.setattr(single_host, "device_of", lambda X: "gpu")
    single_host.compile_soon(one, X, None, "auto")    # not persisted: no leader yet
    single_host.compile_soon(one, X, rows, "host")    # the host L-BFGS compiles nothing
    assert one.runs == []
    for _ in range(2):
        single_host.compile_soon(one, X, rows, "auto")
    single_host.compile_soon(other, X, rows, "device")
    assert [(args, workers) for _, args, workers in one.runs + other.runs] == [
        (("mgpu_dask.logreg.lbfgs.launches.compile_ahead",), ["b"])] * 2
    assert one.runs[0][0] is single_host.IN_BACKGROUND
    failing = _Client("failing", fails=True)
    single_host.compile_soon(failing, X, rows, "auto")  # says nothing
    assert len(failing.runs) == 1


def test_in_background_imports_here_and_calls_on_a_thread_of_its_own(tmp_path, monkeypatch):
    """The module is imported on the calling thread (two threads importing Numba at once
    break it), the function runs on another, and ``in_background`` does not wait for it;
    what the function raises is dropped."""
    (tmp_path / "slow_named.py").write_text(textwrap.dedent("""
        import threading, time
        IMPORTED_ON = threading.current_thread().name
        CALLED, GO = [], threading.Event()
        def start():
            GO.wait(10)
            CALLED.append(threading.current_thread().name)
        def broken():
            raise RuntimeError("no")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_named", raising=False)
    by_name.in_background("slow_named.start")
    module = sys.modules["slow_named"]  # imported before it returned
    assert module.IMPORTED_ON == threading.current_thread().name and module.CALLED == []
    module.GO.set()  # the call was waiting on its own thread
    deadline = time.monotonic() + 10
    while not module.CALLED:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert module.CALLED == ["mgpu-dask slow_named.start"]
    before = threading.active_count()
    by_name.in_background("slow_named.broken")  # raises on its thread: dropped
    deadline = time.monotonic() + 10
    while threading.active_count() > before:
        assert time.monotonic() < deadline
        time.sleep(0.01)
