"""What a KNN predict runs on a worker for one query block: the search against a block of
training rows, the merge of shards' candidates and the vote.

:mod:`.plans` lays these out as Dask tasks, and :mod:`.straight` asks the workers
for them straight (the shard holders' exchange: :mod:`.exchange`); either way a
block's arithmetic is the same, so are the bits.
This module runs on the workers: it imports no scikit-learn.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ..exceptions import DataError
from ..kernels import knn as kernels
from ..kernels.allocator import pooled
from ..kernels.launch import array_module, finished


def _out_of_memory(exc: BaseException, rows: int, n: int) -> DataError:
    return DataError(f"GPU out of memory on a worker while comparing {rows} queries with {n} "
                     "training rows; lower --memory-budget (so the training set is sharded), "
                     f"lower block_bytes, or add GPUs ({type(exc).__name__})")


def guarded(fn: Any, Qb: Any, train: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a block function; a CUDA out-of-memory or unfit queries become one clear error."""
    try:
        return fn(Qb, train, *args, **kwargs)
    except MemoryError as exc:
        raise _out_of_memory(exc, Qb.shape[0], train.shape[0]) from None
    except ValueError as exc:  # queries that the prepared training rows cannot take
        raise DataError(str(exc)) from None
    except Exception as exc:
        if type(exc).__name__ == "OutOfMemoryError":  # cupy.cuda.memory.OutOfMemoryError
            raise _out_of_memory(exc, Qb.shape[0], train.shape[0]) from None
        raise


RAN: dict[str, Any] = {}
"""What the searches in this process ran, for :func:`what_ran`: which search (the fused
kernel's build or the tile loop), whether the tile loop was one CUDA graph, and why not;
whether the kernels had their fast launch; the most query blocks searched as one."""


TIER_ROWS = ("rows_split", "rows_recomputed")
"""Query rows that went on past the first search (``kernels.knn.local_candidates``)."""


def _searched(stats: dict[str, Any], gpu: bool) -> None:
    if stats.get("search"):
        RAN.setdefault("searches", set()).add(stats["search"])
    for key in TIER_ROWS:
        RAN[key] = RAN.get(key, 0) + int(stats.get(key, 0))
    if not gpu:
        return
    RAN["graph"] = RAN.get("graph", True) and bool(stats.get("graph"))
    for key in ("graph_note", "launch_note"):
        if stats.get(key):
            RAN.setdefault("notes", set()).add(stats[key])


def what_ran() -> dict[str, Any]:
    """Run on a worker: which searches it ran, whether their tile loops ran as CUDA graphs,
    the notes of what fell back (the graph, the kernels' fast launch), the most query
    blocks it searched as one (:mod:`.joined`; 0: none), and how many query rows went on
    to the three-part product and float64 (:data:`TIER_ROWS`)."""
    return {"graph": RAN.get("graph"), "notes": sorted(RAN.get("notes", ())),
            "searches": sorted(RAN.get("searches", ())), "joined": RAN.get("joined", 0),
            **{key: RAN.get(key, 0) for key in TIER_ROWS}}


_INDEXES: "OrderedDict[tuple, Any]" = OrderedDict()
_INDEXES_LOCK = threading.Lock()
_INDEXES_KEPT = 8


def row_index(xp: Any, n: int, offset: int) -> Any:
    """The global indices of a block's ``n`` training rows that start at ``offset``
    (read only): made once per size, offset and device and kept, the eight most recently
    used, since every search of a training block asks for the same ones, and making them
    is GPU work queued ahead of the search."""
    device = xp.cuda.runtime.getDevice() if xp is not np else None
    key = (xp.__name__, device, n, offset)
    with _INDEXES_LOCK:
        index = _INDEXES.pop(key, None)
        if index is None:
            index = xp.arange(offset, offset + n, dtype=np.int64)
        _INDEXES[key] = index  # most recently used last
        while len(_INDEXES) > _INDEXES_KEPT:
            _INDEXES.popitem(last=False)
    return index


@pooled()
def search(Qb: Any, train: Any, yb: Any, offset: int, k: int, margin: int | None,
            tile_bytes: int | None) -> Any:
    xp = array_module(train.norms)
    Qb = xp.asarray(Qb)  # rows with NaN: local_candidates' ValueError, made a DataError
    index = row_index(xp, train.n, offset)
    stats: dict[str, Any] = {}
    cand = guarded(kernels.local_candidates, Qb, train, yb, index, k, margin=margin,
                    tile_bytes=tile_bytes, stats=stats)
    _searched(stats, xp is not np)
    return cand


def replicated_block(Qb: Any, train: Any, yb: Any, k: int, margin: int | None,
                     tile_bytes: int | None, vote: tuple | None = None) -> Any:
    cand = search(Qb, train, yb, 0, k, margin, tile_bytes)
    if vote is not None:  # predict in the same task: one task per query block
        return vote_pred(cand, *vote)
    return finished(cand)


def sharded_block(train: Any, yb: Any, Qb: Any, offset: int, k: int, margin: int | None,
                   tile_bytes: int | None) -> Any:
    return finished(search(Qb, train, yb, offset, k, margin, tile_bytes))


def merge_blocks(a: Any, b: Any, vote: tuple | None = None) -> Any:
    merged = kernels.merge(a, b)
    return vote_pred(merged, *vote) if vote is not None else finished(merged)


def shards_block(Qb: Any, *held: Any, offsets: tuple[int, ...], vote: tuple, k: int,
                  margin: int | None, tile_bytes: int | None) -> Any:
    """A query block's predictions over every training shard held here (``held``: each
    shard's rows and labels in turn): each shard's search, the pairwise tree of merges
    that :func:`.plans.candidates` builds, and the vote."""
    return vote_pred(merged([search(Qb, held[2 * p], held[2 * p + 1], offset, k, margin, tile_bytes)
                             for p, offset in enumerate(offsets)]), *vote)


@pooled()
def merged(level: list[Any]) -> Any:
    """One candidate set from each training shard's (in shard order), merged by the pairwise
    tree that :func:`.plans.candidates` builds of tasks: the same bits either way."""
    while len(level) > 1:
        level = [kernels.merge(level[j], level[j + 1]) if j + 1 < len(level) else level[j]
                 for j in range(0, len(level), 2)]
    return level[0]


@pooled()
def vote_pred(cand: Any, n_classes: int, weights: str, classes: np.ndarray | None,
               host: bool = False) -> Any:
    _, pred = kernels.vote(cand, n_classes, weights)
    if host and hasattr(pred, "get"):
        pred = pred.get()  # the classes then looked up here: no copy of them to the GPU
    if classes is not None:
        pred = array_module(pred).asarray(classes)[pred]
    return pred if host else finished(pred)


def vote_block(cand: Any, vote: tuple) -> Any:
    return vote_pred(cand, *vote)


@pooled()
def vote_proba(cand: Any, n_classes: int, weights: str) -> Any:
    return kernels.vote(cand, n_classes, weights)[0]


@pooled()
def merged_vote(*candidates: np.ndarray, vote: tuple, gpu: bool) -> Any:
    """A query block's predictions from each training shard's candidates (host arrays, in
    shard order), merged and voted on this worker's GPU where ``gpu``, as the tasks do."""
    if gpu:
        import cupy

        candidates = tuple(cupy.asarray(c) for c in candidates)
    return vote_pred(merged(list(candidates)), *vote)
