"""KNN on a user's own data, beside FAISS, PyTorch and cuML in the same process: the
README's own-data KNN table.

As a new user would: their own ``dask_cuda.LocalCUDACluster`` (or a running scheduler,
``--scheduler-address``), their own dask arrays of CuPy chunks (synthetic clustered
float32 rows, made on the workers), ``KNeighborsClassifier(k).fit(X, y)`` and
``predict(Q, on_host=True)`` (the predictions brought to the client); k = 10.  Each case
times our fit, our first predict after it and our warm predicts, then the peers on the
same rows: FAISS's flat index in each of its exact configurations (with and without
cuVS, float32 and float16 storage; queries from the host, results to the host), PyTorch
(``cdist`` or ``mm`` and ``topk`` in blocks of 1,000 queries, rows on the device) and cuML's
single-GPU brute force, each where installed.  The neighbours of 256 queries are
checked against a float64 brute force (``recall``: the share of the true k found).

    python benchmarks/knn_data.py OUT.json [--cases 100k-32,1m-128] [--repeats 5] [--margin N]
        [--plan shard]
    python tests/shared_gpu.py 2 -- python benchmarks/knn_data.py OUT.json --cases 1m-128
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import time
from typing import Any, Iterator, NamedTuple

import numpy as np

K_NEIGHBOURS = 10
CLUSTERS = 100
CHECKED = 256
MADE_IN = 8
"""Blocks the rows are made in (then rechunked to one chunk per worker), here and in
``logreg_data.py``: every worker count gets the same rows."""


def made_sizes(rows: int) -> list[int]:
    """The sizes of the :data:`MADE_IN` blocks that ``rows`` rows are made in."""
    made = -(-rows // MADE_IN)
    return [min(made, rows - s) for s in range(0, rows, made)]


class Case(NamedTuple):
    name: str
    rows: int
    features: int
    queries: int
    metric: str
    query_chunks: int   # query rows per chunk (= queries: one chunk)


CASES = {c.name: c for c in (
    Case("100k-32", 100_000, 32, 10_000, "euclidean", 10_000),
    Case("1m-128", 1_000_000, 128, 10_000, "euclidean", 10_000),
    Case("1m-768-cosine", 1_000_000, 768, 10_000, "cosine", 10_000),
    Case("10m-96", 10_000_000, 96, 10_000, "euclidean", 10_000),
    Case("1m-128-100kq", 1_000_000, 128, 100_000, "euclidean", 100_000),
)}


def _block(seed: int, rows: int, centres: np.ndarray, spread: float) -> Any:
    """Clustered float32 rows made on the worker's GPU (a user's embeddings stand-in)."""
    import cupy

    rng = cupy.random.default_rng(seed)
    c = cupy.asarray(centres)
    which = rng.integers(0, len(c), rows)
    return (c[which] + spread * rng.standard_normal((rows, c.shape[1]), dtype=cupy.float32)
            ).astype(cupy.float32)


def _labels(seed: int, rows: int) -> Any:
    import cupy

    return cupy.random.default_rng(seed).integers(0, 10, rows).astype(cupy.int32)


def _dask_rows(client: Any, rows: int, d: int, chunk: int, seed: int,
               centres: np.ndarray) -> tuple[Any, Any]:
    """Persisted dask arrays of CuPy chunks made where they live, rows and labels, in
    chunks of ``chunk`` rows: made in :data:`MADE_IN` blocks whatever ``chunk`` is, so
    that every worker count searches the same rows."""
    import cupy
    import dask.array as da
    from distributed import wait
    from dask import delayed

    sizes = made_sizes(rows)
    parts = [da.from_delayed(delayed(_block)(seed + i, r, centres, 0.25), (r, d), np.float32,
                             meta=cupy.empty((0, 0), np.float32)) for i, r in enumerate(sizes)]
    labels = [da.from_delayed(delayed(_labels)(seed + i, r), (r,), np.int32,
                              meta=cupy.empty(0, np.int32)) for i, r in enumerate(sizes)]
    X = da.concatenate(parts).rechunk((chunk, d))
    y = da.concatenate(labels).rechunk(chunk)
    X, y = client.persist([X, y])
    wait([X, y])  # made before any clock starts: a first call times the call alone
    return X, y


def _exact(Xh: np.ndarray, Qh: np.ndarray, metric: str) -> np.ndarray:
    """The true k nearest of the checked queries, float64 on the client's GPU."""
    import cupy

    Q = cupy.asarray(Qh, dtype=cupy.float64)
    if metric == "cosine":
        Q /= cupy.linalg.norm(Q, axis=1, keepdims=True)
    best_keys = cupy.full((len(Q), 0), cupy.inf)
    best_cols = cupy.zeros((len(Q), 0), cupy.int64)
    step = 1 << 20
    for start in range(0, len(Xh), step):
        X = cupy.asarray(Xh[start:start + step], dtype=cupy.float64)
        if metric == "cosine":
            X /= cupy.linalg.norm(X, axis=1, keepdims=True)
            keys = -(Q @ X.T)
        else:
            keys = (X * X).sum(1)[None] - 2 * (Q @ X.T)
        keys = cupy.concatenate([best_keys, keys], axis=1)
        cols = cupy.concatenate([best_cols, cupy.broadcast_to(
            cupy.arange(start, start + len(X)), (len(Q), len(X)))], axis=1)
        order = cupy.argsort(keys, axis=1)[:, :K_NEIGHBOURS]
        best_keys = cupy.take_along_axis(keys, order, 1)
        best_cols = cupy.take_along_axis(cols, order, 1)
    return cupy.asnumpy(best_cols)


