"""The two-GPU device L-BFGS of logistic regression (no Dask) with GPU 1's rows in this
process, with another process holding a context on GPU 1, and with GPU 1's rows owned by
another process and mapped here by CUDA IPC, as a Dask worker's export on the other
GPU is.

usage (a machine with two GPUs): python benchmarks/lbfgs_ipc.py OUT.json COPIES

MNIST's training rows (``COPIES`` times over), halved between GPU 0 and GPU 1; two
rounds of: GPU 0 alone, both halves allocated here, the same with an idle process
holding a context on GPU 1, and GPU 1's half allocated by another process (``cudaMalloc``)
and opened here (``cudaIpcOpenMemHandle``).  Each: the median of 12 timed fits of
100 iterations (ms) after three warm-ups, and the loss reached.
"""
import json
import multiprocessing as mp
import sys

import numpy as np
from lbfgs_fits import fit_times, mnist_rows


def child(conn, X1, mode):
    import cupy
    cupy.cuda.Device(1).use()
    if mode == "ipc":
        mem = cupy.cuda.Memory(X1.nbytes)
        cupy.cuda.runtime.memcpy(mem.ptr, X1.ctypes.data, X1.nbytes, 1)
        conn.send(cupy.cuda.runtime.ipcGetMemHandle(mem.ptr))
    else:
        _held = cupy.zeros(1)  # the context stays while this process waits
        cupy.cuda.Device(1).synchronize()
        conn.send(None)
    conn.recv()


def _fit(shards, n) -> list:
    """``[median ms, loss]`` of :func:`lbfgs_fits.fit_times`, as the results hold them."""
    fit = fit_times(shards, n)
    return [fit["median_ms"], fit["fun"]]


def main():
    import cupy

    out_path, times = sys.argv[1], int(sys.argv[2])
    Xtr, ytr = mnist_rows(times)
    n = len(Xtr)
    h = n // 2
    X1h = np.ascontiguousarray(Xtr[h:])
    with cupy.cuda.Device(0):
        s0 = (cupy.asarray(Xtr[:h]), cupy.asarray(ytr[:h]))
        one = [(cupy.asarray(Xtr), cupy.asarray(ytr))]
    with cupy.cuda.Device(1):
        s1 = (cupy.asarray(X1h), cupy.asarray(ytr[h:]))
    res = {"n": n}
    ctx = mp.get_context("spawn")
    for rnd in range(2):
        res[f"one_gpu_{rnd}"] = _fit(one, n)
        res[f"two_local_{rnd}"] = _fit([s0, s1], n)
        for mode in ("context", "ipc"):
            a, b = ctx.Pipe()
            p = ctx.Process(target=child, args=(b, X1h, mode))
            p.start()
            handle = a.recv()
            if mode == "ipc":
                with cupy.cuda.Device(1):
                    ptr = cupy.cuda.runtime.ipcOpenMemHandle(handle)
                    mem = cupy.cuda.UnownedMemory(ptr, X1h.nbytes, None, 1)
                    X1 = cupy.ndarray(X1h.shape, np.uint8, cupy.cuda.MemoryPointer(mem, 0))
                    assert int(X1[:100].astype(np.int64).sum()) == int(X1h[:100].astype(np.int64).sum())
                res[f"two_ipc_{rnd}"] = _fit([s0, (X1, s1[1])], n)
                del X1, mem
                with cupy.cuda.Device(1):
                    cupy.cuda.runtime.ipcCloseMemHandle(ptr)
            else:
                res[f"two_other_context_{rnd}"] = _fit([s0, s1], n)
            a.send("done")
            p.join()
        print(json.dumps(res), flush=True)
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
