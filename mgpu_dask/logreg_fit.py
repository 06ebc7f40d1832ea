"""What runs on the workers for ``LogisticRegression``: the single-host fit, the holders'
exports, the per-shard objectives of the fit by messages, and the predict blocks.

The estimator (``mgpu_dask.logreg``) sends these functions in its tasks; they import
no scikit-learn, so a worker (and the fork server that starts local workers, which
imports this module ahead) never pays for it.  Two ways to run the L-BFGS loop
(ours, float64: ``lbfgs``):

* ``single-host`` (default where it applies): every holder exports its rows
  and labels once (CUDA IPC / shared memory, ``peer_views``) and one worker
  runs the whole loop (:func:`fit_on_leader`), evaluating each shard on its own
  GPU, all GPUs at once; with every shard on a GPU the loop's vectors stay on
  that worker's GPU (``device_lbfgs``).  One Dask round trip per fit, whatever
  the iteration count.
* ``actors`` (any cluster, several hosts): the loop runs on the client; each
  evaluation is one direct call to one :class:`ShardLossGrad` Actor per worker,
  which returns one float and the 785x10 gradient.
"""

from __future__ import annotations

import concurrent.futures
import os
import time
from typing import Any, NamedTuple

import numpy as np

from . import device_lbfgs, lbfgs, peer_views
from . import labels as labels_mod
from .exceptions import DataError
from .kernels import logreg as kernels
from .kernels._launch import array_module, as_numpy, on_gpu
from .lbfgs import minimize_lbfgs


class Problem(NamedTuple):
    n: int
    d: int
    n_classes: int | None   # None: the leader finds the classes of the labels it maps
    penalty: float          # 1 / (C n)
    options: dict[str, Any]  # "classes": the declared ones, where the leader finds them


class HeldLabels(NamedTuple):
    """A holder's label blocks, named by their keys on that worker: labels that live
    beside their rows and never travel with the fit."""

    keys: list[Any]


class CallObjective:
    """A user-supplied per-shard ``loss_grad`` behind ``ShardObjective``'s interface; it
    gets the rows as the objective sees them (float32, times ``scale``)."""

    def __init__(self, fn: Any, X: Any, labels: Any, scale: float | None = None) -> None:
        if on_gpu(X):
            import cupy

            with cupy.cuda.Device(X.device.id):
                X = kernels.scaled_rows(X, scale)
        else:
            X = kernels.scaled_rows(X, scale)
        self.fn, self.X, self.labels = fn, X, labels
        self._out: tuple | None = None

    def launch(self, coef: np.ndarray, intercept: np.ndarray) -> None:
        self._out = self(coef, intercept)

    def collect(self) -> tuple:
        out, self._out = self._out, None
        return out

    def __call__(self, coef: np.ndarray, intercept: np.ndarray) -> tuple:
        if on_gpu(self.X):  # one process may hold shards of several GPUs: use this one's
            import cupy

            with cupy.cuda.Device(self.X.device.id):
                return self.fn(self.X, self.labels, coef, intercept)
        return self.fn(self.X, self.labels, coef, intercept)


NOT_FINITE = "Input X contains NaN or infinity; clean or impute it first"


def sum_parts(parts: list[tuple]) -> tuple:
    """Add the shards' (loss, grad_coef, grad_intercept) triples."""
    return (sum(p[0] for p in parts), sum(p[1] for p in parts), sum(p[2] for p in parts))


def objective_for(X: Any, labels: Any, n_classes: int, loss_grad: Any,
                   method: str = "cublas", scale: float | None = None) -> Any:
    return (kernels.ShardObjective(X, labels, n_classes, method, scale)
            if loss_grad is None else CallObjective(loss_grad, X, labels, scale))


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

    return minimize_lbfgs(objective, np.zeros(d * k + k), maxiter=problem.options["maxiter"],
                          gtol=problem.options["gtol"])