def _recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / K_NEIGHBOURS for a, b in zip(found, truth)]))


def _timed(fn: Any, repeats: int) -> tuple[float, float, Any]:
    """(first call, median of the next ``repeats``, the last result), seconds."""
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return first, float(np.median(times)), out


def _ours(client: Any, case: Case, X: Any, y: Any, Q: Any, repeats: int,
          margin: int | None, plan: str = "auto") -> dict:
    from mgpu_dask import KNeighborsClassifier
    from mgpu_dask.knn.blocks import TIER_ROWS, what_ran

    before = client.run(what_ran)  # the workers' counts since they started: this case's apart
    model = KNeighborsClassifier(K_NEIGHBOURS, metric=case.metric, weights="uniform",
                                 margin=margin, plan=plan)
    t0 = time.perf_counter()
    model.fit(X, y)
    fit = time.perf_counter() - t0
    first, warm, pred = _timed(lambda: model.predict(Q, on_host=True).compute(), repeats)
    checked = Q[:CHECKED].compute()
    _, ind = model.kneighbors(checked.get())
    ran = client.run(what_ran)
    return {"fit_s": fit, "first_predict_s": first, "predict_s": warm, "plan": model.plan_,
            # the workers holding training rows (the shard plan spreads a user's blocks)
            "training_workers": len(set(model.layout_.workers)),
            "precision": str(model.precision_), "searches": sorted({s for r in ran.values()
                                                                     for s in r["searches"]}),
            "neighbours": ind, "predictions": np.asarray(pred),
            **{key: sum(r.get(key, 0) - before.get(w, {}).get(key, 0) for w, r in ran.items())
               for key in TIER_ROWS}}


def _faiss(Xh: np.ndarray, Qh: np.ndarray, metric: str, repeats: int) -> list[dict]:
    try:
        import faiss
    except ImportError:
        return []
    res = faiss.StandardGpuResources()
    X, Q = Xh, Qh
    if metric == "cosine":
        X = Xh / np.linalg.norm(Xh, axis=1, keepdims=True)
        Q = Qh / np.linalg.norm(Qh, axis=1, keepdims=True)
    from mgpu_dask.compare.faiss import configurations

    rows = []
    for kind, config in configurations(faiss):  # classic or cuVS, float32 or float16 storage
        make = faiss.GpuIndexFlatIP if metric == "cosine" else faiss.GpuIndexFlatL2
        name = f"FAISS flat {kind}"
        try:
            index = make(res, X.shape[1], config)
            t0 = time.perf_counter()
            index.add(X)
            add = time.perf_counter() - t0
            first, warm, (_, ind) = _timed(lambda: index.search(Q, K_NEIGHBOURS), repeats)
        except Exception as exc:  # a configuration this build or GPU does not run
            rows.append({"backend": name, "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        rows.append({"backend": name, "fit_s": add, "first_predict_s": first,
                     "predict_s": warm, "neighbours": ind[:CHECKED]})
        del index
    return rows


