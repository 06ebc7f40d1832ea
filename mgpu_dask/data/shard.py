"""Host arrays to dask arrays with one row-shard per worker, on GPU or CPU.

Each shard is built from its own slice of the host array (so a worker only
ever receives its rows), converted on the worker (``cupy.asarray`` then the
compute dtype on a GPU worker, ``astype`` on a CPU one), persisted there, and
kept recomputable: if a worker dies, Dask rebuilds its shard from the slice.
"""

from __future__ import annotations

import math
import os
import uuid
from typing import Any, NamedTuple

import dask
import dask.array as da
import numpy as np
from distributed import Client, futures_of, wait

from .. import config
from .._compat import has_gpu
from ..exceptions import ClusterError

_PREFIX = "mgpu-shard-"


class ShardInfo(NamedTuple):
    index: int
    rows: int
    worker: str
    array_type: str
    device: str


def worker_addresses(client: Client) -> list[str]:
    """Worker addresses in a stable order (by worker name, then address)."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    return sorted(workers, key=lambda a: (str(workers[a].get("name")), a))


def detect_device(client: Client) -> str:
    """``"gpu"`` when every worker sees a GPU and has CuPy, else ``"cpu"``."""
    answers = client.run(has_gpu)
    return "gpu" if answers and all(answers.values()) else "cpu"


def _to_gpu(block: np.ndarray, dtype: np.dtype | None, scale: float | None = None) -> Any:
    import cupy

    out = cupy.asarray(block)
    out = out.astype(dtype, copy=False) if dtype is not None else out
    return out * out.dtype.type(scale) if scale is not None else out


def _to_cpu(block: np.ndarray, dtype: np.dtype | None, scale: float | None = None) -> np.ndarray:
    out = block.astype(dtype, copy=False) if dtype is not None else block
    return out * out.dtype.type(scale) if scale is not None else out


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
          block: bool = True, scale: float | None = None) -> da.Array:
    """Place ``array`` on the cluster as row shards, round-robin over the workers.

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

    Returns
    -------
    dask.array.Array
        Persisted, with ``_meta`` a CuPy array on GPU and a NumPy array on CPU.
    """
    if device == "auto":
        device = detect_device(client)
    if device not in ("gpu", "cpu"):
        raise ValueError(f"device={device!r} must be 'auto', 'gpu' or 'cpu'")
    workers = list(workers) if workers else worker_addresses(client)
    if not workers:
        raise ClusterError("the cluster has no workers; start some or check --scheduler-address")
    out_dtype = np.dtype(dtype) if dtype is not None else array.dtype
    convert = _to_gpu if device == "gpu" else _to_cpu
    meta = meta_for(device, array.ndim, out_dtype)
    token = uuid.uuid4().hex[:12]
    pieces = []
    for i, (start, stop) in enumerate(row_bounds(len(array), n_shards or len(workers), chunk_rows)):
        host = da.from_array(array[start:stop], chunks=-1, name=f"mgpu-host-{token}-{i:05d}")
        piece = host.map_blocks(convert, np.dtype(dtype) if dtype is not None else None, scale,
                                dtype=out_dtype, meta=meta, name=f"{_PREFIX}{token}-{i:05d}")
        # The slice travels inside the graph (so a lost shard can be rebuilt):
        # large by design, hence no large-graph warning.  Placement is strict: a
        # loose one lets the scheduler put two shards on one GPU when it is busy.
        with dask.config.set({"distributed.admin.large-graph-warning-threshold": "64GiB"}):
            pieces.append(client.persist(piece, workers=[workers[i % len(workers)]],
                                         allow_other_workers=False))
    result = da.concatenate(pieces, axis=0) if len(pieces) > 1 else pieces[0]
    if block:
        wait(futures_of(result), timeout=timeout or config.seconds("cluster.compute-timeout"))
        loosen_placement(client, result)
    return result


def _set_loose(dask_scheduler: Any, keys: list[Any]) -> int:
    """On the scheduler: loose restrictions for these tasks and everything they depend on."""
    stack = [dask_scheduler.tasks[k] for k in keys if k in dask_scheduler.tasks]
    seen = set()
    while stack:
        ts = stack.pop()
        if ts.key in seen:
            continue
        seen.add(ts.key)
        ts.loose_restrictions = True
        stack.extend(ts.dependencies)
    return len(seen)


def loosen_placement(client: Client, *arrays: Any) -> None:
    """Once shards sit where they were placed, let Dask rebuild a lost one anywhere.

    Placement is strict while the shards are created (a loose one may put two
    on one GPU); afterwards the restriction is relaxed so that, if a worker
    dies, its shards are recomputed from their slices on a surviving worker.
    """
    keys = [f.key for f in futures_of(list(arrays))]
    client.run_on_scheduler(_set_loose, keys=keys)


def block_futures(array: da.Array, client: Client | None) -> list[tuple[Any, str | None]]:
    """The persisted future behind each row block of ``array``, and the worker holding it.

    Follows the aliases that ``concatenate`` and friends put in front of
    persisted keys; a block that is not simply persisted gets ``(None, None)``.
    """
    found: list[tuple[Any, str | None]] = [(None, None)] * array.numblocks[0]
    futures = futures_of(array) if client is not None else []
    if not futures:
        return found
    graph = dict(array.__dask_graph__())
    who_has = client.who_has(futures)
    keys = array.__dask_keys__()
    while keys and isinstance(keys[0], list):  # first column block of each row block
        keys = [k[0] for k in keys]
    for i, key in enumerate(keys):
        for _ in range(8):
            value = graph.get(key)
            if hasattr(value, "key") and hasattr(value, "status"):  # a Future
                found[i] = (value, (list(who_has.get(value.key, ())) or [None])[0])
                break
            if isinstance(value, tuple) and value in graph:
                key = value
                continue
            break
    return found


def _describe_local(dask_worker: Any, keys: list[str]) -> dict[str, tuple[str, str, int]]:
    """Run on each worker: type, device and rows of the shards it holds."""
    found = {}
    for key in dask_worker.data.keys():
        if str(key) not in keys:
            continue
        value = dask_worker.data[key]
        kind = f"{type(value).__module__.split('.')[0]}.{type(value).__name__}"
        if kind.startswith("cupy"):
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            physical = visible.split(",")[0] if visible else str(value.device.id)
            device = f"GPU {physical}"
        else:
            device = "host"
        found[str(key)] = (kind, device, int(value.shape[0]))
    return found


def shard_locations(array: da.Array, client: Client) -> list[ShardInfo]:
    """Where each shard of an array made by :func:`shard` lives, read off the workers."""
    futures = futures_of(array)
    keys = [f.key for f in futures]
    held = client.run(_describe_local, keys=[str(k) for k in keys])
    who_has = client.who_has(futures)
    infos = []
    for key in keys:
        name = key[0] if isinstance(key, tuple) else str(key)
        index = int(name.rsplit("-", 1)[1]) if name.startswith(_PREFIX) else -1
        for worker in who_has.get(key, ()):
            kind, device, rows = held.get(worker, {}).get(str(key), ("?", "?", 0))
            infos.append(ShardInfo(index, rows, worker, kind, device))
    return sorted(infos)
