"""A fitted logistic regression's attributes, from a fit route's result dictionary."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..parallel import labels as labels_mod


def keep(model: Any, result: dict[str, Any], d: int) -> None:
    """Set ``model``'s fitted attributes (``coef_``, ``intercept_``, ``n_iter_``, the notes,
    ...) from ``result`` over ``d`` features."""
    if "classes" in result:  # found where the labels live
        model.classes_ = labels_mod.at_least_two(result["classes"])
    k = len(model.classes_)
    theta = result["x"]
    model.coef_ = theta[: d * k].reshape(d, k).T.copy()
    model.intercept_ = theta[d * k:].copy()
    model.n_iter_ = int(result["nit"])
    model.n_evaluations_ = int(result["nfev"])
    model.n_round_trips_ = int(result["round_trips"])
    model.comm_ = result["comm"]
    model.comm_note_ = result.get("comm_note")
    model.n_recoveries_ = int(result.get("recoveries", 0))
    model.optimizer_ = result.get("optimizer", "host")
    model.precision_ = result.get("precision", "")
    model.precision_note_ = result.get("precision_note")
    model.graph_ = result.get("graph")
    graph_note = result.get("graph_note") if model.optimizer_ == "device" else None
    model.notes_ = [n for n in (model.precision_note_, model.comm_note_,
                                graph_note and f"each L-BFGS iteration ran op by op, not as "
                                               f"one CUDA graph: {graph_note}",
                                result.get("launch_note"), result.get("optimizer_note")) if n]
    model.loss_ = float(result["fun"])
    model.converged_ = bool(result["success"])
    model.stop_reason_ = str(result.get("message", ""))
    model.gradient_max_ = float(result.get("grad_max", np.nan))
    model.fit_profile_ = result.get("profile", {})
    model.n_features_in_ = d
