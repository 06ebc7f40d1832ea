"""The ``logreg`` job: multinomial logistic regression through our L-BFGS, cold and warm,
every phase timed."""

from __future__ import annotations

import statistics
import time
from typing import Any

from ..cluster import StartingCluster
from ..data import shard
from ..data.sharding import cast_to, pixel_rows
from ..parallel.inputs import accuracy, to_host
from . import transfers
from .phases import Phases
from .session import Echo, fingerprint, notes, placement, session, summary
from .warmup import begin, logreg_spec


def logreg_job(*, dataset: str | None = None, data_dir: str | None = None, download: bool = True,
               fraction: float = 1.0, test_size: float = 0.25, seed: int = 0, C: float = 1.0,
               max_iter: int = 100, tol: float = 1e-4, comm: str = "auto",
               optimizer: str = "auto", precision: str = "auto",
               cluster_options: dict[str, Any] | None = None, repeats: int = 3,
               report: str | None = None, echo: Echo | None = None,
               copies: int | None = None, deformation: str | None = None,
               classes: list[int] | None = None, dtype: str = "uint8",
               starting: StartingCluster | None = None, warm_up: bool = True) -> dict[str, Any]:
    """Logistic regression end to end (pixels scaled to [0, 1]); every number the CLI prints.

    ``classes`` keeps only the rows of those labels (``[3, 8]``: the binary problem).
    ``dtype``: the rows on the workers, ``"uint8"`` as loaded (the estimator's
    ``input_scale`` puts them in [0, 1]) or ``"float32"`` (scaled copies, 4x the bytes);
    the same model either way.  ``starting``: the cluster, already starting; ``warm_up``:
    have the workers compile the fit's kernels first (where ``starting`` was not asked to
    already).
    """
    from ..logreg import LogisticRegression

    say = echo or (lambda message: None)
    cold = Phases(say)
    t0 = starting.asked[0] if starting is not None else time.perf_counter()
    with session("logreg", cold, dataset=dataset, data_dir=data_dir, download=download,
                 fraction=fraction, test_size=test_size, seed=seed,
                 cluster_options=cluster_options, report=report, say=say,
                 copies=copies, deformation=deformation, classes=classes,
                 starting=starting,
                 warm_up=begin(logreg_spec(dtype=dtype, dataset=dataset, precision=precision,
                                           classes=classes, optimizer=optimizer), say)
                 if warm_up else None) as s:
        client, parts = s.cluster.client, s.data
        scale = 1.0 / max(1.0, float(s.dataset.X.max()))  # pixels to [0, 1]
        say("[3/4] transfer (train and test sharded, one shard per worker)")
        with cold("transfer"):  # host rows sharded; generated ones stay or are cast in place
            X_train, X_test, input_scale = pixel_rows(
                parts.X_train, parts.X_test, client, scale, keep_bytes=cast_to(dtype) is None,
                timeout=s.wait_timeout)
            # The labels live beside their rows: no fit sends them again.
            y_train = shard(parts.y_train, client, like=X_train, timeout=s.wait_timeout)
        say("[4/4] fit and predict: cold, then warm")
        runs, warm_phases = [], []
        for i in range(1 + max(1, repeats)):
            phases = cold if i == 0 else Phases()
            clf = LogisticRegression(C=C, max_iter=max_iter, tol=tol, comm=comm,
                                     optimizer=optimizer, precision=precision,
                                     input_scale=input_scale)
            with phases("fit"):
                clf.fit(X_train, y_train)
            with phases("predict"):
                pred = to_host(clf.predict(X_test, on_host=True))
            if i == 0:
                cold_total = time.perf_counter() - t0
            else:
                runs.append(phases.seconds)
                warm_phases.append(phases)
        warm_totals = [r["fit"] + r["predict"] for r in runs]
        return {
            **summary(s, "logreg", fraction, seed),
            "C": C, "max_iter": max_iter, "tol": tol, "classes": classes,
            "dtype": str(X_train.dtype),
            "device": "gpu" if type(X_train._meta).__module__.startswith("cupy") else "cpu",
            **placement(client, {"train shard": X_train, "test shard": X_test}),
            "accuracy": accuracy(pred, parts.y_test), "predictions_sha256": fingerprint(pred),
            "n_iter": clf.n_iter_,
            "round_trips": clf.n_round_trips_, "evaluations": clf.n_evaluations_,
            "comm": clf.comm_, "optimizer": clf.optimizer_, "comm_note": clf.comm_note_,
            "precision": clf.precision_, "precision_requested": precision,
            "precision_note": clf.precision_note_, "evaluation": clf.precision_,
            "graph": clf.graph_, "notes": notes(s, *clf.notes_),
            "recoveries": clf.n_recoveries_,
            "fit_profile": clf.fit_profile_,
            "loss": clf.loss_, "converged": clf.converged_, "stop_reason": clf.stop_reason_,
            "gradient_max": clf.gradient_max_,
            "cold": {**cold.seconds, "total": cold_total},
            "cold_windows": cold.windows,
            "warm": {name: statistics.median(r[name] for r in runs) for name in runs[0]},
            "warm_fit_predict_seconds": warm_totals,
            "warm_fit_predict_median": statistics.median(warm_totals),
            "bytes_between_workers": transfers.by_phase(client, cold, warm_phases),
        }
