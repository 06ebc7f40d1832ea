"""Results back to the client straight from the worker each was pinned to.

``Client.gather`` asks the scheduler who holds each key before it asks the
holders for the data: two round trips in a row after the task ends.  A pinned
task's result is where the task was pinned, so :func:`gather` asks that worker
directly and saves the first round trip.  It falls back to ``Client.gather`` for
whatever the worker does not have (the task was moved because its worker was
lost, say) and for failed tasks, whose errors ``Client.gather`` raises as usual.
The round trip saved is measured in ``docs/performance-history.md``.
"""

from __future__ import annotations

import collections
import functools
from typing import Any, Hashable, Sequence

from . import recovery

Key = Hashable

KEPT = 4096
"""The pins of this many most recent result keys are remembered (keys are fresh per call)."""
_PINNED_AT: "collections.OrderedDict[tuple[str, Key], str]" = collections.OrderedDict()


def remember(client: Any, where: dict[Key, str]) -> None:
    """Note the worker each of ``where``'s keys is pinned to, on ``client``'s cluster."""
    scheduler = client.scheduler.address
    for key, worker in where.items():
        _PINNED_AT[(scheduler, key)] = worker
    while len(_PINNED_AT) > KEPT:
        _PINNED_AT.popitem(last=False)


def pinned_where(array: Any) -> dict[Key, str]:
    """The pinned worker of each output key of a pinned dask array (empty if it has none)."""
    layer = array.__dask_graph__().layers.get(array.name)
    workers = (getattr(layer, "annotations", None) or {}).get("workers")
    if isinstance(workers, functools.partial) and workers.args and isinstance(workers.args[0], dict):
        return workers.args[0]
    return {}


def gather(client: Any, futures: Sequence[Any], timeout: float | None = None,
           where: Sequence[str | None] | None = None) -> list[Any]:
    """The results of ``futures``, in order, each fetched from the worker it was pinned to.

    Parameters
    ----------
    client : distributed.Client
    futures : sequence of Future
    timeout : float or None
        Seconds to wait in all; past it, TimeoutError (as ``Client.gather``'s).
    where : sequence of str or None, optional
        The worker each future should be on; by default the ones remembered for
        its key by :func:`remember` (persisted pinned arrays), else unknown.
    """
    futures = list(futures)
    scheduler = client.scheduler.address
    if where is None:
        where = [_PINNED_AT.get((scheduler, f.key)) for f in futures]
    if not futures or any(w is None for w in where) or not _may_reach(scheduler, where):
        return client.sync(client._gather, futures, callback_timeout=timeout)
    return client.sync(_gather_pinned, client, futures, list(where), callback_timeout=timeout)


async def _gather_pinned(client: Any, futures: list[Any], where: list[str]) -> list[Any]:
    from distributed.client import _wait
    from distributed.utils_comm import gather_from_workers

    await _wait(futures)
    data: dict[Key, Any] = {}
    if all(f.status == "finished" for f in futures) and await reachable(client, where):
        try:
            data, *_ = await gather_from_workers({f.key: [w] for f, w in zip(futures, where)},
                                                 rpc=client.rpc)
        except OSError:  # a worker that cannot be reached: the scheduler knows better
            data = {}
    rest = [f for f in futures if f.key not in data]
    if rest:  # moved, lost or failed: as Client.gather would (it raises a task's error)
        data.update(zip((f.key for f in rest), await client._gather(rest)))
    return [data[f.key] for f in futures]


_UNREACHABLE: set[tuple[str, str]] = set()
"""Workers (per scheduler) that left the cluster or refused a connection once: their results
are asked of the scheduler from then on (should the address answer again, that path still
has them)."""


@recovery.on_loss
def _unreachable(scheduler: str, worker: str) -> None:
    _UNREACHABLE.add((scheduler, worker))


CONNECT_SECONDS = 1.0
"""How long a pinned worker may take to accept a connection before the scheduler is asked
instead (Dask's own connect timeout, 30 s, would stall a gather on a worker that died)."""


def _may_reach(scheduler: str, where: Sequence[str]) -> bool:
    return not any((scheduler, w) in _UNREACHABLE for w in where)


async def reachable(client: Any, where: list[str]) -> bool:
    """Whether every worker in ``where`` accepts a connection within CONNECT_SECONDS (a
    pooled one is taken at once and put back for the gather); False at once for one that
    left the cluster or refused before."""
    if not _may_reach(client.scheduler.address, where):
        return False
    for address in set(where):
        try:
            comm = await client.rpc.connect(address, timeout=CONNECT_SECONDS)
        except (OSError, TimeoutError):
            _UNREACHABLE.add((client.scheduler.address, address))
            return False
        client.rpc.reuse(address, comm)
    return True

