"""One warm device L-BFGS fit of logistic regression (no Dask) under PyTorch's profiler,
its rows on one GPU or halved between two: every GPU operation with its device.

usage (GPU machine): python benchmarks/lbfgs_timeline_gpus.py OUT.json COPIES GPUS

MNIST's training rows (``COPIES`` times over) split evenly over ``GPUS`` GPUs, one
:class:`~mgpu_dask.logreg.lbfgs.device.DeviceBackend` on GPU 0, four warm fits, then
one under the profiler (CUPTI).  Writes every operation (name, device, start and
end in microseconds) in start order
:func:`per_device` sums them per device and
kind, what the results folders keep.
"""
import json
import re
import sys
from collections import defaultdict

from lbfgs_fits import SCALE, mnist_rows


def short(name: str) -> str:
    """A kernel's short name: ours by their Python name, cuBLAS's int8 products "gemm"."""
    m = re.search(r"::(\w+)\[abi", name)
    if m:
        return m.group(1)
    return "gemm" if "gemm" in name or "xmma" in name else name[:30]


def per_device(events: list) -> dict:
    """Per device: busy microseconds and, per kind of operation, its count and mean."""
    out = {}
    for dev in sorted({e["dev"] for e in events}):
        kinds = defaultdict(list)
        for e in events:
            if e["dev"] == dev:
                kinds[short(e["name"])].append(e["end"] - e["start"])
        out[str(dev)] = {"busy_us": round(sum(sum(v) for v in kinds.values()), 1),
                         "ops": {k: {"count": len(v), "mean_us": round(sum(v) / len(v), 1)}
                                 for k, v in sorted(kinds.items(), key=lambda kv: -sum(kv[1]))}}
    return out


def main():
    import cupy
    import torch
    from torch.profiler import ProfilerActivity, profile

    from mgpu_dask.kernels.precision import Precision
    from mgpu_dask.logreg.lbfgs import device as dev
    from mgpu_dask.logreg.lbfgs import loop
    out, times, ngpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    Xtr, ytr = mnist_rows(times)
    n = len(Xtr)
    h = n // ngpu
    shards = []
    for g in range(ngpu):
        a, b = g * h, (n if g == ngpu - 1 else (g + 1) * h)
        with cupy.cuda.Device(g):
            shards.append((cupy.asarray(Xtr[a:b]), cupy.asarray(ytr[a:b])))
    with cupy.cuda.Device(0):
        be = dev.DeviceBackend(shards, 10, n, 1.0 / n, precision=Precision.AUTO, scale=SCALE)
        for i in range(4):
            if i:
                be.reuse(shards)
            loop.run(be, maxiter=100, gtol=1e-4)
        be.reuse(shards)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            loop.run(be, maxiter=100, gtol=1e-4)
            for g in range(ngpu):
                cupy.cuda.Device(g).synchronize()
    ev = []
    for e in prof.events():
        if e.device_type.name == "CUDA":
            ev.append({"name": e.name[:60], "dev": e.device_index, "stream": getattr(e, 'device_resource_id', None),
                       "start": e.time_range.start, "end": e.time_range.end})
    ev.sort(key=lambda r: r["start"])
    with open(out, "w") as f:
        json.dump(ev, f)
    print(len(ev), "events")


if __name__ == "__main__":
    main()