def on_device(arrays: list[tuple[Any, Any]], problem: Problem, loss_grad: Any) -> bool:
    """Whether the L-BFGS runs on the GPU: our kernel, every shard on a GPU, not refused."""
    wanted = problem.options.get("optimizer", "auto")
    possible = loss_grad is None and device_lbfgs.usable(arrays)
    if wanted == "device" and not possible:
        raise DataError("optimizer='device' needs every shard on a GPU and loss_grad=None; "
                        "use optimizer='auto' or 'host'")
    return possible and wanted != "host"


def fit_on_device(arrays: list[tuple[Any, Any]], problem: Problem) -> dict[str, Any]:
    """The whole L-BFGS on this process's GPU over shards on any GPUs it sees."""
    started = time.perf_counter()
    backend = device_lbfgs.DeviceBackend(arrays, problem.n_classes, problem.n, problem.penalty,
                                         method=problem.options["method"],
                                         scale=problem.options.get("scale"))
    try:
        ready = time.perf_counter()
        result = lbfgs.run(backend, maxiter=problem.options["maxiter"],
                           gtol=problem.options["gtol"])
        solved = time.perf_counter()
        details = device_lbfgs.profile(backend, result, solved - ready)
    finally:
        backend.close()
    return {**result, "optimizer": "device",
            "profile": {"buffers": ready - started, "L-BFGS": solved - ready, **details}}


PEER_SECONDS = 600.0  # the longest a leader waits for a peer's export (the fit's own timeout
                     # is the client's; this only keeps a leader from waiting forever)


def levels_wanted(problem: Problem, loss_grad: Any) -> bool:
    """Whether the holders should export their rows as int8 levels (the device L-BFGS with
    the int8 products, if the rows are levels): never where X itself is needed."""
    return (loss_grad is None and problem.options.get("optimizer", "auto") != "host"
            and problem.options["method"] in ("auto", "int8", "int8-or-cublas"))


def fit_on_leader(shards: list[dict[str, Any]], problem: Problem,
                   loss_grad: Any = None) -> dict[str, Any]:
    """Runs on one worker: map every shard of the host and run the whole L-BFGS here.

    The leader asks every other holder for its export straight away (one
    message each way, no scheduler in between, ``peer_views.call``; they
    convert and export at the same time as the leader prepares its own rows,
    which it exports in place), maps them all and, with every shard on a
    GPU, keeps the optimiser's vectors on this worker's GPU
    (``device_lbfgs``); otherwise each evaluation queues every shard's work
    on its own GPU first and then waits for them all, so the GPUs compute at
    the same time.  Afterwards it closes its mappings and tells the holders
    to release their exports (waiting for their answers: a few hundred
    microseconds), so the client has nothing left to do.  Shards come as
    ``{"own rows", "labels", "token"}`` (this worker's, the blocks
    themselves) or ``{"address", "keys", "labels", "token"}`` (another
    worker's: the keys of its blocks there).  ``labels`` are the shard's
    class indices (NumPy, sent by the client), or its label blocks
    themselves (the leader's own, a list) or by their keys (a holder's,
    :class:`HeldLabels`); with ``problem.n_classes`` None the leader finds
    the classes from what every shard holds and returns them as
    ``"classes"``.
    """
    began = time.time()
    levels = levels_wanted(problem, loss_grad)
    scale = problem.options.get("scale")
    token = shards[0]["token"] if shards else ""
    discover = problem.n_classes is None
    asked = {i: (s["address"], peer_views.call(s["address"], export_held, token, s["keys"],
                                               s["labels"], levels, scale, discover))
             for i, s in enumerate(shards) if "keys" in s}
    exporters = sorted({address for address, _ in asked.values()})
    try:
        started = time.perf_counter()
        own = {i: export_rows(token, s["own rows"], s["labels"], in_place=True, levels=levels,
                               scale=scale, discover=discover)
               for i, s in enumerate(shards) if i not in asked}
        ready = time.perf_counter()
        described = [asked[i][1].result(timeout=PEER_SECONDS) if i in asked else own[i]
                     for i in range(len(shards))]
        exported = time.perf_counter()
        result = _fit_mapped(described, problem, loss_grad)
    finally:
        if shards:
            peer_views.release(token)
        # A holder still exporting (the leader failed first) would export after its
        # release and keep the copy: let the asked exports end before releasing.
        concurrent.futures.wait([future for _, future in asked.values()], timeout=PEER_SECONDS)
        released = [peer_views.call(address, peer_views.release, token) for address in exporters]
        for future in released:  # an exporter lost on the way: nothing of it to release
            try:
                future.result(timeout=10)
            except Exception:
                pass
    result["released"] = exporters
    if "profile" in result:  # wall-clock ends, for the client's share of the time
        result["profile"] = {"own export": ready - started,
                             "waiting for the holders": exported - ready, **result["profile"]}
        result["profile"]["leader began at"], result["profile"]["leader ended at"] = (
            began, time.time())
    return result


