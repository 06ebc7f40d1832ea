"""The L-BFGS over a problem's shards: on the host (any evaluator) or with every vector
on the GPU that holds the fit (:func:`fit_on_device`).

The workers import this module (the leader, the warm-up, a fit without a
client); the client reaches it only where it drives the loop itself (the fit
by messages), so the CUDA kernels of the device L-BFGS never load there.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, NamedTuple

import numpy as np

from ..exceptions import DataError
from ..kernels.lbfgs.rules import FLOAT32_ROUNDING
from ..parallel import kept_with_blocks
from .lbfgs import device as device_lbfgs
from .lbfgs import loop, meanwhile
from .lbfgs.launches import bind
from .problem import Problem, products


def lbfgs_on_host(evaluate: Any, problem: Problem,
                  rounding: float | Callable[[], float] = FLOAT32_ROUNDING) -> dict[str, Any]:
    """L-BFGS on the penalised mean cross-entropy (OWL-QN with an L1 part); ``evaluate``
    sums the shards (weighted where the rows are), its values rounded as ``rounding``
    says (float32's unless the caller knows them more exact: :func:`.rules.rounding_of`;
    a function: asked once ``evaluate`` has run).  Without an intercept its gradient is
    held at zero, so the intercept stays at its start, zero."""
    d, k, penalty = problem.d, problem.n_classes, problem.penalty
    total = problem.weight_sum or problem.n
    keep_b = 1.0 if problem.fit_intercept else 0.0

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        W = theta[: d * k].reshape(d, k)
        b = theta[d * k:]
        loss, gW, gb = evaluate(W, b)
        value = loss / total + 0.5 * penalty * float((W * W).sum())
        grad = np.concatenate([(gW / total + penalty * W).ravel(), keep_b * gb / total])
        return value, grad

    l1 = np.concatenate([np.full(d * k, problem.l1), np.zeros(k)]) if problem.l1 > 0 else None
    return loop.minimize_lbfgs(objective, np.zeros(d * k + k), maxiter=problem.max_iter,
                               gtol=problem.gtol, l1=l1, rounding=rounding)


def on_device(arrays: list[tuple[Any, Any]], problem: Problem) -> bool:
    """Whether the L-BFGS (OWL-QN with an L1 part) runs on the GPU: every shard on a GPU,
    and not refused."""
    possible = device_lbfgs.usable(arrays)
    if problem.optimizer == "device" and not possible:
        raise DataError("optimizer='device' needs every shard on a GPU; use optimizer='auto' "
                        "or 'host'")
    return possible and problem.optimizer != "host"


def fit_on_device(arrays: list[tuple[Any, Any]], problem: Problem,
                  kept_under: tuple[list[Any], tuple] | None = None) -> dict[str, Any]:
    """The whole L-BFGS on this process's GPU over shards on any GPUs it sees.

    ``kept_under``: ``(blocks, entry)`` of :mod:`.kept_with_blocks` -- the blocks the rows were
    made from and what they are kept under -- for a fit of rows this process keeps
    (its own, or the shards it joined): the L-BFGS's buffers, bound launches and
    captured graph are then kept with those blocks and the next fit of the same rows
    and problem starts from them (``profile["state kept"]``), not from new ones.

    With ``optimizer="auto"``, the first fit of a process whose loop kernels are still
    being compiled once its evaluations are ready (a machine's first) runs the host's
    L-BFGS on those evaluations instead of waiting (:mod:`.lbfgs.meanwhile`; ``optimizer``
    "host" and a note in the result); later fits and ``"device"`` wait for them.
    """
    started = time.perf_counter()
    fingerprint = _fingerprint(problem)
    backend = None if kept_under is None else kept_backend(kept_under, fingerprint, arrays)
    reused = backend is not None
    if backend is None:
        backend = device_lbfgs.DeviceBackend(arrays, problem.n_classes,
                                             problem.weight_sum or problem.n,
                                             problem.penalty, precision=problem.precision,
                                             scale=problem.scale,
                                             fit_intercept=problem.fit_intercept,
                                             l1=problem.l1, bind_loop=False)
    keep = False
    try:
        ready = time.perf_counter()
        if bind(backend, wait=problem.optimizer == "device"):
            result = loop.run(backend, maxiter=problem.max_iter, gtol=problem.gtol)
            solved = time.perf_counter()
            details = device_profile(backend, result, solved - ready)
            how = {"optimizer": "device", "graph": details["graph"],
                   "graph_note": details["graph note"], "launch_note": details["launch note"]}
        else:  # the loop's kernels are compiling: the host's L-BFGS on these evaluations
            result = lbfgs_on_host(functools.partial(meanwhile.evaluate, backend), problem,
                                   backend.rounding)
            solved = time.perf_counter()
            details = {"optimizer": "host", "iterations": result["nit"],
                       "evaluations": result["nfev"], "loop kernels compiling": True}
            how = {"optimizer": "host", "graph": None, "optimizer_note": meanwhile.NOTE}
        ran = products(backend.objectives)
        keep = kept_under is not None
    finally:
        if keep:
            kept_with_blocks.keep(kept_under[0], kept_under[1], KeptFit(fingerprint, backend))
        else:
            backend.close()
    return {**result, **ran, **how,
            "profile": {"buffers": ready - started, "L-BFGS": solved - ready, **details,
                        "state kept": reused}}


class KeptFit(NamedTuple):
    """A device L-BFGS kept for the next fit of the same rows (in :mod:`.kept_with_blocks`)."""

    made_for: tuple
    backend: Any

    def drop(self) -> None:
        """Let go of its buffers and graph (it goes from :mod:`.kept_with_blocks`)."""
        self.backend.close()


def _fingerprint(problem: Problem) -> tuple:
    """What a device L-BFGS is made for besides its rows and labels."""
    return (problem.n_classes, problem.n, problem.penalty, str(problem.precision),
            problem.scale, problem.fit_intercept, problem.l1)


def kept_backend(kept_under: tuple[list[Any], tuple], fingerprint: tuple,
                 arrays: list[tuple[Any, Any]]) -> Any:
    """The device L-BFGS kept under ``kept_under`` (:func:`fit_on_device`), taken out and
    ready for ``arrays`` (their labels copied in, its state zeroed) where it was made for
    this problem (``fingerprint``) and these rows; else None, and one kept for another
    problem or other rows is let go."""
    found = kept_with_blocks.take(*kept_under)
    if found is kept_with_blocks.MISSING:
        return None
    made_for, backend = found
    if made_for == fingerprint and backend.reuse(arrays):
        return backend
    backend.close()
    return None


def device_profile(backend: device_lbfgs.DeviceBackend, result: dict[str, Any],
                   seconds: float) -> dict[str, Any]:
    """What a device fit reports in ``fit_profile_``: iterations, evaluations, host syncs,
    device time, whether each iteration ran as one CUDA graph (and why not)."""
    return {"optimizer": "device", "iterations": result["nit"], "evaluations": result["nfev"],
            "line searches": result["searches"], "host syncs": backend.syncs,
            "run ahead": backend.run_ahead, "bridge": backend.bridge,
            "iterations bridged": backend.bridged,
            "device seconds, first evaluation": backend.first_evaluation_seconds(),
            "host seconds per iteration": seconds / max(1, result["nit"]),
            "shards": len(backend.objectives),
            "graph": backend.graphed, "graph note": backend.graph_note,
            "launch note": backend.launch_note,
            "graph capture seconds": backend.graph_seconds,
            "evaluation": ",".join(sorted({_evaluation(o) for o in backend.objectives}))}


def _evaluation(objective: Any) -> str:
    """How a shard's evaluation ran, for the profile: ``fp32``, ``fp32 in one pass``,
    ``fp32 in one pass, 3xTF32 tensor cores``, ``int8`` ..."""
    how = str(objective.precision)
    if objective.one_pass:
        how += " in one pass"
    if objective.tensor_cores:
        how += ", 3xTF32 tensor cores"
    return how
