"""cuML's multi-GPU estimators (``cuml.dask``) on the same cluster and shards.

Only runs where cuML is installed (the GPU stack's ``--rapids`` part); the
comparison table reports it as unavailable elsewhere.  ``cuml.dask``'s KNN
classifier votes uniformly, so its row is labelled that way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..data import shard
from ..data.sharding import as_worker_rows
from ..parallel.inputs import to_host
from .backend import (DASK, BackendRun, Placing, converted_note, join_notes, pixel_scale, repeat,
                      train_labels)


def knn(run: BackendRun) -> dict[str, Any]:
    from cuml.dask.neighbors import KNeighborsClassifier

    o, p, c = run.options, run.parts, run.client
    with Placing() as placing:
        X = as_worker_rows(p.X_train, c, dtype=np.float32, timeout=run.timeout)
        y = train_labels(run, X, np.int32)
        Q = shard(p.X_test, c, dtype=np.float32, timeout=run.timeout)
    result = repeat(run, lambda: KNeighborsClassifier(n_neighbors=o["k"], client=c).fit(X, y),
                    lambda model: to_host(model.predict(Q), run.timeout))
    return {**result, "placing": placing.seconds, "timed": DASK,
            "note": join_notes("cuml.dask votes uniformly", converted_note(run))}


def logreg(run: BackendRun) -> dict[str, Any]:
    from cuml.dask.linear_model import LogisticRegression

    o, p, c = run.options, run.parts, run.client
    scale = pixel_scale(p.X_train)
    with Placing() as placing:
        X = as_worker_rows(p.X_train, c, dtype=np.float32, scale=scale, timeout=run.timeout)
        y = train_labels(run, X, np.float32)
        Xt = shard(p.X_test, c, dtype=np.float32, scale=scale, timeout=run.timeout)
    out = repeat(run, lambda: LogisticRegression(C=o["C"], max_iter=o["max_iter"], tol=o["tol"],
                                                 client=c).fit(X, y),
                 lambda model: to_host(model.predict(Xt), run.timeout).astype(p.y_test.dtype))
    return {**out, "placing": placing.seconds, "timed": DASK}
