"""Recovery of pinned tasks whose worker is gone: a scheduler plugin.

A strictly restricted task whose worker left the cluster waits in the
scheduler's ``no-worker`` state for that worker forever.  :class:`PinRecovery`
drops the restriction of our pinned tasks (marked by the annotation
:data:`PIN`) when they get there, so a lost
worker's shards and tasks are rebuilt elsewhere, by their inputs.
"""

from __future__ import annotations

import time
import weakref
from typing import Any, Hashable

from distributed.diagnostics.plugin import SchedulerPlugin

Key = Hashable

PIN = "mgpu-dask-pinned"
"""The task annotation that marks our pinned tasks on the scheduler."""


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

    def _retry(self, key: Key) -> None:
        ts = self.scheduler.tasks.get(key)
        if ts is not None and ts.state == "no-worker" and self.scheduler.running:
            self.scheduler.transitions({key: "processing"},
                                       stimulus_id=f"mgpu-dask-unpin-{time.time()}")


_RECOVERY: "weakref.WeakKeyDictionary[Any, str | None]" = weakref.WeakKeyDictionary()
"""Per client: None where :class:`PinRecovery` is installed, else why it is not."""


def ensure_recovery(client: Any) -> bool:
    """Install :class:`PinRecovery` on the client's scheduler once; False where it cannot be
    (:func:`recovery_note` then says why).

    It cannot be where the scheduler's Python lacks mgpu_dask; pinned graphs
    are then submitted with loose restrictions (still never root-ish).
    """
    try:
        return _RECOVERY[client] is None
    except (KeyError, TypeError):
        pass
    why = None
    try:
        client.register_plugin(PinRecovery())
    except Exception as exc:  # the scheduler could not unpickle the plugin
        why = (f"our recovery plugin did not load on the scheduler ({type(exc).__name__}: "
               f"{exc}): block tasks run with loose placement, so a shard can be copied to "
               "another worker")
    try:
        _RECOVERY[client] = why
    except TypeError:  # pragma: no cover - a client that cannot be weakly referenced
        pass
    return why is None


def recovery_note(client: Any) -> str | None:
    """Why pinned tasks run with loose placement on ``client``'s cluster (None: they do
    not, or nothing was pinned yet)."""
    try:
        return _RECOVERY.get(client)
    except TypeError:  # pragma: no cover
        return None
