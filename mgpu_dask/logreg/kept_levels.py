"""A holder's int8 levels of its row blocks, kept while the blocks are.

Every single-host fit on GPU rows converts each holder's blocks into the int8
products' levels (:func:`mgpu_dask.kernels.logreg.int8.levels`) before it
exports them, and a later fit on the same persisted blocks (a grid search, the
CLI's warm repetitions) would convert them again.  :func:`levels_of` keeps the
levels of the blocks under their Dask keys and gives them back while the same
block objects are still held; :class:`ReleaseLevels`, a worker plugin, drops
them the moment one of those keys leaves the worker's memory, so no GPU memory
outlives the rows it was made from.  Levels are made in allocations of their
own (``peer_views.dedicated``), which serve the leader in place and a peer
through CUDA IPC alike.  A leader keeps the shards it joined (:mod:`.joined`) here
too, under every block's key, the device L-BFGS it fitted its own rows with
(:func:`.solvers.fit_on_device`), and the shards of other GPUs it keeps mapped
(:mod:`.kept_peers`).  A value with a ``drop()`` method is told when it goes
(forgotten with its blocks, the least recently used past :data:`KEPT`, another
kept under its entry, the worker closing), not when a fit takes it out (:func:`take`).
Runs on the workers.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Callable, Hashable, Sequence

from distributed.diagnostics.plugin import WorkerPlugin

logger = logging.getLogger(__name__)

KEPT = 6
"""Sets of levels (and joined shards, :mod:`.joined`, and fitted device L-BFGS state)
kept per worker at most, least recently used dropped first."""
_KEPT: "collections.OrderedDict[tuple, tuple[list[Any], Any]]" = collections.OrderedDict()
_LOCK = threading.Lock()


MISSING = object()
"""What :func:`kept_for` returns where nothing is kept."""


def _let_go(values: list[Any]) -> None:
    """Tell the values that were dropped (outside the lock: dropping may message workers)."""
    for value in values:
        drop = getattr(value, "drop", None)
        if drop is not None:
            try:
                drop()
            except Exception as exc:  # a worker closing; what it held goes with the process
                logger.warning("could not let go of a kept value: %s", exc)


def _held(blocks: Sequence[Any], entry: tuple) -> bool:
    """Whether something is kept under ``entry`` for these very block objects (under
    the lock)."""
    kept = _KEPT.get(entry)
    return kept is not None and len(kept[0]) == len(blocks) and all(
        a is b for a, b in zip(kept[0], blocks))


def kept_for(blocks: Sequence[Any], entry: tuple) -> Any:
    """What is kept under ``entry`` (its first item: the Dask keys it was made from) for
    these very block objects, else ``MISSING``."""
    with _LOCK:
        if _held(blocks, entry):
            _KEPT.move_to_end(entry)
            return _KEPT[entry][1]
    return MISSING


def take(blocks: Sequence[Any], entry: tuple) -> Any:
    """:func:`kept_for`, taken out (a value one fit at a time may use: it is kept again
    after); ``MISSING`` where nothing is kept for these block objects."""
    with _LOCK:
        if _held(blocks, entry):
            return _KEPT.pop(entry)[1]
    return MISSING


def keep(blocks: Sequence[Any], entry: tuple, value: Any) -> None:
    """Keep ``value`` under ``entry`` (its first item: a tuple of the Dask keys it was made
    from; it goes when one of them leaves this worker's memory) for these block objects."""
    dropped = []
    with _LOCK:
        former = _KEPT.get(entry)
        if former is not None and former[1] is not value:
            dropped.append(former[1])
        _KEPT[entry] = (list(blocks), value)
        _KEPT.move_to_end(entry)
        while len(_KEPT) > KEPT:
            dropped.append(_KEPT.popitem(last=False)[1][1])
    _let_go(dropped)


def levels_of(blocks: Sequence[Any], keys: Sequence[Hashable] | None, scale: float | None,
              make: Callable[[], Any]) -> Any:
    """``make()``'s levels of ``blocks``, or the ones kept for these block objects.

    Parameters
    ----------
    blocks : sequence of arrays
        The row blocks, as this worker holds them.
    keys : sequence of Dask keys or None
        Their keys (None: not persisted blocks; nothing is kept).
    scale : float or None
        The scale the levels are made for (part of what is kept).
    make : callable
        Makes the levels (or None where the rows are not levels).
    """
    if keys is None:
        return make()
    entry = (tuple(keys), scale)
    made = kept_for(blocks, entry)
    if made is MISSING:
        made = make()
        keep(blocks, entry, made)
    return made


def forget(key: Hashable) -> None:
    """Drop everything kept that was made from the block under ``key``."""
    with _LOCK:
        dropped = [_KEPT.pop(entry)[1] for entry in [e for e in _KEPT if key in e[0]]]
    _let_go(dropped)


def kept() -> int:
    """How many sets of levels this process keeps (for tests)."""
    return len(_KEPT)


class ReleaseLevels(WorkerPlugin):
    """Worker plugin: a key that leaves memory takes the levels made from it along."""

    name = "mgpu-dask-release-levels"
    idempotent = True

    def transition(self, key: Hashable, start: str, finish: str, **kwargs: Any) -> None:
        if start == "memory" and finish != "memory":
            forget(key)

    def teardown(self, worker: Any) -> None:
        with _LOCK:
            dropped = [value for _, value in _KEPT.values()]
            _KEPT.clear()
        _let_go(dropped)
