"""A device L-BFGS made ready for another fit of the same rows.

Making a :class:`.device.DeviceBackend` -- its buffers, every launch bound to
them, the iteration's CUDA graph -- is host time that a warm fit of small rows
shows (docs/performance-history.md).  A later fit of the same rows (a grid search,
warm repetitions) can start from the one it made last time: only the labels
(which may differ) are copied in and the optimiser's state zeroed; the
launches and the graph stay bound to the same buffers.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ...kernels.logreg import Levels


def _rows(X: Any) -> Any:
    return X.v if isinstance(X, Levels) else X


def ready(backend: Any, shards: list[tuple[Any, Any]]) -> bool:
    """Ready ``backend`` for a fit of ``shards`` (``(rows, labels)`` as its constructor
    takes them): the very row arrays it was made for (levels: the same ``v``) and as many
    labels each, which are copied into its buffers; the state zeroed, queued before
    anything the fit queues.  False, nothing changed, for other rows."""
    objectives = backend.objectives
    if not objectives or len(shards) != len(objectives):
        return False
    for o, (X, labels, *weights) in zip(objectives, shards):
        if (_rows(o.X) is not _rows(X) or labels.shape != o.labels.shape
                or weights or o.weighted):  # weighted rows: never kept
            return False
    for o, (_, labels) in zip(objectives, shards):
        o.relabel(labels)
    with backend._leader(), backend.stream or contextlib.nullcontext():
        for array in backend.state:
            array.fill(0)
    backend.fresh_counts()
    if backend._graph is not None:
        backend.graph_seconds = 0.0  # no capture in this fit
    return True
