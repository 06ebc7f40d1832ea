"""One warm device L-BFGS fit of logistic regression (no Dask) under PyTorch's profiler,
its rows on one GPU or halved between two: every GPU operation with its device.

usage (GPU machine): python benchmarks/lbfgs_timeline_gpus.py OUT.json COPIES GPUS
       python benchmarks/lbfgs_timeline_gpus.py OUT.json ROWSxFEATURESxCLASSES GPUS

MNIST's training rows (``COPIES`` times over), or float32 rows made on each GPU as
``logreg_data.py`` makes them (``10000000x96x10``: float32 products), split evenly
over ``GPUS`` GPUs, one
:class:`~mgpu_dask.logreg.lbfgs.device.DeviceBackend` on GPU 0, four warm fits, then
one under the profiler (CUPTI).  Writes every operation (name, device, start and
end in microseconds) in start order to OUT.events.json, and to OUT.json what the
results folders keep: :func:`per_device` (busy time per device and kind of
operation), :func:`crossings` (what the hand-overs between the GPUs wait) and the
span per iteration.
"""
import json
import re
import sys
from collections import defaultdict

import numpy as np

from lbfgs_fits import backend, mnist_rows


def short(name: str) -> str:
    """A kernel's short name: ours by their Python name, cuBLAS's int8 products "gemm"."""
    m = re.search(r"::(\w+)\[abi", name)
    if m:
        return m.group(1)
    return "gemm" if any(s in name for s in ("gemm", "xmma", "gemv")) else name[:30]


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


def _median(xs: list) -> float | None:
    xs = sorted(xs)
    return round(xs[len(xs) // 2], 2) if xs else None


def _waits(after: list, before: list) -> float | None:
    """The median, over the events ``after``, of the time from the latest end among
    ``before`` that precedes an event's start to that start."""
    waits = []
    for a in after:
        ends = [b["end"] for b in before if b["end"] <= a["start"]]
        if ends:
            waits.append(a["start"] - max(ends))
    return _median(waits)


def _evaluations(evs: list) -> list[tuple[dict, dict]]:
    """One device's evaluations, each as (its first kernel, its last): int8's from
    ``split_coef_i8`` to ``combine_i8``; float32's from the forward product (a product
    not right after the softmax) to the gradient product (the one right after it)."""
    names = [short(e["name"]) for e in evs]
    if "split_coef_i8" in names:
        firsts = [i for i, s in enumerate(names) if s == "split_coef_i8"]
        ends = [i for i, s in enumerate(names) if s in ("combine_i8", "combine_i8_once")]
    else:
        firsts = [i for i, s in enumerate(names)
                  if s == "gemm" and (i == 0 or names[i - 1] != "softmax_xent_rows")]
        ends = [i for i, s in enumerate(names)
                if s == "gemm" and i and names[i - 1] == "softmax_xent_rows"]
    pairs = []
    for f in firsts:
        after = [i for i in ends if i >= f]
        if after:
            pairs.append((evs[f], evs[after[0]]))
    return pairs


def crossings(events: list) -> dict:
    """Medians (us) of what each iteration's hand-overs between GPU 0 (the leader) and
    the others wait: from the leader's last proposal kernel (``trial``/``set_trial``) to
    each GPU's first evaluation kernel (:func:`_evaluations`), the leader's own too;
    from the last kernel of another GPU's evaluation before the leader's ``assemble`` to
    that ``assemble``; each GPU's evaluation, its first kernel to its last; and from one
    ``assemble`` to the next (an iteration's span)."""
    by_dev = defaultdict(list)
    for e in events:
        by_dev[e["dev"]].append(e)
    lead = by_dev.get(0, [])
    proposals = [e for e in lead if short(e["name"]) in ("trial", "set_trial")]
    assembles = [e for e in lead if short(e["name"]) == "assemble"]
    out = {"assemble to assemble": _median([b["start"] - a["start"]
                                            for a, b in zip(assembles, assembles[1:])])}
    for dev, evs in sorted(by_dev.items()):
        pairs = _evaluations(evs)
        out[f"proposal to GPU {dev}'s evaluation"] = _waits([f for f, _ in pairs], proposals)
        out[f"GPU {dev}'s evaluation"] = _median([e["end"] - f["start"] for f, e in pairs])
        if dev:
            out[f"GPU {dev}'s evaluation to assemble"] = _waits(assembles, evs)
    return out


def float_shards(spec: str, ngpu: int) -> tuple[list, int, object]:
    """``ROWSxFEATURESxCLASSES`` float32 rows and labels made on each of ``ngpu`` GPUs
    (``logreg_data.py``'s generator, one block per GPU), and a function making the
    device L-BFGS of float32 products over them (C = 1 over the rows)."""
    import cupy

    from logreg_data import _block, _labels
    from mgpu_dask.kernels.precision import Precision
    from mgpu_dask.logreg.lbfgs import device as dev

    n, d, k = (int(v) for v in spec.split("x"))
    w = np.random.default_rng(7).standard_normal((d, k)) * 0.3
    shards = []
    for g in range(ngpu):
        rows = n // ngpu + (n % ngpu if g == ngpu - 1 else 0)
        with cupy.cuda.Device(g):
            X = _block(g, rows, d, k)
            shards.append((X, _labels(X, w, 99, (g,))))
            cupy.cuda.Device(g).synchronize()

    def make(shards: list, n: int) -> object:
        return dev.DeviceBackend(shards, k, n, 1.0 / n, precision=Precision.FP32)
    return shards, n, make


def main():
    import cupy
    import torch
    from torch.profiler import ProfilerActivity, profile

    from mgpu_dask.logreg.lbfgs import loop
    out, rows, ngpu = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if "x" in rows:
        shards, n, be_of = float_shards(rows, ngpu)
    else:
        Xtr, ytr = mnist_rows(int(rows))
        n = len(Xtr)
        h = n // ngpu
        shards = []
        for g in range(ngpu):
            a, b = g * h, (n if g == ngpu - 1 else (g + 1) * h)
            with cupy.cuda.Device(g):
                shards.append((cupy.asarray(Xtr[a:b]), cupy.asarray(ytr[a:b])))
        be_of = backend
    with cupy.cuda.Device(0):
        be = be_of(shards, n)
        for i in range(4):
            if i:
                be.reuse(shards)
            loop.run(be, maxiter=100, gtol=1e-4)
        be.reuse(shards)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            result = loop.run(be, maxiter=100, gtol=1e-4)
            for g in range(ngpu):
                cupy.cuda.Device(g).synchronize()
    ev = []
    for e in prof.events():
        if e.device_type.name == "CUDA":
            ev.append({"name": e.name[:60], "dev": e.device_index, "stream": getattr(e, 'device_resource_id', None),
                       "start": e.time_range.start, "end": e.time_range.end})
    ev.sort(key=lambda r: r["start"])
    with open(out.removesuffix(".json") + ".events.json", "w") as f:
        json.dump(ev, f)
    span = ev[-1]["end"] - ev[0]["start"] if ev else 0.0
    from mgpu_dask.jobs.machine import machine

    summary = {"command": " ".join(["python", "benchmarks/lbfgs_timeline_gpus.py", *sys.argv[1:]]),
               "machine": machine(), "span_us": round(span, 1), "events": len(ev), "iterations": result["nit"],
               "span_per_iteration_us": round(span / max(1, result["nit"]), 1),
               "per_device": per_device(ev), "crossings": crossings(ev)}
    with open(out, "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "per_device"}))


if __name__ == "__main__":
    main()
