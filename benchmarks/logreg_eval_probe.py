"""Device time of one logistic-regression evaluation, per method and per operation.

Rows of MNIST's shape as 8-bit levels (random pixels / 255: 52,500, 210,000
and 4,068,750 x 784, 10 classes) on GPU 0; median of 50 evaluations timed
with CUDA events, each operation of the evaluation timed alone the same way,
and every method's gradient compared with float64's (error relative to its
largest entry); ``bf16:ROWS`` sums the bf16 gradient over blocks of ROWS rows,
``int8:ROWS`` takes int8 products over blocks of ROWS rows; ``int8-wide`` is int8 with
the softmax kernel for any number of classes (``softmax_xent_i8_wide``).

    python benchmarks/logreg_eval_probe.py --json FILE [--methods cublas,bf16,int8:4096,fused]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def median_ms(stream, fn, repeats: int = 50, warm_up: bool = False) -> float:
    """Median device time of ``fn()`` on ``stream`` (CUDA events), ms; one untimed call
    first with ``warm_up``."""
    import cupy

    if warm_up:
        fn()
    times = []
    for _ in range(repeats):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end))
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--methods", default="cublas,bf16,fused")
    ap.add_argument("--rows", default="52500,210000,4068750")
    args = ap.parse_args()
    import cupy

    from mgpu_dask.kernels import logreg as L
    from mgpu_dask.kernels import logreg_bf16, logreg_int8
    from mgpu_dask.kernels import logreg_cuda as C

    pick_softmax = C.softmax_xent_i8_for

    default_rows = logreg_bf16.GRADIENT_ROWS, logreg_int8.GRADIENT_ROWS
    rng = np.random.default_rng(0)
    out = {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "command": "python " + " ".join(sys.argv), "rows": []}
    for n in (int(r) for r in args.rows.split(",")):
        X = cupy.asarray(rng.integers(0, 256, (n, 784), dtype=np.uint8)).astype(np.float32)
        X *= np.float32(1 / 255)
        y = cupy.asarray(rng.integers(0, 10, n).astype(np.int32))
        W, b = rng.standard_normal((784, 10)) * 0.01, rng.standard_normal(10) * 0.01
        row = {"rows": n}
        results = {}
        for method in args.methods.split(","):
            if ":" in method:  # bf16:ROWS or int8:ROWS, the rows per block of the gradient
                setattr(logreg_int8 if method.startswith("int8") else logreg_bf16,
                        "GRADIENT_ROWS", int(method.split(":")[1]))
            name = method.split(":")[0]
            # int8-wide: the int8 evaluation with the softmax kernel for any class count
            C.softmax_xent_i8_for = ((lambda k: C.softmax_xent_i8_wide) if name == "int8-wide"
                                     else pick_softmax)
            setups = []
            for _ in range(3):  # set-up: levels, transposes, buffers (synchronised)
                began = time.perf_counter()
                o = L.ShardObjective(X, y, 10, "int8" if name == "int8-wide" else name)
                o.stream.synchronize()
                setups.append(1e3 * (time.perf_counter() - began))
            row[f"{method}_setup_ms"] = float(np.median(setups))
            results[method] = o(W, b)
            again = [o(W, b) for _ in range(10)]  # the same point: the same answer?
            row[f"{method}_repeat_loss_spread"] = max(abs(a[0] - results[method][0])
                                                      for a in again) / results[method][0]
            row[f"{method}_repeat_grad_spread"] = max(float(np.abs(a[1] - results[method][1]).max())
                                                      for a in again)
            row[f"{method}_ms"] = median_ms(o.stream, lambda: o.launch(W, b))
            with o.device:
                row[f"{method}_ops_ms"] = [round(median_ms(o.stream, op), 4) for op in o._ops]
            o = None  # its buffers go before the next method's
        logreg_bf16.GRADIENT_ROWS, logreg_int8.GRADIENT_ROWS = default_rows
        X64 = X.astype(np.float64)  # the float64 gradient: what each method is off by
        z = X64 @ cupy.asarray(W) + cupy.asarray(b)
        p = cupy.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        p[cupy.arange(n), y] -= 1.0
        exact = (X64.T @ p).get()
        del X64, z, p
        for method, (loss, gW, gb) in results.items():
            row[f"{method}_grad_max_error"] = float(np.abs(gW - exact).max()
                                                    / np.abs(exact).max())
        out["rows"].append(row)
        print(row, flush=True)
        del X
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
