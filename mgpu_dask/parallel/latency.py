"""Message batching between client, scheduler and workers, set for short round trips.

Dask batches the small messages of its long-lived connections: a message
sent within an *interval* of the previous one on the same connection waits
for the interval to pass.  The intervals are fixed in ``distributed``, one per
kind of connection (client, scheduler and worker each set their own; their
values are in docs/performance-history.md).  A warm predict is one task per GPU and
one gather, and its messages come in bursts (the previous result released,
then the new graph; a worker's old keys freed, then its new task), so each
hop tends to pay its full interval, which is long beside a warm predict's
computation (what it cost: docs/performance-history.md).

:func:`tighten` sets every interval of a client's cluster (the client's own
connection, the scheduler's connections to every worker and client, each
worker's connection to the scheduler, present and future) to
``mgpu-dask.cluster.batched-send-interval`` (0 ms: send at once; whatever
queues while a write is in flight still goes out as one batch).  Clusters
started by :func:`mgpu_dask.cluster.connect` get it; with a client of your own,
call ``tighten(client)``.
"""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin

from .. import config


def interval() -> float:
    """The configured batching interval in seconds."""
    return config.seconds("cluster.batched-send-interval")


class SchedulerIntervals(SchedulerPlugin):
    """Scheduler plugin: its batched connections to workers and clients use ``seconds``."""

    name = "mgpu-dask-batched-send-interval"
    idempotent = True  # every job registers it; the first one stays, no warning

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.scheduler: Any = None

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        for comm in [*scheduler.stream_comms.values(), *scheduler.client_comms.values()]:
            comm.interval = self.seconds

    def add_worker(self, scheduler: Any, worker: str) -> None:
        comm = scheduler.stream_comms.get(worker)  # made just before the plugins are called
        if comm is not None:
            comm.interval = self.seconds

    def add_client(self, scheduler: Any, client: str) -> None:
        # The scheduler makes the client's connection just after calling this hook,
        # before it next yields to the event loop: set it from the loop.
        scheduler.loop.add_callback(self._set_client, scheduler, client)

    def _set_client(self, scheduler: Any, client: str) -> None:
        comm = scheduler.client_comms.get(client)
        if comm is not None:
            comm.interval = self.seconds


class WorkerInterval(WorkerPlugin):
    """Worker plugin: the worker's batched connection to the scheduler uses ``seconds``."""

    name = "mgpu-dask-batched-send-interval"
    idempotent = True

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def setup(self, worker: Any) -> None:
        worker.batched_stream.interval = self.seconds


def tighten(client: Any, seconds: float | None = None) -> str | None:
    """Set every batched-send interval of ``client``'s cluster.

    Parameters
    ----------
    client : distributed.Client
    seconds : float or None
        The interval; ``mgpu-dask.cluster.batched-send-interval`` when None.

    Returns
    -------
    str or None
        None when every interval is set; else why the scheduler's and workers'
        were not (they could not load the plugin: mgpu_dask missing there, say),
        in one line.  The client's own connection is set either way.
    """
    seconds = interval() if seconds is None else float(seconds)
    comm = getattr(client, "scheduler_comm", None)
    if comm is not None and hasattr(comm, "interval"):
        comm.interval = seconds
    try:
        client.register_plugin(SchedulerIntervals(seconds))
        client.register_plugin(WorkerInterval(seconds))
    except Exception as exc:  # the scheduler or a worker could not unpickle the plugin
        return (f"Dask's message batching stays at its defaults on this cluster (our plugin "
                f"did not load there: {type(exc).__name__}: {exc}); round trips are slower")
    return None