def _shard_arrays(desc: dict[str, Any], arrays: list[Any],
                  classes: np.ndarray | None) -> tuple[Any, Any]:
    """``(rows, class indices)`` of one opened export: X, or the int8 ``Levels`` a holder
    made, and its labels as int32 indices made on their device (``classes``: of labels
    that came as they are; else they are indices already, in their smallest type)."""
    made = desc.get("info", {}).get("levels")
    X = kernels.Levels(*arrays[:2], *made) if made is not None else arrays[0]
    labels = arrays[-1]
    if on_gpu(labels):
        import cupy

        with cupy.cuda.Device(labels.device.id):
            return X, labels_mod.codes(labels, classes)
    return X, labels_mod.codes(labels, classes)


def _fit_mapped(shards: list[dict[str, Any]], problem: Problem,
                loss_grad: Any) -> dict[str, Any]:
    exporters = [s["address"] for s in shards if s["address"] and s["pid"] != os.getpid()]
    if not all(s["finite"] for s in shards):  # refused in the result: no worker traceback
        return {"refused": "not finite", "exporters": exporters}
    if len({s["host"] for s in shards}) > 1:
        return {"refused": "the shards live on more than one host", "exporters": exporters}
    found: dict[str, Any] = {}
    if problem.n_classes is None:  # the labels came as they are: their classes, here
        try:
            classes = labels_mod.at_least_two(labels_mod.classes_from(
                [s["info"]["classes"] for s in shards], problem.options.get("classes")))
        except DataError as exc:
            return {"refused": "labels", "message": str(exc), "exporters": exporters}
        problem, found = problem._replace(n_classes=len(classes)), {"classes": classes}
    started = time.perf_counter()
    with peer_views.opened(shards) as opened:
        arrays = [_shard_arrays(desc, a, found.get("classes")) for desc, a in zip(shards, opened)]
        if on_device(arrays, problem, loss_grad):
            mapped = time.perf_counter()
            result = fit_on_device(arrays, problem)
            result["profile"] = {"map": mapped - started, **result["profile"]}
            arrays.clear()
            return {**result, **found, "exporters": exporters}
        scale = problem.options.get("scale")  # the levels' step holds it already
        arrays = [(X.rows(), y, None) if isinstance(X, kernels.Levels) else (X, y, scale)
                  for X, y in arrays]
        objectives = [objective_for(X, labels, problem.n_classes, loss_grad,
                                     problem.options["method"], shard_scale)
                      for X, labels, shard_scale in arrays]
        arrays.clear()
        ready = time.perf_counter()

        def evaluate(W: np.ndarray, b: np.ndarray) -> tuple:
            for objective in objectives:
                objective.launch(W, b)
            return sum_parts([objective.collect() for objective in objectives])

        try:
            result = lbfgs_on_host(evaluate, problem)
        finally:
            objectives.clear()  # the mapped shards must have no users when they close
        solved = time.perf_counter()
    return {**result, **found, "optimizer": "host", "exporters": exporters,
            "profile": {"map and buffers": ready - started, "L-BFGS": solved - ready,
                        "unmap": time.perf_counter() - solved}}


