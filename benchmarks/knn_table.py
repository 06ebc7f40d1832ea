"""KNN on MNIST, every system side by side in one run (issue 13's table).

Rows, for each fraction: ours through the CLI on 1 and W GPUs (fresh
processes, `python -m mgpu_dask.run knn --workers W --fraction F --repeats 5`,
warm predict median); on GPU 0 without Dask, the 20-line PyTorch script (fp32
GEMM + topk + distance-weighted vote, predictions to the host), cuVS
brute_force (sqeuclidean search + the same vote in CuPy, predictions to the
host) and cuML's single-GPU KNeighborsClassifier (predict on resident CuPy
arrays, predictions to the host; cuML votes uniformly).  Every row counts the
predictions that differ from scikit-learn's brute-force classifier (distance
weights; at fraction 1).  A system that is not installed, or fails, is a row
with its error.

    python benchmarks/knn_table.py --data-dir DIR --fractions 1,4 --json FILE
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def median_time(run, repeats: int = 5):
    import cupy as cp

    out = run()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        out = run()
        cp.cuda.Device().synchronize()
        times.append(time.perf_counter() - started)
    return statistics.median(times), out


def ours_cli(workers: int, fraction: float, data_dir: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [sys.executable, "-m", "mgpu_dask.run", "knn", "--workers", str(workers),
               "--fraction", str(fraction), "--repeats", "5", "--quiet",
               "--dashboard-address", ":0", "--json", str(out)]
        if data_dir:
            cmd += ["--data-dir", data_dir]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if done.returncode:
            return {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
        r = json.loads(out.read_text())
    return {"predict_s": r["warm_predict_median"], "accuracy": r["accuracy"],
            "precision": r["precision"], "plan": r["plan"],
            "command": "python -m mgpu_dask.run " + " ".join(cmd[3:11]),
            "stderr_lines": [line for line in done.stderr.splitlines() if line.strip()][:20]}


def vote_host(dist, labels, k: int):
    """Distance-weighted vote in CuPy (exact matches win), predictions to the host."""
    import cupy as cp

    d = cp.sqrt(cp.maximum(dist.astype(cp.float64), 0.0))
    w = cp.where(d == 0, 1e300, 1.0 / cp.where(d == 0, 1.0, d))
    votes = cp.zeros((d.shape[0], 10), cp.float64)
    for j in range(k):
        cp.add.at(votes, (cp.arange(d.shape[0]), labels[:, j]), w[:, j])
    return cp.asnumpy(votes.argmax(1))


def cuvs_row(X_train, y_train, X_test, k: int) -> dict:
    import cupy as cp
    from cuvs.neighbors import brute_force

    T = cp.asarray(X_train, dtype=cp.float32)
    Q = cp.asarray(X_test, dtype=cp.float32)
    y = cp.asarray(y_train, dtype=cp.int64)
    index = brute_force.build(T, metric="sqeuclidean")

    def run():
        dist, nbr = brute_force.search(index, Q, k)
        return vote_host(cp.asarray(dist), y[cp.asarray(nbr).astype(cp.int64)], k)

    t, pred = median_time(run)
    return {"predict_s": t, "pred": pred}


def cuml_row(X_train, y_train, X_test, k: int) -> dict:
    import cupy as cp
    from cuml.neighbors import KNeighborsClassifier

    T = cp.asarray(X_train, dtype=cp.float32)
    Q = cp.asarray(X_test, dtype=cp.float32)
    clf = KNeighborsClassifier(n_neighbors=k).fit(T, cp.asarray(y_train, dtype=cp.int32))
    t, pred = median_time(lambda: cp.asnumpy(clf.predict(Q)))
    return {"predict_s": t, "pred": np.asarray(pred), "note": "uniform vote"}


def torch_row(X_train, y_train, X_test, k: int) -> dict:
    from knn_kernels import torch_script

    t, pred = torch_script(X_train, y_train, X_test, k)
    return {"predict_s": t, "pred": pred}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir", default=os.environ.get("MGPU_DASK_DATA_DIR"))
    p.add_argument("--fractions", default="1,4")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--json", required=True)
    args = p.parse_args()
    from mgpu_dask.data import load_dataset, split
    from mgpu_dask.jobs import machine

    ds = load_dataset("mnist", data_dir=args.data_dir)
    out = {"machine": machine(), "command": "python benchmarks/knn_table.py " + " ".join(
        sys.argv[1:]), "k": args.k, "tables": {}}
    for fraction in [float(f) for f in args.fractions.split(",")]:
        s = split(ds.X, ds.y, test_size=0.25, seed=0, fraction=fraction)
        rows: dict = {}
        for w in sorted({1, args.workers}):
            rows[f"ours, {w} GPU"] = ours_cli(w, fraction, args.data_dir)
            print(fraction, f"ours {w}", json.dumps(rows[f"ours, {w} GPU"])[:300], flush=True)
        reference = None
        if fraction <= 1:
            from sklearn.neighbors import KNeighborsClassifier

            started = time.perf_counter()
            reference = KNeighborsClassifier(args.k, weights="distance", algorithm="brute",
                                             n_jobs=-1).fit(s.X_train.astype(np.float64),
                                                            s.y_train).predict(
                s.X_test.astype(np.float64))
            rows["scikit-learn brute force (CPU)"] = {
                "predict_s": time.perf_counter() - started,
                "accuracy": float((reference == s.y_test).mean())}
        for name, fn in (("PyTorch script, 1 GPU", torch_row), ("cuVS brute_force, 1 GPU", cuvs_row),
                         ("cuML KNeighborsClassifier, 1 GPU", cuml_row)):
            try:
                row = fn(s.X_train, s.y_train, s.X_test, args.k)
                pred = row.pop("pred")
                row["accuracy"] = float((pred == s.y_test).mean())
                if reference is not None:
                    row["differ_from_sklearn"] = int((pred != reference).sum())
            except Exception as exc:
                row = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
            rows[name] = row
            print(fraction, name, json.dumps(row), flush=True)
            import cupy as cp

            cp.get_default_memory_pool().free_all_blocks()
        out["tables"][str(fraction)] = {"n_train": len(s.X_train), "n_test": len(s.X_test),
                                        "rows": rows}
    Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
