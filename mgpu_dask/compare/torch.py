"""PyTorch on every worker's device, on our dask shards handed over through DLPack.

The multi-GPU PyTorch a Dask user would write, on the same shards as ours
(no copy: each block becomes a tensor through DLPack where it lives):

* KNN: the CuPy row's placement (test rows sharded, the training set copied
  once per worker as float32 rows, :mod:`.on_shards`); per query block the
  PyTorch script's GEMM (fp32, no TF32), ``torch.topk`` and vote
  (:func:`.torch_ops.knn_predict`) on the block's worker.
* Logistic regression: one task per worker holding training rows runs
  full-batch ``torch.optim.LBFGS`` on its rows; with several workers they
  form a ``torch.distributed`` group (NCCL on GPUs, Gloo on CPUs; rendezvous
  on the first worker's host) and every evaluation all-reduces the data
  term and gradient, so all take the same steps -- data parallelism as in
  PyTorch's DDP, with L-BFGS.  The group is made once per run (its cold fit),
  kept for the warm ones and closed at the end.  Prediction: ``argmax(X W + b)`` per test block
  where it lives.
"""

from __future__ import annotations

import socket
import uuid
from datetime import timedelta
from typing import Any

import numpy as np
from distributed.comm import get_address_host

from ..parallel import placement
from ..parallel.inputs import to_host
from .backend import DASK, BackendRun, BackendSkipped, converted_note, repeat
from .cupy import knn_on_copies, prepare_rows, shifted_queries
from .on_shards import scaled_rows
from .torch_ops import knn_predict, lbfgs_fit, predict_block, tensor

_GROUP: dict[str, Any] = {"token": None}  # this worker process's torch.distributed group


def _torch_block(Qb: Any, copy: tuple, k: int, weights: str, n_classes: int) -> np.ndarray:
    """One query block against this worker's copy, in PyTorch (DLPack views of the CuPy
    or NumPy arrays); host predictions."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 products, as the script
    T, norms, labels = copy
    Q = tensor(shifted_queries(Qb, T))
    pred = knn_predict(tensor(T), tensor(norms), tensor(labels).long(), Q, k, weights,
                       n_classes)
    return pred.cpu().numpy()


def knn(run: BackendRun) -> dict[str, Any]:
    return {**knn_on_copies(run, prepare_rows, _torch_block, "the PyTorch KNN"),
            "note": converted_note(run)}


# -- logistic regression --------------------------------------------------------------------


def _free_port(host: str) -> int:
    """A port free just now on ``host`` (this worker's), for the group's rendezvous."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _join(token: str, rank: int, world: int, address: str, device: Any,
          timeout: float) -> None:
    """This process in the run's group (once per run: warm fits reuse it)."""
    import torch.distributed as dist

    if _GROUP["token"] == token and dist.is_initialized():
        return
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=address,
                            rank=rank, world_size=world, timeout=timedelta(seconds=timeout))
    _GROUP["token"] = token


def _leave(token: str) -> None:
    """Close the run's group on this worker (its store's port and the NCCL communicators)."""
    import torch.distributed as dist

    if _GROUP["token"] == token and dist.is_initialized():
        dist.destroy_process_group()
    _GROUP["token"] = None


def _fit_here(blocks: list, codes: list, token: str, rank: int, world: int, address: str,
              n_total: int, n_classes: int, options: dict[str, Any], timeout: float) -> Any:
    """One worker's part of the fit: its blocks as tensors, L-BFGS in step with the others.
    Rank 0 returns ``(coef, intercept, iterations)`` as NumPy, the others None."""
    import torch

    Xs = [tensor(b) for b in blocks]
    ys = [tensor(c).long() for c in codes]
    device = Xs[0].device
    reduce = None
    if world > 1:
        import torch.distributed as dist

        _join(token, rank, world, address, device, timeout)
        reduce = dist.all_reduce
    W, b, iterations = lbfgs_fit(Xs, ys, n_total, n_classes, options["C"],
                                 options["max_iter"], options["tol"], reduce)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (W.cpu().numpy(), b.cpu().numpy(), iterations) if rank == 0 else None


def _predict_here(X: Any, coef: np.ndarray, intercept: np.ndarray) -> np.ndarray:
    """Class indices of one test block where it lives, to the host."""
    import torch

    Xt = tensor(X)
    pred = predict_block(Xt, torch.as_tensor(coef, device=Xt.device),
                         torch.as_tensor(intercept, device=Xt.device))
    return pred.cpu().numpy()


def logreg(run: BackendRun) -> dict[str, Any]:
    client, o = run.client, run.options
    if client is None:
        raise BackendSkipped("the PyTorch row runs on the cluster's workers; start one")
    X, Xt, codes, classes, placing = scaled_rows(run, np.int64)
    (blocks, where), (labels, _) = (placement.locate(client, a) for a in (X, codes))
    by_worker: dict[str, list[int]] = {}
    for i, worker in enumerate(where):
        if X.chunks[0][i]:
            by_worker.setdefault(worker, []).append(i)
    ranks = sorted(by_worker)
    world, token = len(ranks), uuid.uuid4().hex
    host = get_address_host(ranks[0])
    address = ""
    if world > 1:
        port = client.submit(_free_port, host, workers=[ranks[0]], pure=False).result(
            timeout=run.timeout)
        address = f"tcp://{host}:{port}"
    options = {"C": o["C"], "max_iter": o["max_iter"], "tol": o["tol"]}

    def fit() -> tuple:
        futures = [client.submit(_fit_here, [blocks[i] for i in by_worker[w]],
                                 [labels[i] for i in by_worker[w]], token, rank, world,
                                 address, int(X.shape[0]), len(classes), options, run.timeout,
                                 workers=[w], allow_other_workers=False, pure=False)
                   for rank, w in enumerate(ranks)]
        return [f.result(timeout=run.timeout) for f in futures][0]  # every rank done

    def predict(model: tuple) -> np.ndarray:
        coef, intercept, _ = model
        pred = placement.map_blocks(client, _predict_here, Xt, coef, intercept,
                                    name=placement.fresh_name("torch-predict"),
                                    chunks=(Xt.chunks[0],), meta=np.empty(0, np.int64))
        return classes[to_host(pred, run.timeout)]

    try:
        out = repeat(run, fit, predict)
    finally:
        if world > 1:
            client.gather([client.submit(_leave, token, workers=[w], pure=False)
                           for w in ranks])
    return {**out, "placing": placing, "timed": DASK,
            "note": f"torch.distributed over {world} workers" if world > 1 else "one worker"}
