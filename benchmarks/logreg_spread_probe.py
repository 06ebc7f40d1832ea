"""How far repeated logistic-regression fits on the same data end apart, per precision.

MNIST's split (seed 0, 52,500 training rows, pixels / 255) as one CuPy array on
GPU 0, no Dask: ``LogisticRegression(precision=P, max_iter=100)`` fitted FITS
times in one process; prints and writes each fit's loss, accuracy, run-ahead
and evaluations, and the spread.  Fits at the same point should end at the
same loss up to the order of the float64 atomic sums.

    python benchmarks/logreg_spread_probe.py --json FILE [--precisions int8,fp32] [--fits 5]
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--precisions", default="int8,fp32,bf16")
    ap.add_argument("--fits", type=int, default=5)
    args = ap.parse_args()
    import cupy

    from mgpu_dask.data import load_dataset, split
    from mgpu_dask.logreg import LogisticRegression

    ds = load_dataset("mnist", download=False)
    parts = split(ds.X, ds.y, test_size=0.25, seed=0)
    X = cupy.asarray(parts.X_train.astype(np.float32) / np.float32(255))
    Xt = cupy.asarray(parts.X_test.astype(np.float32) / np.float32(255))
    cupy.cuda.Device().synchronize()
    out = {"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "command": "python " + " ".join(sys.argv), "fits": {}}
    for precision in args.precisions.split(","):
        fits = []
        for _ in range(args.fits):
            clf = LogisticRegression(precision=precision).fit(X, parts.y_train)
            acc = float((cupy.asnumpy(clf.predict(Xt)) == parts.y_test).mean())
            fits.append({"loss": clf.loss_, "accuracy": acc, "evaluations": clf.n_evaluations_,
                         "run ahead": clf.fit_profile_.get("run ahead"),
                         "line searches": clf.fit_profile_.get("line searches"),
                         "evaluation": clf.fit_profile_.get("evaluation")})
        losses = [f["loss"] for f in fits]
        out["fits"][precision] = fits
        print(precision, "loss spread", max(losses) - min(losses),
              [(round(f["loss"], 6), f["accuracy"], f["run ahead"], f["evaluations"]) for f in fits],
              flush=True)
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
