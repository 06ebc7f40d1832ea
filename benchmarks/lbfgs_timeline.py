"""Where a warm device L-BFGS fit's GPU time and idle time go, without Dask.

usage (GPU machine, MNIST in MGPU_DASK_DATA_DIR): python benchmarks/lbfgs_timeline.py
[FRACTION ...]   (writes $OUT/lr_timeline.json and $OUT/timeline_fF.json.gz; OUT: /tmp/out)

For each FRACTION (MNIST's training rows repeated, as ``--fraction``), one device
L-BFGS (``logreg.lbfgs.device.DeviceBackend``, int8 products, 100 iterations) made
once and fitted again and again as a warm fit is (``reuse``): the median wall of 7
fits, then one fit under PyTorch's profiler (CUPTI), every GPU operation of it on one
clock.  ``busy_us`` is the operations' time, ``span_us`` first start to last end, and
``gap_before_op`` the idle time before each kind of operation, summed over the fit
(the gaps of an iteration's CUDA graph lie between its nodes).  ``first_300_ops``
lists the first operations in order; ``fun`` and ``x_sha256`` are the fit's objective and
its point's hash (two codes that must give the same bits give the same hash).  ``chain_us_per_node``: a graph of 16 empty (or
nearly empty) kernels of 1, 31 and 651 blocks, launched 200 times: what a node costs.
"""
import collections, gzip, hashlib, json, os, re, statistics, sys, time
import numpy as np
import cupy

OUT = os.environ.get("OUT", "/tmp/out")


def short(name):
    m = re.search(r"::(\w+)\[abi", name)
    if m:
        return m.group(1)
    if name.startswith("sm90_xmma") or "gemm" in name:
        return "gemm"
    return name[:40]


def timeline(run, tag):
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        run()
    cupy.cuda.Device().synchronize()
    walls = []
    for _ in range(7):
        t = time.perf_counter(); run(); cupy.cuda.Device().synchronize(); walls.append(time.perf_counter() - t)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t = time.perf_counter(); run(); cupy.cuda.Device().synchronize(); wall = time.perf_counter() - t
    path = f"/tmp/trace_{tag}.json"
    prof.export_chrome_trace(path)
    ev = json.load(open(path))["traceEvents"]
    gpu = sorted([e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")],
                 key=lambda e: e["ts"])
    gaps = collections.defaultdict(list)
    busy = 0.0
    seq = []
    for a, b in zip(gpu, gpu[1:]):
        gaps[short(b["name"])].append(b["ts"] - (a["ts"] + a["dur"]))
    for e in gpu:
        busy += e["dur"]
        seq.append((short(e["name"]), round(e["ts"] - gpu[0]["ts"], 1), e["dur"]))
    span = gpu[-1]["ts"] + gpu[-1]["dur"] - gpu[0]["ts"]
    rows = sorted(((k, len(v), round(sum(v), 1), round(statistics.median(v), 2)) for k, v in gaps.items()),
                  key=lambda r: -r[2])
    out = {"tag": tag, "wall_ms_median": round(1e3 * statistics.median(walls), 3),
           "profiled_wall_ms": round(1e3 * wall, 3), "span_us": round(span, 1), "busy_us": round(busy, 1),
           "ops": len(gpu), "gap_before_op": [dict(op=k, count=c, gap_us=g, median_us=m) for k, c, g, m in rows],
           "first_300_ops": seq[:300]}
    print(json.dumps({k: v for k, v in out.items() if k != "first_300_ops"}, indent=0)[:3000])
    with gzip.open(f"{OUT}/timeline_{tag}.json.gz", "wt") as f:
        json.dump(out, f)
    return out


def chain(grid, nodes=16, launches=200, work=False):
    src = r'''extern "C" __global__ void e(double* x){ if (%s) x[threadIdx.x] += 1.0; }''' % (
        "blockIdx.x == 0" if work else "x == 0")
    k = cupy.RawKernel(src, "e")
    x = cupy.zeros(1024)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        for _ in range(nodes):
            k((grid,), (256,), (x,))
        g = s.end_capture()
    for _ in range(20):
        g.launch(s)
    s.synchronize()
    a, b = cupy.cuda.Event(), cupy.cuda.Event()
    a.record(s)
    for _ in range(launches):
        g.launch(s)
    b.record(s); b.synchronize()
    return round(1e3 * cupy.cuda.get_elapsed_time(a, b) / (launches * nodes), 3)


def main():
    from mgpu_dask.data import load_dataset, split
    from mgpu_dask.kernels.precision import Precision
    res = {"chain_us_per_node": {f"grid{g}{'_work' if w else ''}": chain(g, work=w)
                                 for g in (1, 31, 651) for w in (False, True)}}
    print(res)
    ds = load_dataset("mnist")
    s = split(ds.X, ds.y, seed=0)
    for times in [int(t) for t in sys.argv[1:]] or [1]:
        Xtr, ytr = np.concatenate([s.X_train] * times), np.concatenate([s.y_train] * times)
        X, labels = cupy.asarray(Xtr), cupy.asarray(ytr.astype(np.int32))
        n, d = X.shape
        from mgpu_dask.logreg.lbfgs import device as dl, loop
        backend = dl.DeviceBackend([(X, labels)], 10, n, 1.0 / n, precision=Precision.AUTO,
                                   scale=1 / 255)

        def run():
            assert backend.reuse([(X, labels)])
            r = loop.run(backend, maxiter=100, gtol=1e-4)
            run.nit, run.fun = r["nit"], r["fun"]
            run.x_sha256 = hashlib.sha256(np.ascontiguousarray(r["x"]).tobytes()).hexdigest()
        r = timeline(run, f"f{times}")
        r["nit"], r["fun"], r["x_sha256"] = run.nit, run.fun, run.x_sha256
        print("nit", run.nit, "graph", backend.graphed)
        res[f"f{times}"] = {k: v for k, v in r.items() if k != "first_300_ops"}
    json.dump(res, open(f"{OUT}/lr_timeline.json", "w"), indent=1)


if __name__ == "__main__":
    main()
