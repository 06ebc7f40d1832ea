"""Worker plugins that keep the workers of a cluster we start quiet on the user's terminal.

The workers of a local cluster write their logs to the terminal the CLI runs
in (their standard error is the CLI's).  What they log while the cluster
shuts down is not for the user: a heartbeat that was in flight when a worker
closed its connections, for one, is logged by ``distributed`` as an error
with a traceback, and would come before the CLI's own last line.
"""

from __future__ import annotations

import logging
from typing import Any

from distributed import WorkerPlugin


class IgnoreInterrupt(WorkerPlugin):
    """Worker plugin for long-lived clusters: Ctrl-C in a terminal reaches every process of
    its group; the workers leave the shutdown to the cluster (no tracebacks from them)."""

    idempotent = True

    def setup(self, worker: Any) -> None:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)


class ClosingWorkerFilter(logging.Filter):
    """Drops every ``distributed`` log record of a worker from the moment it starts closing.

    Parameters
    ----------
    worker : distributed.Worker
        The worker whose status decides; records pass while it runs (a task's
        error, a lost scheduler mid-run) and are dropped once it is closing
        or closed.
    """

    def __init__(self, worker: Any) -> None:
        super().__init__("distributed")
        self.worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(getattr(self.worker, "status", None), "name", "running")
        return not status.startswith("clos")  # closing, closing_gracefully, closed


class QuietClose(WorkerPlugin):
    """Worker plugin: a worker that is shutting down writes nothing to the terminal.

    It puts a :class:`ClosingWorkerFilter` on the handlers of the
    ``distributed`` logger in the worker's process (where a local cluster's
    worker writes its log).  The filter stays when the plugin is torn down:
    a worker tears its plugins down early in its close, before its last
    heartbeat can fail.
    """

    name = "mgpu-dask-quiet-close"
    idempotent = True

    def setup(self, worker: Any) -> None:
        log = logging.getLogger("distributed")
        for handler in log.handlers or logging.getLogger().handlers:
            if not any(isinstance(f, ClosingWorkerFilter) for f in handler.filters):
                handler.addFilter(ClosingWorkerFilter(worker))
