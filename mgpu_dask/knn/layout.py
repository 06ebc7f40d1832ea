"""The training rows placed on the workers for the two KNN plans.

- ``replicate``: one prepared copy of the training set on every worker.
- ``shard``: the training rows split over the workers, one prepared shard each; where
  workers share a GPU, one shard per run of their adjacent blocks (:func:`gpu_runs`).

A prepared block is the kernels' :class:`~mgpu_dask.kernels.knn.TrainBlock`
(the product's operand in the chosen precision, norms, exact rows where keys
are approximate).  Every task is pinned to its worker
(:mod:`mgpu_dask.parallel.placement`); without a distributed client the rows
are prepared in this process.  This module runs on the workers too: it
imports no scikit-learn.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import dask.array as da
import numpy as np
from distributed import Client, futures_of, wait

from .. import config
from ..data.sharding import meta_for, shard
from ..exceptions import DataError
from ..kernels import knn as kernels
from ..kernels.knn import precision as precisions
from ..kernels.allocator import pooled
from ..kernels.launch import array_module, as_numpy
from ..kernels.precision import Precision
from ..parallel import made_ahead, placement, recovery, shared_rows, spread
from ..parallel.placement import Pinned
from ..parallel.workers import fixed_facts, gpu_ids, worker_addresses


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
    """How the training rows are prepared on the workers (``kernels.knn.prepare_train``)."""

    precision: Precision
    eight_bit: bool
    shift: int
    method: str
    metric: str = "euclidean"
    split: bool = False   # float16 operands keep the three-part product for uncertain rows


def _to_device(block: Any, device: str, dtype: Any = None) -> Any:
    if device == "gpu":
        import cupy

        block = cupy.asarray(block)
    else:
        block = np.asarray(block)
    return block if dtype is None else block.astype(dtype, copy=False)


@pooled()
def _prepare(rows: Any, prep: Prep) -> Any:
    return kernels.prepare_train(rows, prep.precision, prep.eight_bit, prep.shift, prep.method,
                                 prep.metric, prep.split)


def _prepare_host(rows: np.ndarray, device: str, prep: Prep) -> Any:
    return _prepare(_to_device(rows, device), prep)


def _prepare_shared(shared: shared_rows.SharedRows, device: str, prep: Prep) -> Any:
    return _prepare(shared_rows.read(shared, device=device), prep)


def _prepare_stacked(blocks: list[Any], prep: Prep, device: str | None = None) -> Any:
    if device is not None:  # NumPy chunks on GPU workers go to the GPU
        blocks = [_to_device(b, device) for b in blocks]
    xp = array_module(blocks[0])
    return _prepare(blocks[0] if len(blocks) == 1 else xp.concatenate(blocks), prep)


def _prepare_block(rows: Any, prep: Prep, device: str) -> Any:
    return _prepare(_to_device(rows, device), prep)


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


def placed_rows(client: Client, X: da.Array, timeout: float,
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
    shared = None
    if isinstance(X, da.Array):
        # Each block leaves its holder under a throwaway key (``send``), is
        # stacked on every worker, and no shard of X gains a replica.
        X, futures, where = placed_rows(client, X.rechunk({1: -1}), timeout)
        inputs = futures
        sends = [(f"{name}-send", b) for b in range(len(futures))]
        tasks += [Pinned(key, (placement.send, f.key), w)
                  for key, f, w in zip(sends, futures, where)]
        stack = functools.partial(_prepare_stacked, prep=prep, device=device)
        tasks += [Pinned((name, j, 0), (stack, list(sends)), w) for j, w in enumerate(workers)]
    else:
        host = np.ascontiguousarray(X)
        shared = shared_rows.share(host, client, workers)  # None: the rows go in the graph
        if shared is None:
            upload = functools.partial(_prepare_host, device=device, prep=prep)
            tasks += [Pinned((name, j, 0), (upload, host), w) for j, w in enumerate(workers)]
        else:  # each worker starts on its copy now, told straight; its task takes it
            make = functools.partial(_prepare_shared, shared, device, prep)
            takes = made_ahead.started(client, [(w, f"{name}-{j}", make)
                                                for j, w in enumerate(workers)])
            tasks += [Pinned((name, j, 0), (take,), w)
                      for j, (w, take) in enumerate(zip(workers, takes))]
    copies = placement.pinned_array(name, tasks, chunks=((n,) * len(workers), (d,)),
                                    meta=meta_for(device, 2, np.float32), inputs=inputs,
                                    loose=loose)
    labels = placement.pinned_array(
        f"{name}-labels", [Pinned((f"{name}-labels", j), (_to_device, y, device, np.int32), w)
                           for j, w in enumerate(workers)],
        chunks=((n,) * len(workers),), meta=meta_for(device, 1, np.int32), loose=loose)
    lost = recovery.losses(client)
    with placement.carrying_data():  # NumPy rows travel in the graph: a lost copy is rebuilt
        copies, labels = client.persist([copies, labels], optimize_graph=False)
    _placed_or_raise(futures_of([copies, labels]), n, timeout)
    xs, ys = placement.row_futures(copies), placement.row_futures(labels)
    if shared is not None:
        shared_rows.release_with(xs, shared)
    where = (placement.holders(client, xs) if loose
             else placement.pinned_holders(client, xs, workers, lost))
    return TrainLayout("replicate", xs, ys, where, [0] * len(xs), n, device, (copies, labels))


def shard_train(X: Any, y: np.ndarray, client: Client | None, device: str,
                timeout: float, prep: Prep) -> TrainLayout:
    """Keep the training rows split over the workers (one prepared shard per worker)."""
    if client is None:
        return _local_layout(X, y, device, "shard", prep)
    if isinstance(X, np.ndarray):
        Xd = shard(X, client, device=device, timeout=timeout)
    else:
        Xd = _finer_where_needed(client, placed_rows(client, X.rechunk({1: -1}), timeout)[0],
                                 timeout)
    name = placement.fresh_name("knn-train")
    meta = meta_for(device, 2, np.float32)
    found = placement.locate(client, Xd, remembered=True)  # (map_blocks asks no more)
    spreading = None if found is None else _spreading(client, Xd, found[1])
    runs = (spreading[0] if spreading is not None
            else None if found is None else gpu_runs(client, Xd, found[1]))
    if runs is None:  # one shard per block, prepared where it lies
        blocks = placement.map_blocks(client, _prepare_block, Xd, prep, device, name=name,
                                      chunks=Xd.chunks, meta=meta)
    else:
        blocks = _joined_shards(client, name, found, runs, Xd, prep, device, meta,
                                targets=spreading[1] if spreading is not None else None)
    yd = shard(y, client, device=device, dtype=np.int32, timeout=timeout, like=blocks)
    _placed_or_raise(futures_of([blocks, yd]), int(Xd.shape[0]), timeout)
    xs, ys = placement.row_futures(blocks), placement.row_futures(yd)
    offsets = np.cumsum((0,) + blocks.chunks[0][:-1]).tolist()
    return TrainLayout("shard", xs, ys, placement.holders(client, xs), offsets,
                       int(Xd.shape[0]), device, (blocks, yd))


def _places(client: Client) -> tuple[list[str], dict[str, str | None]]:
    """Every worker and each one's GPU (:func:`.workers.gpu_ids`), on GPUs only where the
    one-search-per-GPU rule is on (else each worker is a place of its own)."""
    everyone = worker_addresses(client)
    ids = (gpu_ids(client, everyone) if config.get("knn.one-search-per-gpu", True)
           else dict.fromkeys(everyone))
    return everyone, ids


def _finer_where_needed(client: Client, X: da.Array, timeout: float) -> da.Array:
    """``X`` rechunked into one block per place where its rows sit unevenly on the GPUs
    and its blocks are too coarse to even them out (:mod:`..parallel.spread`)."""
    found = placement.locate(client, X, remembered=True)
    if found is None:
        return X
    parts = spread.finer_blocks(X.chunks[0], found[1], *_places(client))
    if parts is None:
        return X
    return placed_rows(client, X.rechunk({0: -(-int(X.shape[0]) // parts)}), timeout)[0]


def _spreading(client: Client, X: da.Array,
               where: list[str]) -> tuple[list[range], list[str]] | None:
    """The shard plan's runs of blocks and the worker each is joined on, where the rows
    sit unevenly on the GPUs (:func:`..parallel.spread.balanced_runs`) and each run fits
    its GPU (:data:`JOIN_SHARE`); None: as they lie."""
    workers, ids = _places(client)
    found = spread.balanced_runs(X.chunks[0], where, workers, ids)
    if found is None:
        return None
    facts = fixed_facts(client)
    row_bytes = X.dtype.itemsize * int(X.shape[1])
    if not all(_fits(facts.get(w), row_bytes * sum(X.chunks[0][b] for b in run))
               for run, w in zip(*found)):
        return None
    return found


JOIN_SHARE = 4
"""A run of blocks on one GPU is joined into one shard where its rows take at most this
share of the GPU's memory (1/4): the stacking holds them twice while the shard is made."""


