"""How exact the bf16 evaluation's gradient is, and what that does to a 100-iteration fit.

MNIST (the job's split, pixels / 255) on GPU 0.  First a float64 reference
fit (the host L-BFGS on float64 NumPy products on the GPU) gives the point
where every gradient is compared: float32 cuBLAS and bf16 with the
``X^T R`` sums taken over blocks of GRADIENT_ROWS rows (one block = the whole
shard), error against the float64 gradient relative to its largest entry.
Then the device L-BFGS, 100 iterations, each way: loss, test accuracy,
device time per evaluation, fit time.

    python benchmarks/logreg_grad_probe.py --data-dir DIR --json FILE [--fractions 1,4]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir")
    ap.add_argument("--json", required=True)
    ap.add_argument("--fractions", default="1,4")
    ap.add_argument("--blocks", default="0,65536,16384,4096,1024", help="0: one block")
    args = ap.parse_args()
    import cupy

    from mgpu_dask import lbfgs
    from mgpu_dask.data import load_dataset, split
    from mgpu_dask.device_lbfgs import DeviceBackend
    from mgpu_dask.kernels import logreg as L
    from mgpu_dask.kernels import logreg_bf16

    out = {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "command": "python " + " ".join(sys.argv), "runs": []}
    ds = load_dataset("mnist", data_dir=args.data_dir)
    for fraction in (float(f) for f in args.fractions.split(",")):
        s = split(ds.X, ds.y, fraction=fraction)
        n, d, k = len(s.X_train), s.X_train.shape[1], 10
        X = cupy.asarray(s.X_train, dtype=np.float32) * np.float32(1 / 255)
        y = cupy.asarray(s.y_train.astype(np.int32))
        Xt = cupy.asarray(s.X_test, dtype=np.float32) * np.float32(1 / 255)
        X64, onehot = X.astype(np.float64), cupy.eye(k)[y]

        def exact(W, b):
            z = X64 @ cupy.asarray(W) + cupy.asarray(b)
            z -= z.max(axis=1, keepdims=True)
            p = cupy.exp(z)
            p /= p.sum(axis=1, keepdims=True)
            loss = float(-cupy.log(p[cupy.arange(n), y]).sum())
            return loss, (X64.T @ (p - onehot)).get(), (p - onehot).sum(axis=0).get()

        def fun(theta):
            W, b = theta[: d * k].reshape(d, k), theta[d * k:]
            loss, gW, gb = exact(W, b)
            return (loss / n + 0.5 / n * (W * W).sum(),
                    np.concatenate([(gW / n + W / n).ravel(), gb / n]))

        ref = lbfgs.minimize_lbfgs(fun, np.zeros(d * k + k), maxiter=100, gtol=1e-4)
        W, b = ref["x"][: d * k].reshape(d, k), ref["x"][d * k:]
        _, gW, _ = exact(W, b)
        scale = np.abs(gW).max()
        row = {"fraction": fraction, "rows": n, "float64 loss": ref["fun"],
               "float64 accuracy": float((cupy.argmax(Xt @ cupy.asarray(W, dtype=np.float32)
                                                     + cupy.asarray(b, dtype=np.float32), 1)
                                          .get() == s.y_test).mean()),
               "variants": []}
        for block in ["fp32"] + [int(b) for b in args.blocks.split(",")]:
            if block == "fp32":
                method, name = "cublas", "fp32"
            else:
                method, name = "bf16", f"bf16 rows/block {block or n}"
                logreg_bf16.GRADIENT_ROWS = block or n
            o = L.ShardObjective(X, y, k, method)
            g = o(W, b)[1]
            v = {"variant": name, "grad max error / max": float(np.abs(g - gW).max() / scale),
                 "grad norm error / norm": float(np.linalg.norm(g - gW) / np.linalg.norm(gW))}
            del o
            walls = []
            for _ in range(3):
                t = time.perf_counter()
                backend = DeviceBackend([(X, y)], k, n, 1.0 / n, method=method)
                r = lbfgs.run(backend, maxiter=100, gtol=1e-4)
                walls.append(time.perf_counter() - t)
                theta = backend.solution()
                per_eval = backend.seconds_per_evaluation(20)
                backend.close()
            Wf, bf = theta[: d * k].reshape(d, k), theta[d * k:]
            pred = cupy.argmax(Xt @ cupy.asarray(Wf, dtype=np.float32)
                               + cupy.asarray(bf, dtype=np.float32), 1).get()
            v.update({"loss": r["fun"], "accuracy": float((pred == s.y_test).mean()),
                      "nit": r["nit"], "nfev": r["nfev"], "searches": r["searches"],
                      "fit ms": 1e3 * min(walls), "device ms per evaluation": 1e3 * per_eval})
            row["variants"].append(v)
            print(fraction, v, flush=True)
        logreg_bf16.GRADIENT_ROWS = 4096
        out["runs"].append(row)
        print(fraction, {k: v for k, v in row.items() if k != "variants"}, flush=True)
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
