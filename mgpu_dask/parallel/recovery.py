"""Recovery of pinned tasks whose worker is gone: a scheduler plugin.

A strictly restricted task whose worker left the cluster waits in the
scheduler's ``no-worker`` state for that worker forever.  :class:`PinRecovery`
drops the restriction of our pinned tasks (marked by the annotation
:data:`PIN`) when they get there, so a lost
worker's shards and tasks are rebuilt elsewhere, by their inputs.

It also tells the clients which worker left (an event on the topic
:data:`LOST`): what a client remembers of where blocks are
(:func:`on_loss` callbacks) forgets that worker before any block rebuilt
elsewhere is reported finished.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, Hashable

from distributed.diagnostics.plugin import SchedulerPlugin

from . import plugins

Key = Hashable

PIN = "mgpu-dask-pinned"
"""The task annotation that marks our pinned tasks on the scheduler."""

LOST = "mgpu-dask-lost-worker"
"""The event topic on which :class:`PinRecovery` names each worker that left."""


class PinRecovery(SchedulerPlugin):
    """Scheduler plugin: a pinned task whose worker is gone may run anywhere.

    A strictly restricted task whose worker left the cluster waits in the
    scheduler's ``no-worker`` state for that worker forever.  When one of ours
    (marked by the ``mgpu-dask-pinned`` annotation) gets there, its restriction
    is dropped and it is scheduled again, by its inputs, on a live worker.
    """

    name = "mgpu-dask-pin-recovery"
    idempotent = True  # one per scheduler serves every job and client on it

    def __init__(self) -> None:
        self.scheduler: Any = None
        self.unpinned = 0

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def transition(self, key: Key, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish != "no-worker" or self.scheduler is None:
            return
        ts = self.scheduler.tasks.get(key)
        if ts is None or not (ts.annotations or {}).get(PIN):
            return
        ts.worker_restrictions = None
        ts.loose_restrictions = False
        self.unpinned += 1
        self.scheduler.loop.add_callback(self._retry, key)

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
        # Called after the worker's keys were transitioned: on each client's stream
        # the event follows their lost-data messages and precedes any rebuilt result.
        scheduler.log_event(LOST, {"worker": worker})

    def _retry(self, key: Key) -> None:
        ts = self.scheduler.tasks.get(key)
        if ts is not None and ts.state == "no-worker" and self.scheduler.running:
            self.scheduler.transitions({key: "processing"},
                                       stimulus_id=f"mgpu-dask-unpin-{time.time()}")


_FORGETTERS: list[Callable[[str, str], None]] = []
_LOSSES: dict[str, int] = {}  # scheduler address -> workers this process heard leave


def losses(client: Any) -> int:
    """How many workers this process has heard leave ``client``'s cluster (installed by
    :func:`ensure_recovery`): a block pinned before and finished after, with no change in
    between, is where it was pinned."""
    return _LOSSES.get(client.scheduler.address, 0)


def on_loss(forget: Callable[[str, str], None]) -> Callable[[str, str], None]:
    """Have ``forget(scheduler address, worker address)`` called on the client whenever a
    worker leaves a cluster whose client :func:`ensure_recovery` installed the plugin for
    (a decorator: returns ``forget``)."""
    _FORGETTERS.append(forget)
    return forget


def _lost(scheduler: str, event: tuple[float, dict[str, Any]]) -> None:
    _LOSSES[scheduler] = _LOSSES.get(scheduler, 0) + 1
    for forget in _FORGETTERS:
        forget(scheduler, event[1]["worker"])


def ensure_recovery(client: Any) -> bool:
    """Install :class:`PinRecovery` on the client's scheduler once, and have this client told
    of every worker that leaves (:func:`on_loss`); False where it cannot be
    (:func:`recovery_note` then says why).

    It cannot be where the scheduler's Python lacks mgpu_dask; pinned graphs
    are then submitted with loose restrictions (still never root-ish), and
    where blocks are is asked of the scheduler each time.
    """
    def make() -> PinRecovery:
        plugin = PinRecovery()
        client.subscribe_topic(LOST, functools.partial(_lost, client.scheduler.address))
        return plugin

    return plugins.register_once(client, PinRecovery.name, make) is None


def recovery_note(client: Any) -> str | None:
    """Why pinned tasks run with loose placement on ``client``'s cluster (None: they do
    not, or nothing was pinned yet)."""
    why = plugins.refused(client, PinRecovery.name)
    return None if why is None else (
        f"our recovery plugin did not load on the scheduler ({why}): block tasks run with "
        "loose placement, so a shard can be copied to another worker")
