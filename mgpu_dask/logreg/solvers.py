"""The L-BFGS over a problem's shards: on the host (any evaluator) or with every vector
on the GPU that holds the fit (:func:`fit_on_device`).

The workers import this module (the leader, the warm-up, a fit without a
client); the client reaches it only where it drives the loop itself (the fit
by messages), so the CUDA kernels of the device L-BFGS never load there.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..exceptions import DataError
from .lbfgs import device as device_lbfgs
from .lbfgs import loop
from .problem import Problem, products


def lbfgs_on_host(evaluate: Any, problem: Problem) -> dict[str, Any]:
    """L-BFGS on the penalised mean cross-entropy; ``evaluate`` sums the shards."""
    n, d, k, penalty = problem.n, problem.d, problem.n_classes, problem.penalty

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        W = theta[: d * k].reshape(d, k)
        b = theta[d * k:]
        loss, gW, gb = evaluate(W, b)
        value = loss / n + 0.5 * penalty * float((W * W).sum())
        grad = np.concatenate([(gW / n + penalty * W).ravel(), gb / n])
        return value, grad

    return loop.minimize_lbfgs(objective, np.zeros(d * k + k), maxiter=problem.max_iter,
                               gtol=problem.gtol)


def on_device(arrays: list[tuple[Any, Any]], problem: Problem) -> bool:
    """Whether the L-BFGS runs on the GPU: every shard on a GPU, and not refused."""
    possible = device_lbfgs.usable(arrays)
    if problem.optimizer == "device" and not possible:
        raise DataError("optimizer='device' needs every shard on a GPU; use optimizer='auto' "
                        "or 'host'")
    return possible and problem.optimizer != "host"


def fit_on_device(arrays: list[tuple[Any, Any]], problem: Problem) -> dict[str, Any]:
    """The whole L-BFGS on this process's GPU over shards on any GPUs it sees."""
    started = time.perf_counter()
    backend = device_lbfgs.DeviceBackend(arrays, problem.n_classes, problem.n, problem.penalty,
                                         precision=problem.precision, scale=problem.scale)
    try:
        ready = time.perf_counter()
        result = loop.run(backend, maxiter=problem.max_iter, gtol=problem.gtol)
        solved = time.perf_counter()
        details = device_profile(backend, result, solved - ready)
        ran = products(backend.objectives)
    finally:
        backend.close()
    return {**result, **ran, "optimizer": "device", "graph": details["graph"],
            "graph_note": details["graph note"], "launch_note": details["launch note"],
            "profile": {"buffers": ready - started, "L-BFGS": solved - ready, **details}}


def device_profile(backend: device_lbfgs.DeviceBackend, result: dict[str, Any],
                   seconds: float) -> dict[str, Any]:
    """What a device fit reports in ``fit_profile_``: iterations, evaluations, host syncs,
    device time, whether each iteration ran as one CUDA graph (and why not)."""
    return {"optimizer": "device", "iterations": result["nit"], "evaluations": result["nfev"],
            "line searches": result["searches"], "host syncs": backend.syncs,
            "run ahead": backend.run_ahead,
            "device seconds, first evaluation": backend.first_evaluation_seconds(),
            "host seconds per iteration": seconds / max(1, result["nit"]),
            "shards": len(backend.objectives),
            "graph": backend.graphed, "graph note": backend.graph_note,
            "launch note": backend.launch_note,
            "graph capture seconds": backend.graph_seconds,
            "evaluation": ",".join(sorted({str(o.precision) for o in backend.objectives}))}