def _torch(Xh: np.ndarray, Qh: np.ndarray, metric: str, repeats: int) -> list[dict]:
    try:
        import torch
    except ImportError:
        return []
    X = torch.as_tensor(Xh, device="cuda")
    if metric == "cosine":
        X = torch.nn.functional.normalize(X, dim=1)
    norms = (X * X).sum(1)

    def search() -> np.ndarray:
        Q = torch.as_tensor(Qh).pin_memory().to("cuda", non_blocking=True)
        out = []
        block = max(1, min(1000, int(8e9 // (4 * len(X)))))  # keys of a block: 8 GB at most
        for s in range(0, len(Q), block):
            q = Q[s:s + block]
            if metric == "cosine":
                keys = -(torch.nn.functional.normalize(q, dim=1) @ X.T)
            else:
                keys = norms[None] - 2 * (q @ X.T)
            out.append(torch.topk(keys, K_NEIGHBOURS, dim=1, largest=False).indices)
        return torch.cat(out).cpu().numpy()

    first, warm, ind = _timed(search, repeats)
    del X, norms
    torch.cuda.empty_cache()  # the next peer's memory
    return [{"backend": "PyTorch mm + topk", "first_predict_s": first, "predict_s": warm,
             "neighbours": ind[:CHECKED]}]


def _cuml(Xh: np.ndarray, Qh: np.ndarray, metric: str, repeats: int) -> list[dict]:
    try:
        import cupy
        from cuml.neighbors import NearestNeighbors
    except ImportError:
        return []
    nn = NearestNeighbors(n_neighbors=K_NEIGHBOURS, algorithm="brute", metric=metric)
    X = cupy.asarray(Xh)
    t0 = time.perf_counter()
    nn.fit(X)
    fit = time.perf_counter() - t0
    first, warm, (_, ind) = _timed(lambda: nn.kneighbors(Qh), repeats)
    return [{"backend": "cuML brute (single GPU)", "fit_s": fit, "first_predict_s": first,
             "predict_s": warm, "neighbours": np.asarray(ind)[:CHECKED]}]


def run_case(client: Any, case: Case, repeats: int, peers: list[str],
             margin: int | None = None, plan: str = "auto") -> dict:
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((CLUSTERS, case.features)).astype(np.float32)
    chunk = -(-case.rows // max(1, len(client.nthreads())))
    X, y = _dask_rows(client, case.rows, case.features, chunk, 1, centres)
    Q, _ = _dask_rows(client, case.queries, case.features, case.query_chunks, 10**6, centres)
    out = {"case": case._asdict(), "k": K_NEIGHBOURS, "margin": margin, "plan": plan}
    ours = _ours(client, case, X, y, Q, repeats, margin, plan)
    rows = [dict(ours, backend="ours")]
    Xh = X.compute().get() if peers else None
    Qh = Q.compute().get()
    for peer in peers:
        rows += PEERS[peer](Xh, Qh, case.metric, repeats)
    truth = _exact(Xh if Xh is not None else X.compute().get(), Qh[:CHECKED], case.metric)
    for row in rows:
        found = row.pop("neighbours", None)
        row.pop("predictions", None)
        if found is not None:
            row["recall"] = _recall(np.asarray(found)[:CHECKED], truth)
    out["rows"] = rows
    faiss_rows = [r for r in rows if r["backend"].startswith("FAISS") and "predict_s" in r
                  and r.get("recall", 0) >= 0.999]
    if faiss_rows:
        best = min(faiss_rows, key=lambda r: r["predict_s"])
        out["fastest_faiss"] = best["backend"]
        out["times_faiss"] = best["predict_s"] / ours["predict_s"]
    del X, y, Q
    return out


@contextlib.contextmanager
def users_client(scheduler_address: str | None) -> Iterator[Any]:
    """A client as a user makes one: to their scheduler, or to their own
    ``LocalCUDACluster`` with its defaults (not ours); closed on the way out."""
    from distributed import Client

    if scheduler_address:
        with Client(scheduler_address) as client:
            yield client
        return
    from dask_cuda import LocalCUDACluster

    with LocalCUDACluster(dashboard_address=None) as cluster, Client(cluster) as client:
        yield client


def _libraries() -> dict[str, Any]:
    """On a worker: what may change our timings from one environment to another -- CuPy's
    allocator (RAPIDS' imports swap in RMM's), the CUDA and cuBLAS versions CuPy loaded,
    which RAPIDS modules are imported, the preloaded libraries."""
    import os

    found: dict[str, Any] = {"rapids imported": sorted(
        m for m in ("rmm", "cudf", "cuml", "ucxx", "distributed_ucxx") if m in sys.modules),
        "LD_PRELOAD": os.environ.get("LD_PRELOAD", "")}
    try:
        import cupy

        allocator = cupy.cuda.get_allocator()
        found["cupy allocator"] = getattr(allocator, "__qualname__", type(allocator).__name__)
        found["cuda runtime"] = cupy.cuda.runtime.runtimeGetVersion()
        found["cublas"] = cupy.cuda.cublas.getVersion(cupy.cuda.device.get_cublas_handle())
    except Exception as exc:  # no GPU here: say so, the run goes on
        found["cupy"] = f"{type(exc).__name__}: {exc}"[:200]
    return found


@contextlib.contextmanager
def recorded(out: str, scheduler_address: str | None) -> Iterator[tuple[Any, dict, Any]]:
    """``(client, results, save)``: a user's client (:func:`users_client`) and the run's
    JSON (command, machine, workers, cases), written to ``out`` by ``save()`` after each
    case and on the way out, a time limit's SIGTERM included (a cut run keeps its cases)."""
    started = time.perf_counter()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if __name__ != "__main__":  # imported by logreg_data.py: a scheduler's workers
        import cloudpickle     # started elsewhere cannot import this folder's modules

        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with users_client(scheduler_address) as client:
        from mgpu_dask.jobs.machine import machine

        results = {"command": " ".join(sys.argv), "machine": machine(),
                   "workers": len(client.nthreads()), "cases": [],
                   "worker_libraries": client.run(_libraries)}

        def save() -> None:
            results["seconds"] = time.perf_counter() - started
            with open(out, "w") as f:
                json.dump(results, f, indent=1, default=str)

        try:
            yield client, results, save
        finally:
            save()


PEERS = {"faiss": _faiss, "torch": _torch, "cuml": _cuml}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--peers", default="faiss,torch,cuml",
                        help="which peers run beside ours (FAISS's cuVS wheel and RAPIDS "
                             "bring two RMMs: FAISS may need a process of its own)")
    parser.add_argument("--scheduler-address")
    parser.add_argument("--plan", choices=("auto", "replicate", "shard"), default="auto",
                        help="our training rows replicated on every worker or sharded "
                             "(KNeighborsClassifier's plan)")
    parser.add_argument("--margin", type=int, default=None,
                        help="our extra candidates re-ranked exactly (KNeighborsClassifier's; "
                             "default: chosen from the data's shape)")
    args = parser.parse_args(argv)
    cases = [CASES[c] for c in args.cases.split(",")]
    with recorded(args.out, args.scheduler_address) as (client, results, save):
        for case in cases:
            peers = [] if args.no_peers else [p for p in args.peers.split(",") if p]
            row = run_case(client, case, args.repeats, peers, args.margin, args.plan)
            results["cases"].append(row)
            save()
            summary = ", ".join(f"{r['backend']} "
                                f"{r.get('predict_s', float('nan')) * 1e3:.1f} ms"
                                f" (recall {r.get('recall', float('nan')):.4f})"
                                for r in row["rows"])
            print(f"{case.name}: {summary}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
