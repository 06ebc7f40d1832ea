"""Dask graphs for the two KNN plans; no estimator state, no cluster creation.

- ``replicate``: the training set is copied once to every worker; each query
  block is searched on the worker that holds it, against that worker's copy,
  with no communication afterwards.
- ``shard``: the training set stays split over the workers; every training
  shard's holder finds its local top-k for every query block (which visits it
  under a throwaway key, never as a replica of the query shard) and a pairwise
  tree merges them, so the training set may be larger than any one GPU.

Every block task is pinned to its worker (``mgpu_dask.placement``); with a
distributed client the graphs are submitted at once and the results come back
persisted, without one they run on the local scheduler.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import dask.array as da
import numpy as np
from distributed import Client, futures_of, wait

from . import placement
from .data.shard import meta_for, shard, worker_addresses
from .exceptions import DataError
from .kernels import knn as kernels
from .kernels import knn_products as products
from .kernels._launch import all_entries_finite, array_module, finished
from .placement import Pinned


class TrainLayout(NamedTuple):
    plan: str                      # "replicate" or "shard"
    X: list[Any]                   # TrainBlocks: replicate, the copy on each worker; shard, each shard
    y: list[Any]                   # encoded labels (int32), one per entry of X
    workers: list[str | None]      # the holder of each entry (None on the local scheduler)
    offsets: list[int]             # global index of each entry's first row
    n_rows: int
    device: str                    # "gpu" or "cpu"
    keep: tuple = ()               # the persisted arrays behind the futures above

    def ref(self, field: str, j: int) -> Any:
        """Entry ``j`` of ``X`` or ``y`` as a graph argument (a key, or the value itself)."""
        value = getattr(self, field)[j]
        return value.key if hasattr(value, "key") and hasattr(value, "status") else value


class Prep(NamedTuple):
    """How the training rows are prepared on the workers (``knn_products.prepare_train``)."""

    precision: str
    eight_bit: bool
    shift: int
    method: str


def _to_device(block: Any, device: str, dtype: Any = None) -> Any:
    if device == "gpu":
        import cupy

        block = cupy.asarray(block)
    else:
        block = np.asarray(block)
    return block if dtype is None else block.astype(dtype, copy=False)


def _prepare(rows: Any, prep: Prep) -> Any:
    return products.prepare_train(rows, prep.precision, prep.eight_bit, prep.shift, prep.method)


def _prepare_host(rows: np.ndarray, device: str, prep: Prep) -> Any:
    return _prepare(_to_device(rows, device), prep)


def _prepare_stacked(blocks: list[Any], prep: Prep) -> Any:
    xp = array_module(blocks[0])
    return _prepare(blocks[0] if len(blocks) == 1 else xp.concatenate(blocks), prep)


def _local_layout(X: Any, y: Any, device: str, plan: str, prep: Prep) -> TrainLayout:
    """Without a distributed client: the training data in this process."""
    if isinstance(X, da.Array):
        blocks = list(da.compute(*X.to_delayed()[:, 0]))
    else:
        blocks = [X]  # NumPy, or CuPy on this process's GPU
    if plan == "replicate" and len(blocks) > 1:
        blocks = [array_module(blocks[0]).concatenate(blocks)]
    device = "gpu" if type(blocks[0]).__module__.startswith("cupy") else "cpu"
    labels = np.asarray(y.compute() if isinstance(y, da.Array) else y, dtype=np.int32)
    edges = np.cumsum([0] + [len(b) for b in blocks])
    return TrainLayout(plan, [_prepare(b, prep) for b in blocks],
                       [_to_device(labels[a:b], device) for a, b in zip(edges[:-1], edges[1:])],
                       [None] * len(blocks), edges[:-1].tolist(), int(edges[-1]), device)


def _placed(client: Client, X: da.Array, timeout: float,
            remembered: bool = False) -> tuple[da.Array, list, list]:
    """``X`` persisted (as it is, if it already is), its row futures and their holders."""
    found = placement.locate(client, X, remembered)
    if found is None:
        X = client.persist(X)
        wait(futures_of(X), timeout=timeout)
        found = placement.locate(client, X)
    return (X, *found)


def replicate_train(X: Any, y: np.ndarray, client: Client | None, device: str,
                    timeout: float, prep: Prep) -> TrainLayout:
    """One prepared copy of ``X`` and of ``y`` on every worker."""
    if client is None:
        return _local_layout(X, y, device, "replicate", prep)
    workers = worker_addresses(client)
    loose = not placement.ensure_recovery(client)
    name = placement.fresh_name("knn-train")
    n, d = int(X.shape[0]), int(X.shape[1])
    inputs: list[Any] = []
    tasks: list[Pinned] = []
    if isinstance(X, da.Array):
        # Each block leaves its holder under a throwaway key (``send``), is
        # stacked on every worker, and no shard of X gains a replica.
        X, futures, where = _placed(client, X.rechunk({1: -1}), timeout)
        inputs = futures
        sends = [(f"{name}-send", b) for b in range(len(futures))]
        tasks += [Pinned(key, (placement.send, f.key), w)
                  for key, f, w in zip(sends, futures, where)]
        stack = functools.partial(_prepare_stacked, prep=prep)
        tasks += [Pinned((name, j, 0), (stack, list(sends)), w) for j, w in enumerate(workers)]
    else:
        host = np.ascontiguousarray(X)
        upload = functools.partial(_prepare_host, device=device, prep=prep)
        tasks += [Pinned((name, j, 0), (upload, host), w) for j, w in enumerate(workers)]
    copies = placement.pinned_array(name, tasks, chunks=((n,) * len(workers), (d,)),
                                    meta=meta_for(device, 2, np.float32), inputs=inputs,
                                    loose=loose)
    labels = placement.pinned_array(
        f"{name}-labels", [Pinned((f"{name}-labels", j), (_to_device, y, device, np.int32), w)
                           for j, w in enumerate(workers)],
        chunks=((n,) * len(workers),), meta=meta_for(device, 1, np.int32), loose=loose)
    with placement.carrying_data():  # NumPy rows travel in the graph: a lost copy is rebuilt
        copies, labels = client.persist([copies, labels], optimize_graph=False)
    _placed_or_raise(futures_of([copies, labels]), n, timeout)
    xs, ys = placement.row_futures(copies), placement.row_futures(labels)
    return TrainLayout("replicate", xs, ys, placement.holders(client, xs), [0] * len(xs), n,
                       device, (copies, labels))


def shard_train(X: Any, y: np.ndarray, client: Client | None, device: str,
                timeout: float, prep: Prep) -> TrainLayout:
    """Keep the training rows split over the workers (one prepared shard per worker)."""
    if client is None:
        return _local_layout(X, y, device, "shard", prep)
    if isinstance(X, np.ndarray):
        Xd = shard(X, client, device=device, timeout=timeout)
    else:
        Xd = _placed(client, X.rechunk({1: -1}), timeout)[0]
    blocks = placement.map_blocks(client, _prepare, Xd, prep, name=placement.fresh_name("knn-train"),
                                  chunks=Xd.chunks, meta=meta_for(device, 2, np.float32))
    yd = shard(y, client, device=device, dtype=np.int32, timeout=timeout, like=blocks)
    _placed_or_raise(futures_of([blocks, yd]), int(Xd.shape[0]), timeout)
    xs, ys = placement.row_futures(blocks), placement.row_futures(yd)
    offsets = np.cumsum((0,) + Xd.chunks[0][:-1]).tolist()
    return TrainLayout("shard", xs, ys, placement.holders(client, xs), offsets,
                       int(Xd.shape[0]), device, (blocks, yd))


def _placed_or_raise(futures: list, n_rows: int, timeout: float) -> None:
    """Wait for the training blocks; a block that failed raises here (out of memory: clearly)."""
    wait(futures, timeout=timeout)
    for f in futures:
        if f.status == "error":
            exc = f.exception()
            if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
                raise DataError(f"a worker ran out of memory preparing its part of the {n_rows} "
                                "training rows; add workers (GPUs) or lower --memory-budget so "
                                f"each holds less ({exc})") from None
            raise exc


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


def _replicated_block(Qb: Any, train: Any, yb: Any, k: int, margin: int, tile_bytes: int | None,
                      vote: tuple | None = None) -> Any:
    xp = array_module(train.norms)
    Qb = _check_queries(Qb, xp)
    index = xp.arange(train.n, dtype=np.int64)
    cand = _guarded(kernels.local_candidates, Qb, train, yb, index, k, margin=margin,
                    tile_bytes=tile_bytes)
    if vote is not None:  # predict in the same task: one task per query block
        return _vote_pred(cand, *vote)
    return finished(cand)


def _sharded_block(train: Any, yb: Any, Qb: Any, offset: int, k: int, margin: int,
                   tile_bytes: int | None) -> Any:
    xp = array_module(train.norms)
    Qb = _check_queries(Qb, xp)
    index = xp.arange(train.n, dtype=np.int64) + offset
    return finished(_guarded(kernels.local_candidates, Qb, train, yb, index, k, margin=margin,
                              tile_bytes=tile_bytes))


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
    Q, futures, where = _placed(client, Q, timeout, remembered=True)  # the same queries, warm
    return Q, futures, where


def candidates(Q: da.Array, layout: TrainLayout, k: int, *, margin: int,
               tile_bytes: int | None, client: Client | None, timeout: float,
               vote: tuple | None = None, block_fn: Any = None) -> da.Array:
    """Packed ``(m, k, 3)`` candidates for every query row, under either plan.

    With ``vote=(n_classes, weights, classes, host)`` the last task of every
    query block votes and the result is the predictions (NumPy when ``host``);
    ``block_fn`` replaces the replicate plan's block function (same
    arguments), as the CuPy comparison backend does.  With a client the
    result is persisted (the work is under way); without one it is lazy.
    """
    Q, queries, where = _query_blocks(client, Q, timeout)
    loose = client is not None and not placement.ensure_recovery(client)
    opts = dict(k=k, margin=margin, tile_bytes=tile_bytes)
    name = placement.fresh_name("knn-predict" if vote is not None else "knn-candidates")
    if vote is not None:
        dtype = vote[2].dtype if vote[2] is not None else np.int32
        meta = np.empty(0, dtype) if vote[3] else meta_for(layout.device, 1, dtype)
        chunks: tuple = (Q.chunks[0],)
    else:
        meta = meta_for(layout.device, 3, np.float64)
        chunks = (Q.chunks[0], (k,), (3,))
    out = [(name, i) if vote is not None else (name, i, 0, 0) for i in range(len(queries))]
    qref = [q.key if hasattr(q, "status") else q for q in queries]
    if layout.plan == "replicate":
        tasks = _replicate_tasks(layout, qref, where, out, name, opts, vote, block_fn)
    else:
        tasks = _shard_tasks(layout, qref, where, out, name, opts, vote)
    inputs = [q for q in queries if hasattr(q, "status")] + [
        f for field in (layout.X, layout.y) for f in field if hasattr(f, "status")]
    result = placement.pinned_array(name, tasks, chunks=chunks, meta=meta,
                                    inputs=inputs if client is not None else [Q], loose=loose)
    return result if client is None else placement.persist(client, result)


def _replicate_tasks(layout: TrainLayout, qref: list, where: list, out: list, name: str,
                     opts: dict, vote: tuple | None, block_fn: Any) -> list[Pinned]:
    fn = functools.partial(block_fn or _replicated_block, vote=vote, **opts)
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
            args = (layout.ref("X", p), layout.ref("y", p),
                    q if layout.workers[p] == holder else visitor)
            if len(layout.X) == 1 and vote is not None:
                tasks.append(Pinned((f"{name}-local", p, i), (fn, *args), layout.workers[p]))
                tasks.append(Pinned(key, (functools.partial(_vote_block, vote=vote),
                                          (f"{name}-local", p, i)), layout.workers[p]))
            else:
                tasks.append(Pinned(key, (fn, *args), layout.workers[p]))
            level.append((key, layout.workers[p]))
        depth = 0
        while len(level) > 1:  # pairwise tree: log2(shards) rounds, on the left one's worker
            depth += 1
            merged = []
            for j in range(0, len(level), 2):
                if j + 1 == len(level):
                    merged.append(level[j])
                    continue
                (a, wa), (b, _) = level[j], level[j + 1]
                last = len(level) == 2
                key = out[i] if last else (f"{name}-merge", depth, j, i)
                fn = functools.partial(_merge_blocks, vote=vote if last else None)
                tasks.append(Pinned(key, (fn, a, b), wa))
                merged.append((key, wa))
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
