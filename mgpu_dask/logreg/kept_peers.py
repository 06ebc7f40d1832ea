"""Shards on other GPUs, kept mapped by the leader between fits.

With one worker per GPU, the leader of a single-host fit maps the other
holders' exports (CUDA IPC) and evaluates each shard on its own GPU.  Made
for one fit, that costs every fit a message to each holder and back, the
mappings, a new device L-BFGS (buffers, bound launches, the iteration's
graph) and a first evaluation that touches the mapped memory anew, and at
the end another message to each holder to release its export.

Instead the leader keeps them: the mapped shards (:class:`Mapped`, with the
class indices made from their labels) under the keys of every shard's blocks
in :mod:`.kept_with_blocks`, beside its own blocks, and the device L-BFGS made for
them (:func:`.solvers.fit_on_device`); each holder keeps its export until the
leader tells it to release it.  A later fit on the same persisted rows with
the same labels (a grid search, warm repetitions) finds them (:func:`taken`)
and asks no holder for anything.  They go together: when a key of the
leader's own blocks leaves its memory, when more than ``kept_with_blocks.KEPT``
things are kept, or when the worker closes, the leader closes its mappings
and has the holders release their exports (:meth:`Mapped.drop`).  Dask keys
name their values, so a holder's blocks under the same keys hold the same
rows, and its export keeps its copy alive until released whatever becomes of
the blocks meanwhile.  A leader lost with a mapping kept leaves its holders'
exports to them until they close (their GPU memory, the size of their rows'
levels).  Runs on the workers.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from ..parallel import direct, kept_with_blocks, peer_views
from . import joined


def _entry(shards: list[dict[str, Any]], levels: bool, scale: float | None) -> tuple | None:
    """What mapped ``shards`` are kept under: every shard's block keys, in order, how their
    rows were exported, and which worker holds each; None where some shard's keys are
    not given (its holder does not keep levels with its blocks)."""
    keys: list[Any] = []
    where: list[str] = []
    for s in shards:
        own = "own rows" in s
        named = s.get("own keys") if own else (s["keys"] if s.get("keep") else None)
        if not named:
            return None
        keys.extend(named)
        where.append("" if own else s["address"])
    return (tuple(keys), "mapped", levels, scale, tuple(where))


class Mapped:
    """Shards of other processes mapped here and kept for the next fit of the same rows.

    Parameters
    ----------
    arrays : list of (rows, class indices)
        What the fit reads: each shard's rows (mapped, or the leader's own) and
        class indices, as :func:`.solvers.fit_on_device` takes them.
    mappings : contextlib.ExitStack
        Closes the mappings.
    labels : list
        The labels as each shard named them (what a later fit must name again).
    parts, classes
        The label values each shard held and the classes found from them (None,
        None where the labels came as class indices).
    holders : list of (address, token)
        The exports to release when this goes.
    worker
        This process's Dask worker (sends the releases); None: nothing to send.
    fit_under : (blocks, entry) or None
        Where the device L-BFGS made for ``arrays`` is kept; it reads the mappings,
        so it goes first.
    """

    def __init__(self, arrays: list[tuple[Any, Any]], mappings: contextlib.ExitStack,
                 labels: list[Any], parts: list[Any] | None, classes: np.ndarray | None,
                 holders: list[tuple[str, str]], worker: Any,
                 fit_under: tuple[list[Any], tuple] | None) -> None:
        self.arrays, self.mappings = arrays, mappings
        self.labels, self.parts, self.classes = labels, parts, classes
        self.holders, self.worker, self.fit_under = holders, worker, fit_under

    def drop(self) -> None:
        """Let go: the device L-BFGS made for these rows, the mappings, the holders'
        exports (asked, not waited for)."""
        if self.fit_under is not None:
            found = kept_with_blocks.take(*self.fit_under)
            if found is not kept_with_blocks.MISSING:
                found.drop()
        self.arrays.clear()
        self.mappings.close()
        if self.worker is not None:
            for address, token in self.holders:
                direct.from_worker(address, peer_views.release, token, worker=self.worker)
        self.holders = []


def this_worker(worker: Any = None) -> Any:
    """``worker``, else the Dask worker of this thread's task, else None."""
    if worker is not None:
        return worker
    try:
        from distributed import get_worker

        return get_worker()
    except ValueError:
        return None


def keep(shards: list[dict[str, Any]], levels: bool, scale: float | None, mapped: Mapped,
         worker: Any = None) -> None:
    """Keep ``mapped`` for the next fit of ``shards``; where that cannot be (some shard's
    keys not given, or the leader's own blocks no longer held by ``worker``), it is
    dropped at once.  Either way it is in the keeping of this module from now on."""
    entry = _entry(shards, levels, scale)
    blocks = joined.own_blocks(shards)
    own_keys = [k for s in shards if "own rows" in s for k in (s.get("own keys") or [])]
    data = getattr(worker, "data", None)
    if entry is None or (data is not None and any(k not in data for k in own_keys)):
        mapped.drop()
        return
    kept_with_blocks.keep(blocks, entry, mapped)


def taken(shards: list[dict[str, Any]], levels: bool, scale: float | None, discover: bool,
          declared: Any = None) -> Mapped | None:
    """The shards kept mapped for ``shards`` (same blocks on the same workers, exported the
    same way, same labels and classes: :func:`.joined.same_labels`), taken out for this
    fit (:func:`keep` them again after), or None.  Ones kept for the same blocks with
    other labels are dropped: the fit exports and maps them anew."""
    entry = _entry(shards, levels, scale)
    if entry is None:
        return None
    found = kept_with_blocks.take(joined.own_blocks(shards), entry)
    if found is kept_with_blocks.MISSING:
        return None
    if not joined.same_labels(shards, found.labels, found.parts, found.classes, discover,
                              declared):
        found.drop()
        return None
    return found
