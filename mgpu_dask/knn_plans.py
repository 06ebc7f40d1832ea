"""Dask graphs for the two KNN plans; no estimator state, no cluster creation.

- ``replicate``: the training set is copied once to every worker (a distinct
  key per worker, so Dask never drops or moves it); each query shard is
  searched on the worker that holds it, with no communication afterwards.
- ``shard``: the training set stays split over the workers; every worker
  returns its local top-k for every query block and a pairwise tree merges
  them, so the training set may be larger than any one GPU.
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

import dask.array as da
import numpy as np
from distributed import Client, futures_of, wait

from .data.shard import block_futures, loosen_placement, meta_for, shard, worker_addresses
from .exceptions import DataError
from .kernels import knn as kernels
from .kernels._launch import array_module


class TrainLayout(NamedTuple):
    plan: str                      # "replicate" or "shard"
    X: list[da.Array]              # replicate: one single-block copy per worker; shard: [X]
    y: list[da.Array]              # encoded labels (int32), laid out like X
    norms: list[da.Array]          # row norms, laid out like X
    workers: list[str]             # replicate: the worker holding each copy
    n_rows: int
    device: str                    # "gpu" or "cpu"


def _same(block: Any) -> Any:
    return block


def _norms_block(block: Any) -> Any:
    return kernels.row_norms(block)


def _persist_on(client: Client | None, array: da.Array, worker: str | None) -> da.Array:
    if client is None:
        return array.persist()
    return client.persist(array, workers=[worker] if worker else None,
                          allow_other_workers=worker is None)


def _holders(client: Client, arrays: list[da.Array]) -> list[str | None]:
    """The worker that actually holds each single-block array."""
    who_has = client.who_has(futures_of(arrays))
    found = []
    for array in arrays:
        keys = [f.key for f in futures_of(array)]
        found.append(next((w[0] for k in keys for w in [list(who_has.get(k, ()))] if w), None))
    return found


def replicate_train(X: Any, y: Any, client: Client | None, device: str,
                    timeout: float) -> TrainLayout:
    """One copy of ``X`` (float32), ``y`` and the row norms on every worker."""
    workers = worker_addresses(client) if client is not None else [None]
    token = uuid.uuid4().hex[:10]
    xs, ys, ns = [], [], []
    for i, worker in enumerate(workers):
        if isinstance(X, np.ndarray) and client is not None:
            xi = shard(X, client, n_shards=1, device=device, dtype=np.float32, workers=[worker],
                       block=False)
            yi = shard(y, client, n_shards=1, device=device, dtype=np.int32, workers=[worker],
                       block=False)
        else:
            single = da.asarray(X).astype(np.float32).rechunk({0: -1, 1: -1})
            xi = _persist_on(client, single.map_blocks(_same, name=f"knn-train-{token}-{i}"),
                             worker)
            yi = _persist_on(client, da.asarray(y).astype(np.int32).rechunk(-1).map_blocks(
                _same, name=f"knn-labels-{token}-{i}"), worker)
        ni = _persist_on(client, xi.map_blocks(_norms_block, drop_axis=1, dtype=np.float32,
                                               name=f"knn-norms-{token}-{i}"), worker)
        xs.append(xi), ys.append(yi), ns.append(ni)
    if client is not None:
        wait(futures_of(xs + ys + ns), timeout=timeout)
        workers = _holders(client, xs)  # where the copies really are
        loosen_placement(client, *xs, *ys, *ns)
    return TrainLayout("replicate", xs, ys, ns, workers, int(xs[0].shape[0]), device)


def shard_train(X: Any, y: Any, client: Client | None, device: str,
                timeout: float) -> TrainLayout:
    """Keep the training rows split over the workers (one shard per worker)."""
    if isinstance(X, np.ndarray) and client is not None:
        Xd = shard(X, client, device=device, dtype=np.float32, timeout=timeout)
        yd = shard(y, client, device=device, dtype=np.int32, timeout=timeout)
    else:
        Xd = da.asarray(X).astype(np.float32)
        yd = da.asarray(y).astype(np.int32).rechunk((Xd.chunks[0],))
        Xd, yd = (client.persist([Xd, yd]) if client is not None else (Xd.persist(), yd.persist()))
    norms = Xd.map_blocks(_norms_block, drop_axis=1, dtype=np.float32)
    norms = client.persist(norms) if client is not None else norms.persist()
    if client is not None:
        wait(futures_of([Xd, yd, norms]), timeout=timeout)
    return TrainLayout("shard", [Xd], [yd], [norms], [], int(Xd.shape[0]), device)


def _check_queries(Qb: Any, xp: Any) -> Any:
    Qb = xp.asarray(Qb, dtype=np.float32)
    if not bool(xp.isfinite(Qb).all()):
        raise DataError("the query rows contain NaN or infinity; clean or impute them first")
    return Qb


def _out_of_memory(exc: BaseException, rows: int, n: int) -> DataError:
    return DataError(f"GPU out of memory on a worker while comparing {rows} queries with {n} "
                     "training rows; lower --memory-budget (so the training set is sharded), "
                     f"lower block_bytes, or add GPUs ({type(exc).__name__})")


def _guarded(fn: Any, Qb: Any, Tb: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a block function; a CUDA out-of-memory becomes one clear error."""
    try:
        return fn(Qb, Tb, *args, **kwargs)
    except MemoryError as exc:
        raise _out_of_memory(exc, Qb.shape[0], Tb.shape[0]) from None
    except Exception as exc:
        if type(exc).__name__ == "OutOfMemoryError":  # cupy.cuda.memory.OutOfMemoryError
            raise _out_of_memory(exc, Qb.shape[0], Tb.shape[0]) from None
        raise