def gpu_runs(client: Client, X: da.Array, where: list[str]) -> list[range] | None:
    """The shard plan's shards where workers share a GPU: runs of consecutive row blocks
    whose holders are on one GPU (:func:`.workers.gpu_ids`), each to be one shard on one
    of them, so a predict searches each GPU's rows once, not once per worker (the
    searches of workers on one GPU take turns on it).  None where every run is one
    block (no two holders of adjacent blocks share a GPU), one-search-per-GPU is off
    (``mgpu-dask.knn.one-search-per-gpu``) or the rows are not on GPUs."""
    if not config.get("knn.one-search-per-gpu", True):
        return None
    ids = gpu_ids(client, sorted(set(where)))
    facts = fixed_facts(client)
    row_bytes = X.dtype.itemsize * int(X.shape[1])
    runs: list[range] = []
    for b, w in enumerate(where):
        last = runs[-1] if runs else None
        if (last is not None and ids.get(w) is not None
                and ids.get(where[last.start]) == ids.get(w)
                and _fits(facts.get(w), row_bytes * sum(X.chunks[0][last.start:b + 1]))):
            runs[-1] = range(last.start, b + 1)
        else:
            runs.append(range(b, b + 1))
    return runs if len(runs) < len(where) else None


def _fits(facts: Any, nbytes: int) -> bool:
    return facts is None or facts.gpu_bytes is None or nbytes * JOIN_SHARE <= facts.gpu_bytes


