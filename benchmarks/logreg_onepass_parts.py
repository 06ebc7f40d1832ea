"""Logistic regression's one-pass evaluation kernel (``kernels/logreg/onepass.cu``) whole
and with parts cut out of its source, on one GPU without Dask: what bounds it.

usage (GPU machine): python benchmarks/logreg_onepass_parts.py OUT.json [ROWS]

Random int8 rows (784 features, 10 classes; deformed MNIST's 8,137,500 rows unless
ROWS is given).  The plain build (every GPU but a Hopper's), whole and in parts:
"no softmax" leaves every residual zero (the gradient's products
still run), "no gradient" drops the gradient's products and their operand loads,
"no forward" the forward product; "loads only" drops all three.  Softmaxes that
give other bits, for their time only: each class's probability from the first
exponential (one exponential a class, not two) divided by the sum or times its
reciprocal, the residual's terms not rounded, and float exponentials.  Each says whether
its first launch gave the plain build's gradient sums and block sums.  On a Hopper, then
its build with the softmax on warps of its own (``-DSPECIALIZED``): whole, with the
registers split otherwise between the two kinds of warp, and without its softmax or its
gradient's products.  ms: the mean of 10 launches after 3, timed by CUDA events; GB/s:
the rows read once.
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
            ("forward unrolled", text.replace("#pragma unroll 2\n            for (int ks = k0;",
                                              "#pragma unroll\n            for (int ks = k0;")),
            ("softmax: float exps",
             other((EXP_TOP, "const double e = (double)__expf((float)(z[m] - top));"),
                   (EXP_LSE, "const double p = (double)__expf((float)(z[m] - lse));")))]


HOPPER_SOFTMAX = "            softmax_tile(tile, tid,"
HOPPER_GRADIENT = re.compile(r"^ +gradient\(acc, .*, cw, g, t4\);\n", re.M)


HOPPER_FORWARD = "            if (cw < 4) forward<0, NA>"


def hopper_variants(text):
    """``(name, source)`` of the Hopper build's variants (SPECIALIZE on): whole, in parts,
    with other register splits, and with float exponentials (other bits)."""
    found = (text.count(HOPPER_SOFTMAX), len(HOPPER_GRADIENT.findall(text)),
             text.count(HOPPER_FORWARD))
    assert found == (1, 1, 1), f"onepass.cu's Hopper kernel changed: {found}"

    def regs(src, soft, compute):
        src = re.sub(r"#define SOFT_REGS \d+", f"#define SOFT_REGS {soft}", src)
        return re.sub(r"#define COMPUTE_REGS \d+", f"#define COMPUTE_REGS {compute}", src)

    no_softmax = text.replace(HOPPER_SOFTMAX, "            if (0) softmax_tile(tile, tid,")
    no_forward = text.replace(HOPPER_FORWARD, "            if (0) forward<0, NA>")
    return [("hopper: whole", text),
            ("hopper: softmax 64 / others 216 registers", regs(text, 64, 216)),
            ("hopper: no softmax", no_softmax),
            ("hopper: no gradient", HOPPER_GRADIENT.sub("", text)),
            ("hopper: no forward (first column half's)", no_forward),
            ("hopper: loads only", HOPPER_GRADIENT.sub("", no_softmax.replace(
                HOPPER_FORWARD, "            if (0) forward<0, NA>").replace(
                "            else forward<NA, NTG>", "            else if (0) forward<NA, NTG>"))),
            ("hopper: float exps", text.replace(EXP_TOP, "const double e = (double)__expf((float)(z[m] - top));")
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
    hopper = onepass.specialized(onepass.capability(0))
    runs = [(name, text, False) for name, text in variants(plain)]
    runs += [(name, text, True) for name, text in hopper_variants(plain)] if hopper else []
    try:
        for name, text, specialize in runs:
            if text is None:
                res["variants"].append({"variant": name, "skipped": "its line is not in onepass.cu"})
                continue
            onepass.SPECIALIZE = specialize
            onepass._MODULES.clear()
            onepass.source = lambda package, file, text=text: text
            launch = onepass.bound(v, n, w8, colinfo, labels, g64, bpart, stream)
            with stream:
                g64[...] = 0
                launch()
                out = (g64.get(stream=stream), bpart.get(stream=stream))
            if name == "whole":
                want = out
            for _ in range(2):
                launch()
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            for _ in range(10):
                launch()
            end.record(stream)
            end.synchronize()
            ms = cupy.cuda.get_elapsed_time(start, end) / 10
            row = {"variant": name, "ms": round(ms, 3), "GB/s": round(n * d / ms / 1e6),
                   "same bits as whole": all(np.array_equal(a, b) for a, b in zip(out, want))}
            res["variants"].append(row)
            print(row, flush=True)
    finally:
        onepass.source = real
        onepass.SPECIALIZE = True
        onepass._MODULES.clear()
    open(sys.argv[1], "w").write(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
