"""Shards that share the leader's GPU, evaluated as one.

Several Dask workers may share one GPU (a ``LocalCluster`` whose nannies see
the same device), each holding a shard.  The leader maps them all; evaluated
one by one, every shard adds its own launches, buffers and events to each
iteration, and keeps the holders' exports mapped until the fit ends.  Copied
into one block on the leader's GPU (a device-to-device copy), they are fitted
as one worker's rows are, and the mappings can be closed and the holders'
exports released before the L-BFGS begins.  Shards on other GPUs are left as
they are: there each GPU evaluating its own rows is the point.
"""

from __future__ import annotations

from typing import Any

JOIN_BYTES = 1 << 30
"""The most bytes of rows and labels joined: above this, one copy more of the rows costs
memory that large fits need, and their evaluations are long enough that a shard's own
launches no longer show."""


def _nbytes(X: Any) -> int:
    from ..kernels.logreg import Levels

    return X.v.nbytes + X.vt.nbytes if isinstance(X, Levels) else X.nbytes


def on_leader(arrays: list[tuple[Any, Any]]) -> tuple[Any, Any] | None:
    """``(rows, class indices)`` of every shard as one, in order, on this process's GPU.

    ``arrays`` are the mapped shards: CuPy rows (or int8
    :class:`~mgpu_dask.kernels.logreg.Levels`) and int32 class indices.
    Returns None, leaving them to be evaluated one by one, where there is a
    single shard, any shard lives on another GPU, the rows are of different
    kinds (levels of different steps, other dtypes), together they exceed
    :data:`JOIN_BYTES`, or the GPU lacks room for twice as much.  The copies
    are done when this returns, so the shards' mappings may be closed at once.
    """
    import cupy

    from ..kernels.logreg import Levels
    from ..kernels.logreg import int8

    if len(arrays) < 2:
        return None
    device = cupy.cuda.Device()
    if any(X.device.id != device.id or labels.device.id != device.id for X, labels in arrays):
        return None
    rows = [X for X, _ in arrays]
    levels = [isinstance(X, Levels) for X in rows]
    if any(levels) and not all(levels):
        return None
    if not any(levels) and len({(X.dtype, X.shape[1]) for X in rows}) > 1:
        return None
    size = sum(_nbytes(X) + labels.nbytes for X, labels in arrays)
    if size > JOIN_BYTES or cupy.cuda.runtime.memGetInfo()[0] < 2 * size:
        return None
    with device:
        X = int8.joined(rows) if levels[0] else cupy.concatenate(rows)
        if X is None:
            return None
        labels = cupy.concatenate([labels for _, labels in arrays])
        cupy.cuda.get_current_stream().synchronize()
    return X, labels
