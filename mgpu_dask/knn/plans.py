"""Dask graphs of a KNN search over placed training rows (:mod:`.layout`), under either plan.

- ``replicate``: each query block is searched on the worker that holds it,
  against that worker's copy, with no communication afterwards.
- ``shard``: every training shard's holder finds its local top-k for every
  query block (which visits it under a throwaway key, never as a replica of
  the query shard, and leaves before its holder's own search) and a pairwise
  tree merges them, on the block's holder where it can, so the training set
  may be larger than any one GPU.

:func:`candidates` is the search; with ``vote`` its last task per query block
votes too (one task per block: a prediction).  :func:`vote_predictions` and
:func:`vote_probabilities` vote on candidates where they live.  Every block
task is pinned to its worker; with a distributed client the graphs are
submitted at once and the results come back persisted, without one they run
on the local scheduler.  This module runs on the workers too: it imports no
scikit-learn.
"""

from __future__ import annotations

import functools
from typing import Any

import dask.array as da
import numpy as np
from distributed import Client

from ..data.sharding import meta_for
from ..exceptions import DataError
from ..kernels import knn as kernels
from ..kernels.launch import all_entries_finite, array_module, finished
from ..parallel import direct, placement
from ..parallel.placement import Pinned
from .layout import TrainLayout, placed_rows


def _check_queries(Qb: Any, xp: Any) -> Any:
    Qb = xp.asarray(Qb)
    if not np.issubdtype(Qb.dtype, np.integer) and not all_entries_finite(Qb):
        raise DataError("the query rows contain NaN or infinity; clean or impute them first")
    return Qb


def _out_of_memory(exc: BaseException, rows: int, n: int) -> DataError:
    return DataError(f"GPU out of memory on a worker while comparing {rows} queries with {n} "
                     "training rows; lower --memory-budget (so the training set is sharded), "
                     f"lower block_bytes, or add GPUs ({type(exc).__name__})")


