"""A cluster that starts on a thread of its own while the caller does other work."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any, Callable

from ..config.environment import is_installed, optional_import
from .connection import connect
from .plan import RunningCluster


class StartingCluster:
    """:func:`connect` on a thread of its own from the moment this is made, for a caller
    with other work to do meanwhile.

    A cold CLI run's client imports its job modules and loads the data while its
    workers come up (the fork server's imports, a CUDA context each), each mostly
    waiting on other processes; started this way the two overlap (what each takes:
    docs/performance-history.md).  ``with`` waits for the cluster and yields the
    :class:`RunningCluster` (an error of the start comes out there, as from
    :func:`connect`), and shuts it down at the end; :meth:`close` does that too,
    once, whether or not ``with`` was entered.

    Parameters
    ----------
    on_ready : callable or None, default None
        Called on the start's thread with the :class:`RunningCluster` as soon as the
        cluster is up (the jobs start compiling their kernels on the workers there);
        what it returns is :attr:`after`, what it raises comes out of ``with``.
    **options
        :func:`connect`'s keyword arguments.
    """

    def __init__(self, on_ready: Callable[[RunningCluster], Any] | None = None,
                 **options: Any) -> None:
        self.asked = (time.perf_counter(), time.time())
        self._on_ready = on_ready
        self.after: Any = None
        # What a start here imports (a scheduler with its dashboard, dask-cuda), imported
        # first on this thread: two threads importing the same modules at once is how
        # imports deadlock.  A joined scheduler needs neither.
        if not (options.get("scheduler_address") or options.get("scheduler_file")):
            optional_import("distributed.dashboard.scheduler")
            if options.get("device", "auto") != "cpu" and is_installed("dask_cuda"):
                optional_import("dask_cuda")
        self._context = connect(**options)
        self._started: concurrent.futures.Future = concurrent.futures.Future()
        self._closed = False
        self.ready: tuple[float, float] | None = None
        self._thread = threading.Thread(target=self._start, name="mgpu-dask-cluster-start",
                                        daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            running = self._context.__enter__()
        except BaseException as exc:  # handed to the caller by __enter__
            self._started.set_exception(exc)
            return
        self.ready = (time.perf_counter(), time.time())
        try:
            if self._on_ready is not None:
                self.after = self._on_ready(running)
        except BaseException as exc:  # the cluster is up: shut it down with the error
            self._context.__exit__(None, None, None)
            self._started.set_exception(exc)
            return
        self._started.set_result(running)

    @property
    def seconds(self) -> float | None:
        """From the start asked for to the cluster ready (None before it is)."""
        return None if self.ready is None else self.ready[0] - self.asked[0]

    def __enter__(self) -> RunningCluster:
        return self._started.result()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Wait for the start to end (it is bounded by its own timeout), then shut the
        cluster down if it started."""
        if self._closed:
            return
        self._closed = True
        self._thread.join()
        if self._started.exception() is None:
            self._context.__exit__(None, None, None)
