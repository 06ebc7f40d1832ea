"""Host arrays to dask arrays with one row-shard per worker, on GPU or CPU.

Each shard is built from its own slice of the host array (so a worker only
ever receives its rows), converted on the worker (``cupy.asarray`` then the
compute dtype on a GPU worker, ``astype`` on a CPU one), persisted there, and
kept recomputable: if a worker dies, Dask rebuilds its shard from the slice
on another (``placement.PinRecovery``).
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any, NamedTuple

import dask.array as da
import numpy as np
from distributed import Client, futures_of, wait

from .. import config
from ..kernels.launch import to_gpu
from ..parallel import made_ahead, placement, shared_rows
from ..parallel.workers import detect_device, worker_addresses

_PREFIX = "mgpu-shard"


class ShardInfo(NamedTuple):
    index: int
    rows: int
    worker: str
    array_type: str
    device: str


def _to_gpu(block: np.ndarray, dtype: np.dtype | None, scale: float | None = None) -> Any:
    out = to_gpu(block)
    out = out.astype(dtype, copy=False) if dtype is not None else out
    return out * out.dtype.type(scale) if scale is not None else out


def _to_cpu(block: np.ndarray, dtype: np.dtype | None, scale: float | None = None) -> np.ndarray:
    out = block.astype(dtype, copy=False) if dtype is not None else block
    return out * out.dtype.type(scale) if scale is not None else out


def _from_file(shared: shared_rows.SharedRows, start: int, stop: int, device: str,
               convert: Any, dtype: np.dtype | None, scale: float | None) -> Any:
    """Rows ``start:stop`` of a shared-memory file, read on the worker's ``device`` and
    ``convert``-ed (:func:`_to_gpu` or :func:`_to_cpu`: cast and scaled), one shard's
    task."""
    return convert(shared_rows.read(shared, start, stop, device), dtype, scale)


def meta_for(device: str, ndim: int, dtype: np.dtype) -> Any:
    """A zero-size array of the right type for ``meta=`` (CuPy on ``"gpu"``)."""
    if device == "gpu":
        import cupy

        return cupy.empty((0,) * ndim, dtype=dtype)
    return np.empty((0,) * ndim, dtype=dtype)


def row_bounds(n_rows: int, n_shards: int | None, chunk_rows: int | None) -> list[tuple[int, int]]:
    """Row ranges: ``n_shards`` near-equal shards, or shards of ``chunk_rows`` rows."""
    if chunk_rows is not None:
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows={chunk_rows} must be at least 1")
        n_shards = math.ceil(n_rows / chunk_rows)
    n_shards = max(1, min(n_shards or 1, n_rows))
    edges = np.linspace(0, n_rows, n_shards + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def shard(array: np.ndarray, client: Client, *, n_shards: int | None = None,
          chunk_rows: int | None = None, device: str = "auto", dtype: Any = None,
          workers: list[str] | None = None, timeout: float | None = None,
          block: bool = True, scale: float | None = None, like: da.Array | None = None) -> da.Array:
    """Place ``array`` on the cluster as row shards, round-robin over the workers.

    Each shard is one task pinned to its worker (``mgpu_dask.placement``), so
    the shards land exactly where asked, one graph for all of them.

    Parameters
    ----------
    array : numpy.ndarray
        Host data, rows first (1-D labels or 2-D features).
    client : distributed.Client
        The active client; shards go to its workers.
    n_shards : int or None, default None
        Number of row shards; ``None`` means one per worker.
    chunk_rows : int or None, default None
        Rows per shard instead of ``n_shards``.
    device : {"auto", "gpu", "cpu"}, default "auto"
        ``"gpu"`` makes every chunk a CuPy array on its worker's GPU; ``"auto"``
        picks ``"gpu"`` when every worker has one.
    dtype : numpy dtype or None, default None
        Cast to this dtype on the worker (after the transfer, so uint8 pixels
        travel as bytes and become float32 on the GPU).
    workers : list of str or None, default None
        Worker addresses to place shards on, round-robin; ``None`` means all.
    timeout : float or None, default None
        Seconds to wait for the shards to land; defaults to
        ``mgpu-dask.cluster.compute-timeout``.
    block : bool, default True
        Wait for the shards to land before returning.
    scale : float or None, default None
        Multiply by this on the worker after the cast (``1/255`` puts pixels in [0, 1]).
    like : dask.array.Array or None, default None
        A persisted array with as many rows: give each shard the rows and the
        worker of its row block (labels go with their features this way).

    Returns
    -------
    dask.array.Array
        Persisted, one block per shard, with ``_meta`` a CuPy array on GPU and
        a NumPy array on CPU.
    """
    if device not in ("auto", "gpu", "cpu"):
        raise ValueError(f"device={device!r} must be 'auto', 'gpu' or 'cpu'")
    workers = list(workers) if workers else worker_addresses(client)
    if device == "auto":
        device = detect_device(client)
    cast = np.dtype(dtype) if dtype is not None else None
    out_dtype = cast if cast is not None else array.dtype
    convert = _to_gpu if device == "gpu" else _to_cpu
    bounds = row_bounds(len(array), n_shards or len(workers), chunk_rows)
    if like is not None:
        placed = placement.locate(client, like)
        if placed is None or like.shape[0] != len(array):
            raise ValueError("like= must be a persisted array with as many rows as array")
        edges = np.cumsum((0,) + like.chunks[0])
        bounds = list(zip(edges[:-1].tolist(), edges[1:].tolist()))
        workers = placed[1]
    name = placement.fresh_name(_PREFIX)
    tail = (0,) * (array.ndim - 1)
    loose = not placement.ensure_recovery(client)
    # Each slice travels inside its task (or, to workers on this host, the name of the
    # shared-memory file that holds it), so a lost shard can be rebuilt anywhere.
    owners = [workers[i % len(workers)] for i in range(len(bounds))]
    shared = shared_rows.share(array, client, sorted(set(owners)))

    if shared is None:
        tasks = [placement.Pinned((name, i, *tail), (convert, array[start:stop], cast, scale),
                                  owners[i])
                 for i, (start, stop) in enumerate(bounds)]
    else:  # each worker starts reading its shards now, told straight; their tasks take them
        takes = made_ahead.started(client, [
            (owners[i], f"{name}-{i}",
             functools.partial(_from_file, shared, start, stop, device, convert, cast, scale))
            for i, (start, stop) in enumerate(bounds)])
        tasks = [placement.Pinned((name, i, *tail), (take,), owners[i])
                 for i, take in enumerate(takes)]
    chunks = (tuple(stop - start for start, stop in bounds),) + tuple((n,) for n in array.shape[1:])
    result = placement.pinned_array(name, tasks, chunks=chunks, loose=loose,
                                    meta=meta_for(device, array.ndim, out_dtype))
    with placement.carrying_data():
        result = placement.persist(client, result)
    shared_rows.release_with(futures_of(result), shared)
    if block:
        wait(futures_of(result), timeout=timeout or config.seconds("cluster.compute-timeout"))
    return result


def _describe_local(dask_worker: Any, keys: list[str]) -> dict[str, tuple[str, str, int]]:
    """Run on each worker: type, device and rows of the shards it holds."""
    found = {}
    for key in dask_worker.data.keys():
        if str(key) not in keys:
            continue
        value = dask_worker.data[key]
        kind = f"{type(value).__module__.split('.')[0]}.{type(value).__name__}"
        found[str(key)] = (kind, _where(value), int(value.shape[0]))
    return found


def _where(value: Any) -> str:
    """``"GPU n"`` (n as nvidia-smi counts) for a CuPy array, or a tuple of arrays (a
    prepared training block) holding one; ``"host"`` otherwise."""
    parts = value if isinstance(value, tuple) else (value,)
    on_gpu = next((p for p in parts if type(p).__module__.startswith("cupy")), None)
    if on_gpu is None:
        return "host"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    index = on_gpu.device.id
    return f"GPU {ids[index] if index < len(ids) else index}"


def shard_locations(array: da.Array, client: Client) -> list[ShardInfo]:
    """Every holder of every row block of a persisted array, read off the workers.

    A block held by two workers appears twice: nothing is hidden.
    """
    futures = placement.row_futures(array)
    present = [f for f in futures if f is not None]
    held = client.run(_describe_local, keys=[str(f.key) for f in present])
    who_has = client.who_has(present) if present else {}
    infos = []
    for index, future in enumerate(futures):
        if future is None:
            continue
        for worker in who_has.get(future.key, ()):
            kind, device, rows = held.get(worker, {}).get(str(future.key), ("?", "?", 0))
            infos.append(ShardInfo(index, rows, worker, kind, device))
    return sorted(infos)


def placement_problems(infos: list[ShardInfo], n_workers: int, what: str = "shard") -> list[str]:
    """What is wrong with a placement: a block with several holders, a worker with several blocks.

    A worker holding two blocks is a problem only where there are no more
    blocks than ``n_workers`` (one block per worker was asked for).

    Returns
    -------
    list of str
        One sentence per problem; empty when every block has exactly one
        holder and no worker holds two.
    """
    by_block: dict[int, list[str]] = {}
    by_worker: dict[str, list[int]] = {}
    for s in infos:
        by_block.setdefault(s.index, []).append(s.worker)
        by_worker.setdefault(s.worker, []).append(s.index)
    problems = [f"{what} {i} has {len(w)} holders ({', '.join(sorted(w))})"
                for i, w in sorted(by_block.items()) if len(w) > 1]
    if len(by_block) <= n_workers:
        problems += [f"worker {w} holds {len(i)} {what}s ({', '.join(map(str, sorted(i)))})"
                     for w, i in sorted(by_worker.items()) if len(i) > 1]
    return problems


def _cast_block(block: Any, dtype: Any, scale: float | None) -> Any:
    out = block.astype(dtype)
    if scale is not None:
        out *= out.dtype.type(scale)
    return out


def as_worker_rows(X: Any, client: Client, *, dtype: Any = np.float32, scale: float | None = None,
                   timeout: float | None = None) -> da.Array:
    """Rows on the workers as ``dtype`` (times ``scale``): host rows are sharded; rows that
    already live on the workers (generated there) are cast where each block is."""
    if isinstance(X, np.ndarray):
        return shard(X, client, dtype=dtype, scale=scale, timeout=timeout)
    device = "gpu" if type(X._meta).__module__.startswith("cupy") else "cpu"
    out = placement.map_blocks(client, _cast_block, X, np.dtype(dtype), scale,
                               name=placement.fresh_name("rows-as"), chunks=X.chunks,
                               meta=meta_for(device, 2, np.dtype(dtype)))
    wait(futures_of(out), timeout=timeout or config.seconds("cluster.compute-timeout"))
    return out


def pixel_rows(X_train: Any, X_test: np.ndarray, client: Client, scale: float, *,
               keep_bytes: bool, timeout: float | None = None) -> tuple[Any, Any, float | None]:
    """Train and test rows on the workers for a model of the pixels ``* scale``:
    ``(X_train, X_test, input_scale)``.  ``keep_bytes`` and uint8 rows: the rows as
    loaded (generated ones stay where they are) and ``input_scale = scale``, for
    ``LogisticRegression(input_scale=...)``; otherwise float32 copies already scaled and
    ``None``."""
    if keep_bytes and X_train.dtype == np.uint8:
        train = (shard(X_train, client, timeout=timeout) if isinstance(X_train, np.ndarray)
                 else X_train)
        return train, shard(X_test, client, timeout=timeout), scale
    return (as_worker_rows(X_train, client, dtype=np.float32, scale=scale, timeout=timeout),
            shard(X_test, client, dtype=np.float32, scale=scale, timeout=timeout), None)


def cast_to(dtype: str | None) -> np.dtype | None:
    """The dtype ``--dtype`` asks rows to be cast to; None for ``"uint8"`` (as loaded)."""
    return None if dtype in (None, "uint8") else np.dtype(dtype)


def rows_as_dtype(X: Any, client: Client, dtype: str | None,
                  timeout: float | None = None) -> Any:
    """Training rows in ``--dtype``: as loaded, or cast (host rows here, rows that live on
    the workers where each block is)."""
    cast = cast_to(dtype)
    if cast is None:
        return X
    if isinstance(X, np.ndarray):
        return X.astype(cast)
    return as_worker_rows(X, client, dtype=cast, timeout=timeout)
