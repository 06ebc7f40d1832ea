"""Input checks and array placement shared by the estimators.

Both estimators import from here (neither imports the other): the active
client, where an array lives, NaN checks where the data is, and bringing
results home without a CUDA context in the client.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np

from . import config, placement
from .exceptions import DataError, MgpuDaskError
from .kernels._launch import array_module, on_gpu


class NotFittedError(MgpuDaskError, AttributeError):
    """``predict`` or ``kneighbors`` was called before ``fit``."""


def active_client() -> Any:
    """The current distributed client, or None (no client, or only a closed one)."""
    try:
        from distributed import get_client

        client = get_client()
    except ValueError:
        return None
    return client if client.status == "running" else None


def device_of(array: Any) -> str:
    meta = getattr(array, "_meta", array)
    return "gpu" if type(meta).__module__.startswith("cupy") else "cpu"


def _block_finite(block: Any) -> Any:
    xp = array_module(block)
    return xp.isfinite(block).all().reshape(1)


def all_finite(X: Any) -> bool:
    """No NaN or infinity in X; host arrays are checked here, dask arrays where they live."""
    if np.issubdtype(X.dtype, np.integer):
        return True
    if isinstance(X, da.Array):
        flags = placement.map_blocks(active_client(), _block_finite, X,
                                     name=placement.fresh_name("finite"),
                                     chunks=((1,) * X.numblocks[0],), meta=np.empty(0, bool))
        return bool(to_host(flags).all())
    return bool(np.isfinite(X).all())


def as_numpy(block: Any) -> np.ndarray:
    """A NumPy copy of a CuPy block (the block itself if it already is NumPy)."""
    return block.get() if hasattr(block, "get") else np.asarray(block)


def to_host(array: Any, timeout: float | None = None) -> np.ndarray:
    """A NumPy copy of a dask, CuPy or NumPy array, within ``timeout`` seconds.

    Dask arrays of CuPy chunks are copied to host memory on their workers, so
    the client never needs a CUDA context to receive them.  ``timeout``
    defaults to ``mgpu-dask.cluster.compute-timeout``; past it, TimeoutError.
    """
    if isinstance(array, da.Array):
        client = active_client()
        if client is not None:
            from distributed import wait

            timeout = timeout or config.seconds("cluster.compute-timeout")
            if array.ndim > 1 and array.numblocks[1:] != (1,) * (array.ndim - 1):
                array = array.rechunk({i: -1 for i in range(1, array.ndim)})
            placed = placement.row_futures(array)
            if device_of(array) == "gpu" and all(f is not None for f in placed):
                # Copied to the host where each block lives.
                array = placement.map_blocks(client, as_numpy, array,
                                             name=placement.fresh_name("to-host"),
                                             chunks=array.chunks,
                                             meta=np.empty((0,) * array.ndim, array.dtype))
                placed = placement.row_futures(array)
            elif device_of(array) == "gpu":
                array = array.map_blocks(as_numpy, meta=np.empty((0,) * array.ndim, array.dtype))
            if all(f is not None for f in placed):
                blocks = placed
            else:  # a lazy array: its row blocks, gathered directly (no concatenating task)
                blocks = client.compute(list(array.to_delayed().ravel()), optimize_graph=False)
            try:
                wait(blocks, timeout=timeout)
            except TimeoutError:
                client.cancel(blocks)
                raise TimeoutError(f"results did not arrive within {timeout:.0f} s") from None
            # Blocks of an array with a wrong _meta (cuML's KNN predict) may still be CuPy.
            parts = [p.get() if on_gpu(p) else p for p in client.gather(blocks)]
            return np.concatenate(parts, axis=0) if array.ndim else np.asarray(parts[0])
        array = array.compute()
    return array.get() if hasattr(array, "get") else np.asarray(array)


def accuracy(pred: Any, y: Any) -> float:
    """Share of equal entries, for any mix of dask, CuPy and NumPy arrays."""
    pred, y = to_host(pred), to_host(y)
    if pred.shape != y.shape:
        raise DataError(f"{len(y)} labels for {len(pred)} predictions")
    return float((pred == y).mean())