def _finished(out: Any) -> Any:
    """Wait for the GPU before the task reports done, so Dask's timings are honest."""
    if type(out).__module__.startswith("cupy"):
        import cupy

        cupy.cuda.get_current_stream().synchronize()
    return out


def _replicated_block(Qb: Any, Tb: Any, yb: Any, nb: Any, k: int, method: str, margin: int,
                      block_bytes: int, vote: tuple | None = None) -> Any:
    xp = array_module(Tb)
    Qb = _check_queries(Qb, xp)
    index = xp.arange(Tb.shape[0], dtype=np.int64)
    cand = _guarded(kernels.local_candidates, Qb, Tb, yb, index, k, method=method, margin=margin,
                    block_bytes=block_bytes, norms=nb)
    if vote is not None:  # predict in the same task: one task per query block
        return _vote_pred(cand, *vote)
    return _finished(cand)


def _sharded_block(Tb: Any, yb: Any, nb: Any, offset: np.ndarray, Qb: Any, k: int, method: str,
                   margin: int, block_bytes: int) -> Any:
    xp = array_module(Tb)
    Qb = _check_queries(Qb, xp)
    index = xp.arange(Tb.shape[0], dtype=np.int64) + int(offset[0])
    out = _guarded(kernels.local_candidates, Qb, Tb, yb, index, k, method=method, margin=margin,
                   block_bytes=block_bytes, norms=nb)
    return _finished(out[None])


def _merge_blocks(a: Any, b: Any) -> Any:
    return _finished(kernels.merge(a, b))


