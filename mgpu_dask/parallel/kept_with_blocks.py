"""What a worker made from the row blocks it holds, kept while the blocks are.

A worker often makes something from its blocks that the next call on the same
persisted blocks would make again: the int8 levels of logistic regression's
rows (a grid search, the CLI's warm repetitions), the shards a fit's leader
joined or keeps mapped (:mod:`mgpu_dask.logreg.joined`, :mod:`mgpu_dask.logreg.
kept_peers`) and the device L-BFGS it fitted them with, the query blocks a KNN
searcher joined from the workers sharing its GPU (:mod:`mgpu_dask.knn.joined`).
:func:`keep` keeps such a value under the Dask keys of the blocks it was made
from and :func:`kept_for` gives it back while the same block objects are still
held; :class:`ReleaseKept`, a worker plugin (:func:`ensure_release`), drops it
the moment one of those keys leaves the worker's memory, so no GPU memory
outlives the rows it was made from.  A value with a ``drop()`` method is told
when it goes (forgotten with its blocks, the least recently used past
:data:`KEPT`, another kept under its entry, the worker closing), not when a
caller takes it out (:func:`take`).  Runs on the workers.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Callable, Hashable, Sequence

from distributed.diagnostics.plugin import WorkerPlugin

from . import plugins

logger = logging.getLogger(__name__)

KEPT = 8
"""Values kept per worker at most (levels, joined shards or queries, mappings, fitted
device L-BFGS state), least recently used dropped first."""
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


def kept_or_made(blocks: Sequence[Any], keys: Sequence[Hashable] | None, tag: Hashable,
                 make: Callable[[], Any]) -> Any:
    """``make()``'s value for ``blocks`` (logistic regression: their int8 levels), or the
    one kept for these block objects.

    Parameters
    ----------
    blocks : sequence of arrays
        The row blocks, as this worker holds them.
    keys : sequence of Dask keys or None
        Their keys (None: not persisted blocks; nothing is kept).
    tag : hashable
        What else the value depends on (the levels' scale): part of its entry.
    make : callable
        Makes the value.
    """
    if keys is None:
        return make()
    entry = (tuple(keys), tag)
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
    """How many values this process keeps (for tests)."""
    return len(_KEPT)


class ReleaseKept(WorkerPlugin):
    """Worker plugin: a key that leaves memory takes what was made from it along."""

    name = "mgpu-dask-release-kept"
    idempotent = True

    def transition(self, key: Hashable, start: str, finish: str, **kwargs: Any) -> None:
        if start == "memory" and finish != "memory":
            forget(key)

    def teardown(self, worker: Any) -> None:
        with _LOCK:
            dropped = [value for _, value in _KEPT.values()]
            _KEPT.clear()
        _let_go(dropped)


def ensure_release(client: Any) -> bool:
    """Whether workers may keep what they make from their blocks: once :class:`ReleaseKept`
    is on every worker (asked once per client), which drops it with the blocks."""
    return plugins.register_once(client, ReleaseKept.name, ReleaseKept) is None