def export_rows(token: str, blocks: list[Any], labels: Any, in_place: bool = False,
                 levels: bool = False, scale: float | None = None,
                 discover: bool = False) -> dict[str, Any]:
    """On a holder: export its row blocks and their labels (on the rows' device); in place
    on the leader's own worker (the fit reads them in this process).  ``labels``: the
    class indices the client sent (NumPy, in their smallest type) or the label blocks
    held here (a list); either goes as it is, the leader widens it.  ``levels``: rows
    on a GPU that are 8-bit levels (uint8 rows always are) go as the int8 products'
    ``Levels`` of ``X * scale`` instead of X (converted here, on this GPU; the
    description says so).  ``discover``: the description names the label values
    present (``info["classes"]``)."""
    xp = array_module(blocks[0])
    if isinstance(labels, list):
        labels = labels[0] if len(labels) == 1 else array_module(labels[0]).concatenate(labels)
    info: dict[str, Any] = {}
    if xp is not np:
        with xp.cuda.Device(blocks[0].device.id):
            labels = xp.asarray(labels)
            if discover:
                info["classes"] = labels_mod.present(labels)
            if levels:
                from .kernels import logreg_int8

                X = blocks[0] if len(blocks) == 1 else xp.concatenate(blocks)
                made = logreg_int8.levels(X, None if in_place else peer_views.dedicated,
                                          scale=scale)
                if made is not None:
                    return peer_views.export(token, [[made.v], [made.vt], [labels]], in_place,
                                             owned=True,
                                             info={**info, "levels": [made.step, made.n, made.d]})
    else:
        labels = as_numpy(labels)
        if discover:
            info["classes"] = labels_mod.present(labels)
    return peer_views.export(token, [blocks, [labels]], in_place=in_place, info=info)


async def export_held(token: str, keys: list[Any], labels: Any, levels: bool,
                       scale: float | None = None, discover: bool = False,
                       dask_worker: Any = None) -> dict[str, Any]:
    """On a holder, asked by the leader (``peer_views.call``): export the blocks it holds
    under ``keys`` (``export_rows``; labels held here come as :class:`HeldLabels`), in a
    thread of its own, not on the event loop."""
    import asyncio

    try:
        blocks = [dask_worker.data[key] for key in keys]
        if isinstance(labels, HeldLabels):
            labels = [dask_worker.data[key] for key in labels.keys]
    except KeyError as exc:
        raise peer_views.PeerUnavailable(f"block {exc} is no longer on worker "
                                         f"{dask_worker.address}") from None
    return await asyncio.to_thread(export_rows, token, blocks, labels, False, levels, scale,
                                   discover)


class ShardLossGrad:
    """A Dask Actor holding one worker's row blocks; returns their summed loss and gradient."""

    def __init__(self, n_blocks: int, *blocks: Any, loss_grad: Any = None,
                 method: str = "cublas", scale: float | None = None) -> None:
        self._loss_grad = loss_grad
        self._method = method
        self._scale = scale
        xs, ys = blocks[:n_blocks], blocks[n_blocks:]
        xp = array_module(xs[0])
        self.X = xs[0] if n_blocks == 1 else xp.concatenate(xs)
        self.y = ys[0] if n_blocks == 1 else xp.concatenate(ys)
        self._objective: Any = None

    def loss_grad(self, coef: np.ndarray, intercept: np.ndarray) -> tuple:
        if self._objective is None:
            self._objective = objective_for(self.X, self.y, len(intercept), self._loss_grad,
                                             self._method, self._scale)
        return self._objective(coef, intercept)


def scaled_call(fn: Any, scale: float | None, X: Any, labels: Any, coef: np.ndarray,
                 intercept: np.ndarray) -> tuple:
    """``fn`` (a per-shard loss_grad) on the rows ``X * scale`` as float32."""
    return fn(kernels.scaled_rows(X, scale), labels, coef, intercept)


def predict_block(X: Any, coef: np.ndarray, intercept: np.ndarray, classes: np.ndarray,
                   host: bool = False) -> Any:
    xp = array_module(X)
    pred = xp.asarray(classes)[kernels.decision(X, coef, intercept).argmax(axis=1)]
    return as_numpy(pred) if host else pred


def proba_block(X: Any, coef: np.ndarray, intercept: np.ndarray, host: bool = False) -> Any:
    xp = array_module(X)
    z = kernels.decision(X, coef, intercept).astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    p = xp.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    return as_numpy(p) if host else p


def alive_workers(dask_scheduler: Any) -> list[str]:
    return list(dask_scheduler.workers)