def _guarded(fn: Any, Qb: Any, train: Any, *args: Any, **kwargs: Any) -> Any:
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
whether the kernels had their fast launch."""


def _searched(stats: dict[str, Any], gpu: bool) -> None:
    if stats.get("search"):
        RAN.setdefault("searches", set()).add(stats["search"])
    if not gpu:
        return
    RAN["graph"] = RAN.get("graph", True) and bool(stats.get("graph"))
    for key in ("graph_note", "launch_note"):
        if stats.get(key):
            RAN.setdefault("notes", set()).add(stats[key])


def what_ran() -> dict[str, Any]:
    """Run on a worker: which searches it ran, whether their tile loops ran as CUDA graphs,
    and the notes of what fell back (the graph, the kernels' fast launch)."""
    return {"graph": RAN.get("graph"), "notes": sorted(RAN.get("notes", ())),
            "searches": sorted(RAN.get("searches", ()))}


def row_index(xp: Any, n: int, offset: int) -> Any:
    """The global indices of a block's ``n`` training rows that start at ``offset``."""
    return xp.arange(n, dtype=np.int64) + offset


def _search(Qb: Any, train: Any, yb: Any, offset: int, k: int, margin: int,
            tile_bytes: int | None) -> Any:
    xp = array_module(train.norms)
    Qb = _check_queries(Qb, xp)
    index = row_index(xp, train.n, offset)
    stats: dict[str, Any] = {}
    cand = _guarded(kernels.local_candidates, Qb, train, yb, index, k, margin=margin,
                    tile_bytes=tile_bytes, stats=stats)
    _searched(stats, xp is not np)
    return cand


def _replicated_block(Qb: Any, train: Any, yb: Any, k: int, margin: int, tile_bytes: int | None,
                      vote: tuple | None = None) -> Any:
    cand = _search(Qb, train, yb, 0, k, margin, tile_bytes)
    if vote is not None:  # predict in the same task: one task per query block
        return _vote_pred(cand, *vote)
    return finished(cand)


def _sharded_block(train: Any, yb: Any, Qb: Any, offset: int, k: int, margin: int,
                   tile_bytes: int | None) -> Any:
    return finished(_search(Qb, train, yb, offset, k, margin, tile_bytes))


def _merge_blocks(a: Any, b: Any, vote: tuple | None = None) -> Any:
    merged = kernels.merge(a, b)
    return _vote_pred(merged, *vote) if vote is not None else finished(merged)


def _query_blocks(client: Client | None, Q: da.Array,
                  timeout: float) -> tuple[da.Array, list[Any], list[str | None]]:
    """Each query row block as a graph argument (key or local value) and its holder."""
    if client is None:
        keys = Q.__dask_keys__()
        while keys and isinstance(keys[0], list):
            keys = [k[0] for k in keys]
        return Q, keys, [None] * len(keys)
    Q, futures, where = placed_rows(client, Q, timeout, remembered=True)  # the same queries, warm
    return Q, futures, where


def candidates(Q: da.Array, layout: TrainLayout, k: int, *, margin: int,
               tile_bytes: int | None, client: Client | None, timeout: float,
               vote: tuple | None = None) -> da.Array:
    """Packed ``(m, k, 3)`` candidates for every query row, under either plan.

    With ``vote=(n_classes, weights, classes, host)`` the last task of every
    query block votes and the result is the predictions (``classes[code]``
    where ``classes`` is given; NumPy when ``host``).  With a client the
    result is persisted (the work is under way); without one it is lazy.
    Host predictions whose query blocks need not travel -- the replicate plan's,
    every block beside a copy, and the shard plan's where one worker holds
    every block and shard -- are asked of their workers straight
    (:func:`.placement.run_straight`: no task, and the predictions come back
    with the answer).
    """
    Q, queries, where = _query_blocks(client, Q, timeout)
    loose = client is not None and not placement.ensure_recovery(client)
    opts = dict(k=k, margin=margin, tile_bytes=tile_bytes)
    name = placement.fresh_name("knn-predict" if vote is not None else "knn-candidates")
    if vote is not None:
        dtype = vote[2].dtype if vote[2] is not None else np.int32
        meta = np.empty(0, dtype) if vote[3] else meta_for(layout.device, 1, dtype)
        chunks: tuple = (Q.chunks[0],)
        if vote[3] and client is not None:
            done = _predict_straight(client, name, layout, queries, where, opts, vote,
                                     chunks, meta, timeout)
            if done is not None:
                return done
    else:
        meta = meta_for(layout.device, 3, np.float64)
        chunks = (Q.chunks[0], (k,), (3,))
    out = [(name, i) if vote is not None else (name, i, 0, 0) for i in range(len(queries))]
    qref = [q.key if hasattr(q, "status") else q for q in queries]
    if layout.plan == "replicate":
        tasks = _replicate_tasks(layout, qref, where, out, name, opts, vote)
    else:
        tasks = _shard_tasks(layout, qref, where, out, name, opts, vote)
    inputs = [q for q in queries if hasattr(q, "status")] + [
        f for field in (layout.X, layout.y) for f in field if hasattr(f, "status")]
    result = placement.pinned_array(name, tasks, chunks=chunks, meta=meta,
                                    inputs=inputs if client is not None else [Q], loose=loose)
    return result if client is None else placement.persist(client, result)


def _predict_straight(client: Client, name: str, layout: TrainLayout, queries: list,
                      where: list, opts: dict, vote: tuple, chunks: tuple, meta: Any,
                      timeout: float) -> da.Array | None:
    """Host predictions of every query block, asked of its holder straight; None where a
    block has to travel or candidates to cross between workers (tasks), or the workers
    could not be asked.

    Under the replicate plan each block's holder searches its own copy.  Under the
    shard plan that is so only where one worker holds the query block and every
    training shard (one worker: a training set made there, as deformed MNIST's
    rows are); it then searches each shard and merges them in the order of the
    task path's tree (:func:`_shard_tasks`), with no scheduler between."""
    if not all(hasattr(q, "key") for q in queries):
        return None
    if layout.plan == "replicate":
        copies = {w: j for j, w in enumerate(layout.workers)}
        if not all(w in copies for w in where):
            return None
        fn = functools.partial(_replicated_block, vote=vote, **opts)
        calls = [(w, fn, (direct.Held(q.key), direct.Held(layout.ref("X", copies[w])),
                          direct.Held(layout.ref("y", copies[w]))))
                 for q, w in zip(queries, where)]
    else:
        if not layout.workers or any(w is None or set(layout.workers) != {w} for w in where):
            return None
        fn = functools.partial(_shards_block, offsets=tuple(int(o) for o in layout.offsets),
                               vote=vote, **opts)
        shards = [direct.Held(layout.ref(field, p)) for p in range(len(layout.X))
                  for field in ("X", "y")]
        calls = [(w, fn, (direct.Held(q.key), *shards)) for q, w in zip(queries, where)]
    return placement.run_straight(client, name, calls, chunks, meta, timeout)


def _shards_block(Qb: Any, *held: Any, offsets: tuple[int, ...], vote: tuple, k: int,
                  margin: int, tile_bytes: int | None) -> Any:
    """A query block's predictions over every training shard held here (``held``: each
    shard's rows and labels in turn): each shard's search, the pairwise tree of merges
    that :func:`_shard_tasks` builds, and the vote."""
    level = [_search(Qb, held[2 * p], held[2 * p + 1], offset, k, margin, tile_bytes)
             for p, offset in enumerate(offsets)]
    while len(level) > 1:
        level = [kernels.merge(level[j], level[j + 1]) if j + 1 < len(level) else level[j]
                 for j in range(0, len(level), 2)]
    return _vote_pred(level[0], *vote)


def _replicate_tasks(layout: TrainLayout, qref: list, where: list, out: list, name: str,
                     opts: dict, vote: tuple | None) -> list[Pinned]:
    fn = functools.partial(_replicated_block, vote=vote, **opts)
    copies = {w: j for j, w in enumerate(layout.workers)}
    tasks = []
    for i, (q, holder) in enumerate(zip(qref, where)):
        j = copies.get(holder)
        if j is None:  # no copy where this block lives: it travels to a worker that has one
            j = i % len(layout.workers)
            if holder is not None:
                tasks.append(Pinned((f"{name}-send", i), (placement.send, q), holder))
                q = (f"{name}-send", i)
        tasks.append(Pinned(out[i], (fn, q, layout.ref("X", j), layout.ref("y", j)),
                            layout.workers[j]))
    return tasks


def _shard_tasks(layout: TrainLayout, qref: list, where: list, out: list, name: str,
                 opts: dict, vote: tuple | None) -> list[Pinned]:
    tasks = []
    shards = range(len(layout.X))
    for i, (q, holder) in enumerate(zip(qref, where)):
        visitor = q
        if holder is not None and any(w != holder for w in layout.workers):
            visitor = (f"{name}-send", i)
            tasks.append(Pinned(visitor, (placement.send, q), holder))
        level = []
        for p in shards:
            fn = functools.partial(_sharded_block, offset=int(layout.offsets[p]), **opts)
            key = (f"{name}-local", p, i) if len(layout.X) > 1 else out[i]
            # the holder's own search reads the block under the send's key as well: it
            # starts once the block is on its way, not before (a worker's tasks that are
            # ready at once start in the order they arrive, and the others would wait a
            # whole search for the block)
            args = (layout.ref("X", p), layout.ref("y", p), visitor)
            if len(layout.X) == 1 and vote is not None:
                tasks.append(Pinned((f"{name}-local", p, i), (fn, *args), layout.workers[p]))
                tasks.append(Pinned(key, (functools.partial(_vote_block, vote=vote),
                                          (f"{name}-local", p, i)), layout.workers[p]))
            else:
                tasks.append(Pinned(key, (fn, *args), layout.workers[p]))
            level.append((key, layout.workers[p]))
        depth = 0
        while len(level) > 1:  # pairwise tree: log2(shards) rounds
            depth += 1
            merged = []
            for j in range(0, len(level), 2):
                if j + 1 == len(level):
                    merged.append(level[j])
                    continue
                (a, wa), (b, wb) = level[j], level[j + 1]
                # on the query block's holder where it is one of the two: the holder's
                # own search ran first, so its candidates wait there and only the other
                # worker's travel (on the left one's worker otherwise)
                at = wb if wb == holder else wa
                last = len(level) == 2
                key = out[i] if last else (f"{name}-merge", depth, j, i)
                fn = functools.partial(_merge_blocks, vote=vote if last else None)
                tasks.append(Pinned(key, (fn, a, b), at))
                merged.append((key, at))
            level = merged
    return tasks


def _vote_pred(cand: Any, n_classes: int, weights: str, classes: np.ndarray | None,
               host: bool = False) -> Any:
    _, pred = kernels.vote(cand, n_classes, weights)
    if classes is not None:
        pred = array_module(pred).asarray(classes)[pred]
    if host and hasattr(pred, "get"):
        return pred.get()
    return finished(pred)


def _vote_block(cand: Any, vote: tuple) -> Any:
    return _vote_pred(cand, *vote)


def _vote_proba(cand: Any, n_classes: int, weights: str) -> Any:
    return kernels.vote(cand, n_classes, weights)[0]


def vote_predictions(client: Client | None, cand: da.Array, n_classes: int, weights: str,
                     classes: np.ndarray | None, device: str) -> da.Array:
    """Predicted labels (``classes[argmax]``) per query row, voted where each block is."""
    dtype = classes.dtype if classes is not None else np.int32
    return placement.map_blocks(client, _vote_pred, cand, n_classes, weights, classes,
                                name=placement.fresh_name("knn-vote"), chunks=(cand.chunks[0],),
                                meta=meta_for(device, 1, dtype))


def vote_probabilities(client: Client | None, cand: da.Array, n_classes: int, weights: str,
                       device: str) -> da.Array:
    return placement.map_blocks(client, _vote_proba, cand, n_classes, weights,
                                name=placement.fresh_name("knn-proba"),
                                chunks=(cand.chunks[0], (n_classes,)),
                                meta=meta_for(device, 2, np.float64))
