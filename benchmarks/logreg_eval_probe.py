"""Device time of one logistic-regression evaluation, our two passes against cuBLAS.

Random rows of MNIST's shape (52,500 and 210,000 x 784, 10 classes) on GPU 0;
median of 50 evaluations timed with CUDA events, and the two methods'
losses and gradients compared.

    python benchmarks/logreg_eval_probe.py --json FILE
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    import cupy

    from mgpu_dask.kernels import logreg as L

    rng = np.random.default_rng(0)
    out = {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "command": f"python benchmarks/logreg_eval_probe.py --json {args.json}", "rows": []}
    for n in (52500, 210000):
        X = cupy.asarray(rng.random((n, 784), dtype=np.float32))
        y = cupy.asarray(rng.integers(0, 10, n).astype(np.int32))
        W, b = rng.standard_normal((784, 10)) * 0.01, rng.standard_normal(10) * 0.01
        row = {"rows": n}
        results = {}
        for method in ("cublas", "fused"):
            o = L.ShardObjective(X, y, 10, method)
            results[method] = o(W, b)
            times = []
            for _ in range(50):
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                start.record(o.stream)
                o.launch(W, b)
                end.record(o.stream)
                o.collect()
                times.append(cupy.cuda.get_elapsed_time(start, end))
            row[f"{method}_ms"] = float(np.median(times))
        (l1, g1, b1), (l2, g2, b2) = results["cublas"], results["fused"]
        row["loss_rel_diff"] = abs(l1 - l2) / l1
        row["grad_max_diff"] = float(np.abs(g1 - g2).max())
        row["intercept_grad_max_diff"] = float(np.abs(b1 - b2).max())
        out["rows"].append(row)
        print(row, flush=True)
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
