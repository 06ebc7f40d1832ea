"""Builds of the fused KNN search (``kernels/knn/fused.cu``) side by side on one GPU,
without Dask: mma.sync and, on Hopper, wgmma with the query rows streamed or
resident, and resident with the ring loaded by TMA (rings of TMA_STAGES, default
6, 8 and 10), each whole and with parts cut out of the source, to see what bounds the
search.

usage (GPU machine): python benchmarks/knn_fused_builds.py OUT.json

Random 8-bit rows (784 features) at the shapes of MNIST, MNIST x4, one million
training rows, and small ones with many ties.  Each build's keys and columns must
equal the mma.sync build's (``same``); "products only" drops the keys and the
top-k (each tile's products are only folded into one value kept alive), "loads
only" the products as well (the operand ring is filled and waited for, and
nothing else), so those two give no neighbours.  ms: the mean of 10 launches
after 3, timed by CUDA events.
"""
import json
import os
import sys

import numpy as np

STAGES = tuple(int(s) for s in os.environ.get("TMA_STAGES", "6 8 10").split())
SIZES = ((17500, 52500, 3, 256), (70000, 210000, 3, 256), (17500, 1_000_000, 3, 256),
         (300, 20000, 10, 256), (1000, 3000, 64, 4))


def builds(fused):
    """(name, Build, source text) of each build."""
    plain = fused.source("mgpu_dask.kernels.knn", "fused.cu")
    head = "    auto tile_keys = [&](const int col0, const float* nrm_at, const int step) {\n"
    sink = ("        { int x = 0;\n#pragma unroll\n"
            "          for (int i = 0; i < MT * NT * 4; ++i) x ^= (&acc[0][0][0])[i];\n"
            "          if (x == 0x1234567) out[0] = 1; return; }\n")
    assert head in plain, "fused.cu's tile_keys changed: cut its keys out anew"
    products = plain.replace(head, head + sink)
    loads = products.replace("mma_s8(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);",
                             "acc[mt][nt][0] ^= af[mt][0] ^ bf[nt][1];")
    out = [("mma.sync", fused.MMA_SYNC, plain), ("mma.sync products only", fused.MMA_SYNC, products),
           ("mma.sync loads only", fused.MMA_SYNC, loads)]
    if fused._device()[2] == fused.WGMMA:
        out += [("wgmma streamed", fused.WGMMA_STREAMED, plain),
                ("wgmma resident", fused.WGMMA_RESIDENT, plain),
                ("wgmma resident products only", fused.WGMMA_RESIDENT, products)]
        for stages in STAGES:
            build = fused.Build(True, True, stages, 1, tma=True,
                                start_tiles=fused.WGMMA_TMA.start_tiles)
            out.append((f"wgmma TMA, ring of {stages}", build, plain))
        out.append(("wgmma TMA products only", fused.WGMMA_TMA, products))
    only = os.environ.get("BUILDS")
    if only:
        out = [b for b in out if b[0] == "mma.sync" or any(w in b[0] for w in only.split(","))]
    return out


def timed(search, warm=3, runs=10):
    """ms of one call of ``search`` (a :class:`fused.FusedTopK`): the mean of ``runs`` calls
    after ``warm``, timed by CUDA events on the current stream."""
    import cupy

    for _ in range(warm):
        search()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(runs):
        search()
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / runs


def main():
    import cupy

    from mgpu_dask.kernels.knn import fused
    from mgpu_dask.kernels.knn.operands import (operand_dtype, padded_shape, prepare_queries,
                                                prepare_train)

    rng = np.random.default_rng(0)
    source = fused.source
    res = {"gpu": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), "rows": []}
    for m, n, K, levels in SIZES:
        T = cupy.asarray(rng.integers(0, levels, (n, 784), dtype=np.uint8))
        Q = cupy.asarray(rng.integers(0, levels, (m, 784), dtype=np.uint8))
        train = prepare_train(T, "int8", True, 128)
        q = cupy.zeros(padded_shape(m, 784), dtype=operand_dtype(train.precision, True))
        prepare_queries(Q, train, out=q)
        ref = None
        for name, build, text in builds(fused):
            fused._MODULES.clear()
            fused.source = lambda package, file, text=text: text
            if build.shared_bytes(K, 784) > fused._device()[0]:
                continue
            search = fused.FusedTopK(q, train, m, K, build=build)
            ms = timed(search)
            got = (search.keys.get(), search.cols.get())
            ref = got if ref is None else ref
            whole = "only" not in name
            row = {"queries": m, "train": n, "k": K, "build": name, "splits": search.splits,
                   "ms": round(ms, 3),
                   "int8 TOPS": round(2 * m * n * 784 / ms / 1e9),
                   "same": (np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1]))
                   if whole else None}
            res["rows"].append(row)
            print(row, flush=True)
        fused.source = source
        fused._MODULES.clear()
        del T, Q, train, q
        cupy.get_default_memory_pool().free_all_blocks()
    open(sys.argv[1], "w").write(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
