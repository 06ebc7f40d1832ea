"""Shards that share the leader's GPU, evaluated as one.

Several Dask workers may share one GPU (a ``LocalCluster`` whose nannies see
the same device), each holding a shard.  The leader maps them all; evaluated
one by one, every shard adds its own launches, buffers and events to each
iteration, and keeps the holders' exports mapped until the fit ends.  Copied
into one block on the leader's GPU (a device-to-device copy), they are fitted
as one worker's rows are, and the mappings can be closed and the holders'
exports released before the L-BFGS begins.  Shards on other GPUs are left as
they are: there each GPU evaluating its own rows is the point.

A leader keeps what it joined (:func:`keep`) under the keys of every shard's
blocks, while its own blocks live (:mod:`.kept_with_blocks` drops it with them): a
later fit on the same persisted rows (a grid search, warm repetitions) finds
it (:func:`kept`) and asks no holder for anything.  A leader that holds the only
shard keeps its rows and class indices the same way, and the next fit of them
starts from there, exporting and mapping nothing.  Dask keys name their
values, so a shard held elsewhere under the same key holds the same rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exceptions import DataError
from ..parallel import labels as labels_mod
from ..parallel import kept_with_blocks

JOIN_BYTES = 1 << 30
"""The most bytes of rows and labels joined: above this, one copy more of the rows costs
memory that large fits need, and their evaluations are long enough that a shard's own
launches no longer show."""


def _nbytes(X: Any) -> int:
    from ..kernels.logreg import Levels

    return X.v.nbytes if isinstance(X, Levels) else X.nbytes  # levels carry no transpose


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


def _entry(shards: list[dict[str, Any]], levels: bool, scale: float | None) -> tuple | None:
    """What a join of ``shards`` is kept under: the keys of every shard's blocks, in order,
    and how their rows were exported; None where some shard's keys are not given (the
    workers do not drop kept things with their blocks)."""
    keys: list[Any] = []
    for s in shards:
        named = s.get("own keys") if "own rows" in s else (s["keys"] if s.get("keep") else None)
        if not named:
            return None
        keys.extend(named)
    return (tuple(keys), "joined", levels, scale)


def own_blocks(shards: list[dict[str, Any]]) -> list[Any]:
    """The leader's own row blocks among ``shards`` (what it keeps things with)."""
    return [block for s in shards if "own rows" in s for block in s["own rows"]]


def _same_labels(a: Any, b: Any) -> bool:
    """Whether two shards' labels are the same: class indices the client sent (equal
    arrays), the leader's own label blocks (the same objects) or a holder's (the same
    keys)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
                and a.dtype == b.dtype and np.array_equal(a, b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(x is y for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def fit_key(shards: list[dict[str, Any]], levels: bool,
            scale: float | None) -> tuple[list[Any], tuple] | None:
    """What the device L-BFGS of a fit of ``shards``' rows as this process keeps them (the
    leader's own, or their join) is kept under: ``(blocks, entry)`` for
    :func:`.solvers.fit_on_device`, beside the join; None where some shard's keys are
    not given."""
    entry = _entry(shards, levels, scale)
    return None if entry is None else (own_blocks(shards), (entry[0], "device fit", *entry[2:]))


def keep(shards: list[dict[str, Any]], levels: bool, scale: float | None,
         one: tuple[Any, Any], parts: list[Any] | None, classes: np.ndarray | None) -> None:
    """Keep the join ``one`` of ``shards`` for the next fit on them.

    ``parts`` are the label values each shard named (where the classes were
    found from them), ``classes`` those the labels were encoded by.  Nothing
    is kept where a shard's keys are not given.
    """
    entry = _entry(shards, levels, scale)
    if entry is not None:
        kept_with_blocks.keep(own_blocks(shards), entry,
                         (one, [s["labels"] for s in shards], parts, classes))


def kept(shards: list[dict[str, Any]], levels: bool, scale: float | None, discover: bool,
         declared: Any = None) -> tuple[tuple[Any, Any], np.ndarray | None] | None:
    """The join kept for ``shards`` (same blocks, same labels, same classes) and the
    classes its labels were encoded by, or None.

    ``discover``: the leader finds the classes from the labels (else they are
    class indices already); ``declared``: the classes the fit declares, if any.
    """
    entry = _entry(shards, levels, scale)
    if entry is None:
        return None
    value = kept_with_blocks.kept_for(own_blocks(shards), entry)
    if value is kept_with_blocks.MISSING:
        return None
    one, labels, parts, classes = value
    if not same_labels(shards, labels, parts, classes, discover, declared):
        return None
    return one, classes


def same_labels(shards: list[dict[str, Any]], labels: list[Any], parts: list[Any] | None,
                classes: np.ndarray | None, discover: bool, declared: Any) -> bool:
    """Whether rows kept for a fit of shards whose labels were ``labels`` (as each shard
    named them), encoded by ``classes`` found from ``parts`` (the label values each shard
    held; None where the labels came as class indices), serve a fit of ``shards``:
    the same labels each, the same way of naming classes, the same classes found."""
    if len(labels) != len(shards) or not all(
            _same_labels(a, s["labels"]) for a, s in zip(labels, shards)):
        return False
    if discover != (parts is not None):
        return False
    if discover:
        try:
            now = labels_mod.at_least_two(labels_mod.classes_from(parts, declared))
        except DataError:
            return False
        if classes is None or now.shape != classes.shape or not np.array_equal(now, classes):
            return False
    return True