def _joined_shards(client: Client, name: str, found: tuple[list, list[str]],
                   runs: list[range], X: da.Array, prep: Prep, device: str, meta: Any,
                   targets: list[str] | None = None) -> da.Array:
    """One prepared shard per run of blocks (:func:`gpu_runs`), made on the holder of the
    run's most rows (or on ``targets``' worker for it); the others' blocks reach it under
    throwaway keys (``send``)."""
    futures, where = found
    sizes = X.chunks[0]
    stack = functools.partial(_prepare_stacked, prep=prep, device=device)
    tasks: list[Pinned] = []
    for j, run in enumerate(runs):
        rows: dict[str, int] = {}
        for b in run:
            rows[where[b]] = rows.get(where[b], 0) + sizes[b]
        at = (targets[j] if targets is not None
              else max(rows, key=rows.__getitem__))  # the first of the most, ties to the first
        parts = []
        for b in run:
            if where[b] == at:
                parts.append(futures[b].key)
            else:
                parts.append((f"{name}-send", b))
                tasks.append(Pinned(parts[-1], (placement.send, futures[b].key), where[b]))
        tasks.append(Pinned((name, j, 0), (stack, parts), at))
    chunks = (tuple(sum(sizes[b] for b in run) for run in runs), (int(X.shape[1]),))
    array = placement.pinned_array(name, tasks, chunks=chunks, meta=meta, inputs=futures,
                                   loose=not placement.ensure_recovery(client))
    return placement.persist(client, array)


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


def block_stats(block: Any) -> Any:
    """``[[min, max, all integral]]`` of one block, on its worker (the 8-bit test)."""
    low, high, integral = precisions.eight_bit_stats(as_numpy(block))
    return np.array([[low, high, float(integral)]])
