"""Logistic regression's one-pass evaluation kernel (``kernels/logreg/onepass.cu``) whole
and with parts cut out of its source, on one GPU without Dask: what bounds it.

usage (GPU machine): python benchmarks/logreg_onepass_parts.py OUT.json [ROWS]

Random int8 rows (784 features, 10 classes; deformed MNIST's 8,137,500 rows unless
ROWS is given).  "no softmax" leaves every residual zero (the gradient's products
still run), "no gradient" drops the gradient's products and their operand loads,
"no forward" the forward product; "loads only" drops all three.  Softmaxes that
give other bits, for their time only: each class's probability from the first
exponential (one exponential a class, not two) divided by the sum or times its
reciprocal, the residual's terms not rounded, and float exponentials.  ms: the mean of 10
launches after 3, timed by CUDA events; GB/s: the rows read once.
"""
import json
import re
import sys

import numpy as np

SOFTMAX = re.compile(r"^[ \t]*if \(fresh\) softmax\(.*\);\n", re.M)   # its two calls
GRADIENT = re.compile(r"^[ \t]*if \(done\) gradient\(.*\);\n", re.M)  # its two calls
FORWARD = "        if (fresh) {  // 1. forward"
NO_FORWARD = "        if (false) {  // 1. forward"
EXP_TOP = "const double e = exp(z[m] - top);"
EXP_LSE = "const double p = exp(z[m] - lse);"
LSE = "const double lse = top + log(total);"
QUANTIZE = "const double qv = floor(rest + 0.5);"


def variants(text):
    """``(name, source)`` of every variant; the source is None for a softmax of other
    bits whose line is no longer in ``onepass.cu`` (the parts cut out must all be)."""
    found = (len(SOFTMAX.findall(text)), len(GRADIENT.findall(text)), FORWARD in text)
    assert found == (2, 2, True), f"onepass.cu changed: softmax, gradient, forward {found}"
    no_softmax = SOFTMAX.sub("", text)
    no_gradient = GRADIENT.sub("", text)
    no_forward = text.replace(FORWARD, NO_FORWARD)
    neither = GRADIENT.sub("", no_softmax)

    def other(*edits):
        """``text`` with each ``(line, by)`` made; None where a line is not in it."""
        out = text
        for line, by in edits:
            if line not in out:
                return None
            out = out.replace(line, by)
        return out

    return [("whole", text), ("no softmax", no_softmax), ("no gradient", no_gradient),
            ("no forward", no_forward), ("no softmax, no gradient", neither),
            ("loads only", neither.replace(FORWARD, NO_FORWARD)),
            ("softmax: p = e / total (one exp a class)",
             other((EXP_LSE, "const double p = ex[m] / total;"))),
            ("softmax: p = e * (1 / total) (one exp a class, one division a row)",
             other((LSE, LSE + " const double inv = 1.0 / total;"),
                   (EXP_LSE, "const double p = ex[m] * inv;"))),
            ("softmax: no rounding of the residual's terms",
             other((QUANTIZE, "const double qv = rest;"))),
            ("softmax: float exps",
             other((EXP_TOP, "const double e = (double)__expf((float)(z[m] - top));"),
                   (EXP_LSE, "const double p = (double)__expf((float)(z[m] - lse));")))]


def main():
    import cupy

    from mgpu_dask.kernels.logreg import onepass

    n = int(sys.argv[2]) if len(sys.argv) > 2 else 8_137_500
    k, d, width = 10, 784, 48
    rng = np.random.default_rng(0)
    n_pad = -(-n // 16384) * 16384
    v = cupy.asarray(rng.integers(-128, 128, (n_pad, d), dtype=np.int8))
    w8 = cupy.asarray(rng.integers(-3, 4, (width, d), dtype=np.int8))
    colinfo = cupy.asarray(np.r_[np.full(k, 1e-4), np.zeros(k)])
    labels = cupy.asarray(rng.integers(0, k, n, dtype=np.int32))
    g64 = cupy.zeros((d, width), dtype=np.int64)
    bpart = cupy.zeros((-(-n // onepass.UNIT), k + 1), dtype=np.float64)
    stream = cupy.cuda.Stream(non_blocking=True)
    plain = onepass.source("mgpu_dask.kernels.logreg", "onepass.cu")
    res = {"gpu": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), "rows": n,
           "blocks": onepass.blocks(n, cupy.cuda.Device().attributes["MultiProcessorCount"]),
           "variants": []}
    real = onepass.source
    try:
        for name, text in variants(plain):
            if text is None:
                res["variants"].append({"variant": name, "skipped": "its line is not in onepass.cu"})
                continue
            onepass._MODULES.clear()
            onepass.source = lambda package, file, text=text: text
            launch = onepass.bound(v, n, w8, colinfo, labels, g64, bpart, stream)
            for _ in range(3):
                launch()
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            for _ in range(10):
                launch()
            end.record(stream)
            end.synchronize()
            ms = cupy.cuda.get_elapsed_time(start, end) / 10
            row = {"variant": name, "ms": round(ms, 3), "GB/s": round(n * d / ms / 1e6)}
            res["variants"].append(row)
            print(row, flush=True)
    finally:
        onepass.source = real
        onepass._MODULES.clear()
    open(sys.argv[1], "w").write(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