def candidates(Q: da.Array, layout: TrainLayout, k: int, *, method: str, margin: int,
               block_bytes: int, client: Client | None, holders: list[str | None] | None = None,
               vote: tuple | None = None, block_fn: Any = None) -> da.Array:
    """Packed ``(m, k, 3)`` candidates for every query row, under either plan.

    With ``vote=(n_classes, weights, classes, host)`` the replicate plan votes
    in the same task and returns predictions (on the host when ``host``);
    ``block_fn`` replaces that task's function (same arguments), as the CuPy
    comparison backend does.
    """
    meta = meta_for(layout.device, 3, np.float64)
    opts = dict(k=k, method=method, margin=margin, block_bytes=block_bytes)
    # A fresh key per call: deterministic names would let the scheduler hand back a
    # previous call's result still in memory, and warm timings would measure nothing.
    tag = uuid.uuid4().hex[:12]
    if layout.plan == "replicate":
        holders = holders if holders is not None else [w for _, w in block_futures(Q, client)]
        pick = [layout.workers.index(h) if h in layout.workers else i % len(layout.workers)
                for i, h in enumerate(holders)]
        R = da.concatenate([layout.X[p] for p in pick])
        yR = da.concatenate([layout.y[p] for p in pick])
        nR = da.concatenate([layout.norms[p] for p in pick])
        if vote is not None:
            dtype = vote[2].dtype if vote[2] is not None else np.int32
            out_meta = np.empty(0, dtype) if vote[3] else meta_for(layout.device, 1, dtype)
            return da.blockwise(block_fn or _replicated_block, "i", Q, "ij", R, "ij", yR, "i",
                                nR, "i",
                                name=f"knn-predict-{tag}", align_arrays=False, concatenate=True,
                                dtype=dtype,
                                meta=out_meta, vote=vote, **opts)
        return da.blockwise(_replicated_block, "ikc", Q, "ij", R, "ij", yR, "i", nR, "i",
                            name=f"knn-candidates-{tag}", new_axes={"k": k, "c": 3},
                            align_arrays=False, concatenate=True,
                            dtype=np.float64, meta=meta, **opts)
    T, yT, nT = layout.X[0], layout.y[0], layout.norms[0]
    starts = np.cumsum((0,) + T.chunks[0][:-1]).astype(np.int64)
    offsets = da.from_array(starts, chunks=1)
    partial = da.blockwise(_sharded_block, "pikc", T, "pj", yT, "p", nT, "p", offsets, "p",
                           Q, "ij", name=f"knn-local-{tag}", new_axes={"k": k, "c": 3},
                           adjust_chunks={"p": 1},
                           align_arrays=False, concatenate=True, dtype=np.float64,
                           meta=meta_for(layout.device, 4, np.float64), **opts)
    level = [partial[p] for p in range(partial.shape[0])]
    while len(level) > 1:  # pairwise tree: log2(workers) merge rounds
        level = [da.map_blocks(_merge_blocks, level[i], level[i + 1], dtype=np.float64, meta=meta,
                               token=f"knn-merge-{tag}-{len(level)}-{i}")
                 if i + 1 < len(level) else level[i] for i in range(0, len(level), 2)]
    return level[0]


def _vote_pred(cand: Any, n_classes: int, weights: str, classes: np.ndarray | None,
               host: bool = False) -> Any:
    _, pred = kernels.vote(cand, n_classes, weights)
    if classes is not None:
        pred = array_module(pred).asarray(classes)[pred]
    if host and hasattr(pred, "get"):
        return pred.get()
    return _finished(pred)


def _vote_proba(cand: Any, n_classes: int, weights: str) -> Any:
    return kernels.vote(cand, n_classes, weights)[0]


def vote_predictions(cand: da.Array, n_classes: int, weights: str, classes: np.ndarray | None,
                     device: str) -> da.Array:
    """Predicted labels (``classes[argmax]``) per query row."""
    dtype = classes.dtype if classes is not None else np.int32
    return cand.map_blocks(_vote_pred, n_classes, weights, classes, drop_axis=[1, 2],
                           token=f"knn-vote-{uuid.uuid4().hex[:12]}",
                           dtype=dtype, meta=meta_for(device, 1, dtype))


def vote_probabilities(cand: da.Array, n_classes: int, weights: str, device: str) -> da.Array:
    return cand.map_blocks(_vote_proba, n_classes, weights, drop_axis=2,
                           token=f"knn-proba-{uuid.uuid4().hex[:12]}",
                           chunks=(cand.chunks[0], (n_classes,)), dtype=np.float64,
                           meta=meta_for(device, 2, np.float64))
