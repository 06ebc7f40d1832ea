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
import sys

import numpy as np

SOFTMAX = ("            if (fresh) softmax(tile, 0);\n", "            if (fresh) softmax(tile, 32);\n")
GRADIENT = "            if (done) gradient(tile - 1, sX + prev * TM * PITCH);\n"
FORWARD = "        if (fresh) {  // 1. forward"
EXP_TOP = "const double e = exp(z[m] - top);"
EXP_LSE = "const double p = exp(z[m] - lse);"
LSE = "const double lse = top + log(total);"
QUANTIZE = "const double qv = floor(rest + 0.5);"


def variants(text):
    for cut in (*SOFTMAX, GRADIENT, FORWARD, EXP_TOP, EXP_LSE, LSE, QUANTIZE):
        assert cut in text, f"onepass.cu changed: {cut.strip()!r} is not in it"
    no_softmax = text.replace(SOFTMAX[0], "").replace(SOFTMAX[1], "")
    no_gradient = text.replace(GRADIENT, "")
    no_forward = text.replace(FORWARD, "        if (false) {  // 1. forward")
    loads = no_softmax.replace(GRADIENT, "").replace(FORWARD, "        if (false) {  // 1. forward")
    return [("whole", text), ("no softmax", no_softmax), ("no gradient", no_gradient),
            ("no forward", no_forward), ("no softmax, no gradient",
                                         no_softmax.replace(GRADIENT, "")),
            ("loads only", loads),
            ("softmax: p = e / total (one exp a class)",
             text.replace(EXP_LSE, "const double p = ex[m] / total;")),
            ("softmax: p = e * (1 / total) (one exp a class, one division a row)",
             text.replace(LSE, LSE + " const double inv = 1.0 / total;")
             .replace(EXP_LSE, "const double p = ex[m] * inv;")),
            ("softmax: no rounding of the residual's terms",
             text.replace(QUANTIZE, "const double qv = rest;")),
            ("softmax: float exps", text.replace(
                EXP_TOP, "const double e = (double)__expf((float)(z[m] - top));")
             .replace(EXP_LSE, "const double p = (double)__expf((float)(z[m] - lse));"))]


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
