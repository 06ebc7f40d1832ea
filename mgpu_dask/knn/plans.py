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
on the local scheduler.  What each task runs is :mod:`.blocks`'s; host predictions
are asked of the workers straight where they can be (:mod:`.straight`).
"""

from __future__ import annotations

import functools
from typing import Any

import dask.array as da
import numpy as np
from distributed import Client

from ..data.sharding import meta_for
from ..parallel import placement
from ..parallel.placement import Pinned
from . import blocks, straight
from .layout import TrainLayout, placed_rows


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


def candidates(Q: da.Array, layout: TrainLayout, k: int, *, margin: int | None,
               tile_bytes: int | None, client: Client | None, timeout: float,
               vote: tuple | None = None) -> da.Array:
    """Packed ``(m, k, 3)`` candidates for every query row, under either plan.

    With ``vote=(n_classes, weights, classes, host)`` the last task of every
    query block votes and the result is the predictions (``classes[code]``
    where ``classes`` is given; NumPy when ``host``).  With a client the
    result is persisted (the work is under way); without one it is lazy.
    Host predictions are asked of the workers straight where they can be
    (:func:`.straight.predict`: no task, and the predictions come back with the
    answer); tasks otherwise.
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
            done = straight.predict(client, name, layout, queries, where, opts, vote,
                                    chunks, meta, timeout,
                                    row_bytes=Q.dtype.itemsize * int(Q.shape[1]))
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


def _replicate_tasks(layout: TrainLayout, qref: list, where: list, out: list, name: str,
                     opts: dict, vote: tuple | None) -> list[Pinned]:
    fn = functools.partial(blocks.replicated_block, vote=vote, **opts)
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
            fn = functools.partial(blocks.sharded_block, offset=int(layout.offsets[p]), **opts)
            key = (f"{name}-local", p, i) if len(layout.X) > 1 else out[i]
            # the holder's own search reads the block under the send's key as well: it
            # starts once the block is on its way, not before (a worker's tasks that are
            # ready at once start in the order they arrive, and the others would wait a
            # whole search for the block)
            args = (layout.ref("X", p), layout.ref("y", p), visitor)
            if len(layout.X) == 1 and vote is not None:
                tasks.append(Pinned((f"{name}-local", p, i), (fn, *args), layout.workers[p]))
                tasks.append(Pinned(key, (functools.partial(blocks.vote_block, vote=vote),
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
                fn = functools.partial(blocks.merge_blocks, vote=vote if last else None)
                tasks.append(Pinned(key, (fn, a, b), at))
                merged.append((key, at))
            level = merged
    return tasks


def vote_predictions(client: Client | None, cand: da.Array, n_classes: int, weights: str,
                     classes: np.ndarray | None, device: str) -> da.Array:
    """Predicted labels (``classes[argmax]``) per query row, voted where each block is."""
    dtype = classes.dtype if classes is not None else np.int32
    return placement.map_blocks(client, blocks.vote_pred, cand, n_classes, weights, classes,
                                name=placement.fresh_name("knn-vote"), chunks=(cand.chunks[0],),
                                meta=meta_for(device, 1, dtype))


def vote_probabilities(client: Client | None, cand: da.Array, n_classes: int, weights: str,
                       device: str) -> da.Array:
    return placement.map_blocks(client, blocks.vote_proba, cand, n_classes, weights,
                                name=placement.fresh_name("knn-proba"),
                                chunks=(cand.chunks[0], (n_classes,)),
                                meta=meta_for(device, 2, np.float64))
