"""FAISS's exact flat index (``IndexFlatL2``) on the GPUs of one worker: the strongest
exact KNN a user could pick instead of ours.

As users run it, FAISS is one process: the host rows go to one worker once
(``one_worker``; the placement), and each repetition builds the index there
and searches the k nearest of every test row; the vote (uniform, or weighted by
the inverse distance, as scikit-learn's) is the array vote the other backends
share.  Float32 throughout.  Where that worker sees:

* one GPU: the rows are copied into its memory once (placement) and
  ``GpuIndexFlatL2`` adds and searches them there through device pointers,
  on the CUDA null stream that CuPy also uses -- resident, like our row.  FAISS's
  flat index runs in several configurations (its classic kernels or cuVS's, float32
  or float16 storage): each is tried once, and the fastest whose predictions are the
  float32 index's runs the row (the note names it), as a user would pick it;
* several GPUs: ``index_cpu_to_all_gpus`` over all of them, as replicas
  (``--faiss-shards``: the training rows split instead), from host rows (FAISS
  copies them to each GPU in the timed fit; the note says so);
* no GPU (CPU runs, CI): FAISS's CPU ``IndexFlatL2`` on host rows.

A worker with a GPU but a FAISS without GPU support is refused (the row would
be a CPU figure).  FAISS has no logistic regression: that row says so.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from .backend import BackendRun, BackendSkipped, converted_note, join_notes
from .cupy import vote
from .one_worker import repeat_here, rows_for, run_on_one_worker

INSTALL = "pip install 'mgpu-dask[faiss-cu13]' (CUDA 13) or 'mgpu-dask[faiss-cu12]'"
_RESOURCES: dict[str, Any] = {}


def _resources(faiss: Any) -> Any:
    """One ``StandardGpuResources`` per worker process, on the null stream (CuPy's)."""
    if "gpu" not in _RESOURCES:
        res = faiss.StandardGpuResources()
        res.setDefaultNullStreamAllDevices()
        _RESOURCES["gpu"] = res
    return _RESOURCES["gpu"]


def _gpus(faiss: Any) -> int:
    return int(faiss.get_num_gpus()) if hasattr(faiss, "get_num_gpus") else 0


def configurations(faiss: Any) -> list[tuple[str, Any]]:
    """FAISS's exact flat-index configurations on a GPU, each as ``(name, config)``:
    classic or cuVS kernels (where this FAISS has cuVS), float32 or float16 storage."""
    out = []
    for cuvs in (False, True):
        for half in (False, True):
            config = faiss.GpuIndexFlatConfig()
            config.useFloat16 = half
            if hasattr(config, "use_cuvs"):
                config.use_cuvs = cuvs
            elif cuvs:
                continue
            out.append((f"{'cuVS' if cuvs else 'classic'} {'fp16' if half else 'fp32'}",
                        config))
    return out


def _one_gpu(faiss: Any, X: np.ndarray, codes: np.ndarray, Xt: np.ndarray, k: int,
             weights: str, n_classes: int) -> tuple[Any, Any, Any, float, str]:
    """fit, predict and sync on rows resident on this worker's GPU (device pointers), in
    FAISS's fastest configuration that predicts as its float32 index does (and its name)."""
    import cupy

    res = _resources(faiss)
    started = time.perf_counter()
    T = cupy.ascontiguousarray(cupy.asarray(X, dtype=np.float32))
    Q = cupy.ascontiguousarray(cupy.asarray(Xt, dtype=np.float32))
    labels = cupy.asarray(codes)
    cupy.cuda.Device().synchronize()
    upload = time.perf_counter() - started
    chosen: list[Any] = []

    def fit() -> Any:
        index = faiss.GpuIndexFlatL2(res, T.shape[1], *chosen)
        index.add_c(T.shape[0], faiss.cast_integer_to_float_ptr(T.data.ptr))
        return index

    def predict(index: Any) -> np.ndarray:
        squared = cupy.empty((Q.shape[0], k), dtype=np.float32)
        nearest = cupy.empty((Q.shape[0], k), dtype=np.int64)
        index.search_c(Q.shape[0], faiss.cast_integer_to_float_ptr(Q.data.ptr), k,
                       faiss.cast_integer_to_float_ptr(squared.data.ptr),
                       faiss.cast_integer_to_idx_t_ptr(nearest.data.ptr))
        dist = cupy.sqrt(cupy.maximum(squared, 0)).astype(np.float64)
        return cupy.asnumpy(vote(dist, labels[nearest], weights, n_classes))

    sync = cupy.cuda.Device().synchronize
    tried, reference = [], None
    for name, config in configurations(faiss):
        chosen[:] = [config]
        try:
            index = fit()
            predict(index)  # warm
            sync()
            t0 = time.perf_counter()
            pred = predict(index)
            sync()
            seconds = time.perf_counter() - t0
        except Exception:  # a configuration this build or GPU does not run
            continue
        reference = pred if reference is None else reference
        if np.array_equal(pred, reference):
            tried.append((seconds, name, config))
    if not tried:
        raise BackendSkipped("FAISS's flat index ran in none of its configurations here")
    seconds, name, config = min(tried, key=lambda t: t[0])
    chosen[:] = [config]
    return fit, predict, sync, upload, f"{name}, fastest of {len(tried)} that predict alike"


def _from_host(faiss: Any, X: np.ndarray, codes: np.ndarray, Xt: np.ndarray, k: int,
               weights: str, n_classes: int, gpus: int, shards: bool) -> tuple[Any, Any]:
    """fit and predict from host rows: FAISS's CPU index, or every GPU it sees."""
    T = np.ascontiguousarray(X, dtype=np.float32)
    Q = np.ascontiguousarray(Xt, dtype=np.float32)

    def fit() -> Any:
        if gpus == 0:
            index = faiss.IndexFlatL2(T.shape[1])
        else:
            options = faiss.GpuMultipleClonerOptions()
            options.shard = shards
            index = faiss.index_cpu_to_all_gpus(faiss.IndexFlatL2(T.shape[1]), co=options,
                                                ngpu=gpus)
        index.add(T)
        return index

    def predict(index: Any) -> np.ndarray:
        squared, nearest = index.search(Q, k)
        dist = np.sqrt(np.maximum(squared, 0)).astype(np.float64)
        return vote(dist, codes[nearest], weights, n_classes)

    return fit, predict


def _on_worker(task: str, X: np.ndarray, y: np.ndarray, Xt: np.ndarray, yt: np.ndarray,
               options: dict[str, Any], repeats: int) -> dict[str, Any]:
    """Runs on one worker: rows where FAISS reads them, then one cold and ``repeats``
    warm (build, search and vote) repetitions."""
    import faiss

    from ..config.environment import has_gpu

    gpus = _gpus(faiss)
    if gpus == 0 and has_gpu():
        raise BackendSkipped(f"this FAISS was built without GPU support; {INSTALL}")
    classes = np.unique(y)
    codes = np.searchsorted(classes, y).astype(np.int32)
    args = (int(options["k"]), options.get("weights", "distance"), len(classes))
    shards = bool(options.get("faiss_shards"))
    sync, upload = (lambda: None), 0.0
    if gpus == 1:
        fit, predict, sync, upload, picked = _one_gpu(faiss, X, codes, Xt, *args)
        where = f"one GPU (GpuIndexFlatL2, {picked}), rows resident on it"
    else:
        fit, predict = _from_host(faiss, X, codes, Xt, *args, gpus, shards)
        where = ("FAISS's CPU IndexFlatL2" if gpus == 0 else
                 f"{gpus} GPUs as {'shards' if shards else 'replicas'}, each fit copying "
                 "the host rows to them")
    out = repeat_here(fit, predict, np.searchsorted(classes, yt), repeats, sync)
    return {**out, "upload": upload, "where": where}


def knn(run: BackendRun) -> dict[str, Any]:
    out = run_on_one_worker(run, _on_worker, "knn", *rows_for("knn", run), "FAISS")
    note = join_notes(f"exact flat index, {out.pop('where')}", converted_note(run))
    return {**out, "note": note}


def logreg(run: BackendRun) -> dict[str, Any]:
    raise BackendSkipped("FAISS is vector search only (no logistic regression)")
