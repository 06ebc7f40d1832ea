"""Command line: ``python -m mgpu_dask.run {info,data,...}``.

Parsing, calling and printing only; the work is in the library modules.
Errors a user can cause print as one ``error:`` line and exit with status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from . import __version__
from ._compat import import_dask_array, scheduler_workers
from .backends import BACKENDS
from .exceptions import DataError, MgpuDaskError
from .job_options import cluster_kwargs, run_comparison, run_task
from .kernels.knn_precision import PRECISIONS


def add_data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data")
    g.add_argument("--dataset", default=None,
                   help="mnist, fashion-mnist, digits, synthetic or idx (default: mnist, "
                        "falling back to digits when MNIST cannot be had)")
    g.add_argument("--data-dir", default=None, help="folder with the IDX files "
                   "(default: $MGPU_DASK_DATA_DIR, then the cache, then download)")
    g.add_argument("--no-download", action="store_true", help="never download")
    g.add_argument("--test-size", type=float, default=0.25, help="held-out share (default 0.25)")
    g.add_argument("--fraction", type=float, default=1.0,
                   help="shrink (<1) or replicate (>1) train and test (default 1). Above 1 "
                        "the rows repeat exactly, so each KNN neighbour appears F times "
                        "and KNN accuracy drops (0.9713 at 4 on MNIST, against 0.9742): "
                        "a size for timing, not a harder data set")
    g.add_argument("--seed", type=int, default=0, help="shuffle seed (default 0)")
    g.add_argument("--copies", type=int, default=None,
                   help="with --dataset NAME-deformed (mnist-deformed, ...): copies of every "
                        "training image, the image itself included, generated on the workers "
                        "(default 155: 8.1 million rows for MNIST)")
    g.add_argument("--deform", default=None, metavar="KEY=VALUE,...",
                   help="bounds of the random deformations of NAME-deformed data: shift "
                        "(pixels, default 2), rotate (degrees, 12), scale (0.10), shear (0.15), "
                        "elastic (pixels, 1.25), e.g. shift=2,rotate=12")


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cluster")
    g.add_argument("--workers", type=int, default=None,
                   help="workers: one per GPU (default all GPUs) or CPU processes")
    g.add_argument("--device", choices=("auto", "gpu", "cpu"), default="auto")
    g.add_argument("--scheduler-address", default=None, help="join a running scheduler")
    g.add_argument("--scheduler-file", default=None,
                   help="join the scheduler of this file (dask scheduler --scheduler-file)")
    g.add_argument("--dashboard-address", default=None,
                   help="dashboard port, e.g. :8787 (taken: another is chosen and printed)")
    g.add_argument("--host", default=None,
                   help="interface a local scheduler and dashboard listen on (default "
                        "127.0.0.1, this machine only; 0.0.0.0 for all, with a warning)")
    g.add_argument("--timeout", type=float, default=None,
                   help="seconds allowed for cluster start and each wait")
    g.add_argument("--protocol", choices=("tcp", "ucx"), default="tcp",
                   help="how a local cluster's workers talk: tcp (default) or ucx (UCX, over "
                        "NVLink between GPUs; needs the distributed-ucxx package)")
    g.add_argument("--cluster", choices=("local", "slurm", "pbs"), default="local",
                   help="start locally, or submit batch jobs through dask-jobqueue "
                        "(settings: jobqueue.mgpu-slurm / mgpu-pbs, see deploy/jobqueue.yaml)")
    g.add_argument("--jobs", type=int, default=1, help="batch jobs to submit (slurm/pbs)")
    g.add_argument("--gpus-per-job", type=int, default=None,
                   help="GPUs (and GPU workers) per batch job (default from the config)")
    g.add_argument("--dry-run", action="store_true",
                   help="with --cluster slurm|pbs: print the job script and stop")


def add_output_args(p: argparse.ArgumentParser, repeats: int) -> None:
    g = p.add_argument_group("output")
    g.add_argument("--repeats", type=int, default=repeats,
                   help=f"warm repetitions, median reported ({repeats})")
    g.add_argument("--json", default=None, metavar="FILE", help="write the results as JSON")
    g.add_argument("--report", default=None, metavar="FILE.html",
                   help="write a Dask performance report of the run")
    g.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def dry_run(args: argparse.Namespace) -> bool:
    """Print the batch job script for ``--dry-run``; True when the command should stop."""
    if not args.dry_run:
        return False
    if args.cluster == "local":
        raise MgpuDaskError("--dry-run prints a batch job script: use it with --cluster slurm|pbs")
    from .cluster import plan_cluster
    from .hpc import job_script

    plan = plan_cluster(cluster=args.cluster, jobs=args.jobs, gpus_per_job=args.gpus_per_job,
                        device=args.device)
    print(f"# {args.jobs} job(s) x {plan.n_workers // max(args.jobs, 1)} worker(s), "
          f"device {plan.device}")
    print(job_script(args.cluster, device=plan.device, gpus_per_job=args.gpus_per_job))
    return True


def cmd_info(args: argparse.Namespace) -> int:
    from .info import describe

    info = describe(args.workers, args.scheduler_address, args.device)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"mgpu_dask {__version__} on Python {info['python']} ({info['platform']})")
    if info["gpus"]:
        for g in info["gpus"]:
            print(f"GPU {g['index']}: {g['name']}, {g['memory_gib']} GiB")
    else:
        print("GPUs: none visible")
    if info["topology"]:
        print("topology (nvidia-smi topo -m):\n" + info["topology"])
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    print("backends: " + ", ".join(f"{k} {'yes' if ok else 'no'}"
                                   for k, ok in info["backends"].items()))
    c = info["cluster"]
    if "error" in c:
        print(f"cluster: cannot start as asked: {c['error']}")
    else:
        gpus = f" on GPUs {c['gpus']}" if c["gpus"] else ""
        print(f"cluster: would start {c['kind']} with {c['workers']} worker(s){gpus}")
        if c["note"]:
            print(f"note: {c['note']}")
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    from .data import load_dataset, split
    from .data.deformed import deformed_spec

    spec = deformed_spec(args.dataset, args.copies, args.deform, args.seed)  # bad input first
    ds = load_dataset(args.dataset, data_dir=args.data_dir, download=not args.no_download,
                      verify=args.verify, seed=args.seed)
    if ds.note:
        print(f"note: {ds.note}")
    parts = split(ds.X, ds.y, test_size=args.test_size, seed=args.seed, fraction=args.fraction)
    counts = np.bincount(ds.y, minlength=ds.n_classes)
    print(f"dataset {ds.name}: {ds.X.shape[0]} samples x {ds.X.shape[1]} features, "
          f"{ds.n_classes} classes, {ds.X.dtype}")
    print(f"source: {ds.source}; checksums {'verified' if ds.verified else 'not checked'}")
    print("class counts: " + " ".join(str(int(c)) for c in counts))
    print(f"split (test size {args.test_size}, seed {args.seed}, fraction {args.fraction}): "
          f"train {len(parts.X_train)}, test {len(parts.X_test)}")
    if spec is not None:
        print(f"deformed: {spec.copies} copies of each of the {len(parts.X_train)} training "
              f"images = {spec.copies * len(parts.X_train):,} training rows, made on the workers")
    if args.preview:
        from .data.preview import preview_png

        if int(round(np.sqrt(parts.X_train.shape[1]))) ** 2 != parts.X_train.shape[1]:
            raise DataError(f"--preview draws square images; {ds.name} rows have "
                            f"{parts.X_train.shape[1]} features")
        shown = preview_png(args.preview, parts.X_train[:8],
                            copies=min(6, spec.copies) if spec else 1, seed=args.seed,
                            deformation=spec.deformation if spec else None)
        print(f"wrote {shown}")
    if args.shard:
        from .cluster import connect
        from .data import shard, shard_locations

        with connect(**cluster_kwargs(args)) as rc:
            print(f"cluster: {rc.plan.kind.value}, {len(scheduler_workers(rc.client))} "
                  f"workers, started in {rc.start_seconds:.2f} s; dashboard {rc.dashboard_link}")
            X = shard(parts.X_train, rc.client, dtype=np.float32, timeout=args.timeout)
            print(f"train shards: {X.numblocks[0]} x float32, meta "
                  f"{type(X._meta).__module__}.{type(X._meta).__name__}")
            for s in shard_locations(X, rc.client):
                print(f"  shard {s.index}: {s.rows} rows on {s.worker} as {s.array_type} ({s.device})")
    return 0


def print_job(result: dict) -> None:
    """The human-readable summary of a job's result dictionary."""
    print(f"dataset {result['dataset']}: train {result['n_train']} x {result['n_features']}, "
          f"test {result['n_test']} (fraction {result['fraction']}, seed {result['seed']})")
    print(f"cluster: {result['cluster']}, {result['workers']} workers ({result['device']}); "
          f"dashboard {result['dashboard']}")
    for what, blocks in result.get("placement", {}).items():
        for s in blocks:
            print(f"  {what} {s['index']}: {s['rows']} rows on {s['worker']} "
                  f"as {s['array_type']} ({s['device']})")
    if result.get("placement_problems"):
        print("warning: placement: " + "; ".join(result["placement_problems"]), file=sys.stderr)
    if result["task"] == "knn":
        print(f"model: k={result['n_neighbors']}, weights={result['weights']}, "
              f"plan={result['plan']}, method={result['method']}, "
              f"precision={result['precision']} (neighbours {result['neighbours']})")
        if result.get("precision_note"):
            print(f"note: {result['precision_note']}", file=sys.stderr)
    else:
        print(f"model: C={result['C']}, iterations {result['n_iter']} (max {result['max_iter']}), "
              f"{result['evaluations']} evaluations, fit by {result['comm']} "
              f"({result['round_trips']} Dask round trips, L-BFGS on the "
              f"{result['optimizer']}), loss {result['loss']:.6f}"
              + (f", products {result['evaluation']}" if result.get("evaluation") else ""))
        if not result["converged"]:  # as scikit-learn says it, once
            print(f"note: the fit stopped before converging ({result['stop_reason']}, "
                  f"max_iter={result['max_iter']}): loss {result['loss']:.6f}, largest gradient "
                  f"entry {result['gradient_max']:.2e} > tol {result['tol']:g}; increase "
                  f"--max-iter to go further",
                  file=sys.stderr)
    repeated = (f" (rows repeated {result['fraction']:g}x: each neighbour counts "
                f"{result['fraction']:g} times, see fraction_note)"
                if result.get("fraction_note") else "")
    print(f"accuracy: {result['accuracy']:.4f}{repeated}")
    for run in ("cold", "warm"):
        phases = ", ".join(f"{k} {v:.3f}s" for k, v in result[run].items())
        print(f"{run}: {phases}")
    if result["task"] == "knn":
        print(f"warm predict (one graph, data resident), median of "
              f"{len(result['warm_predict_seconds'])}: {result['warm_predict_median'] * 1000:.1f} ms")
    else:
        print(f"warm fit+predict (data resident), median of "
              f"{len(result['warm_fit_predict_seconds'])}: "
              f"{result['warm_fit_predict_median'] * 1000:.1f} ms")
    moved = result.get("bytes_between_workers")
    if moved:
        from .transfers import human

        parts = [f"{run} " + ", ".join(f"{k} {human(v)}" for k, v in moved[run].items())
                 for run in ("cold", "warm per repetition") if moved[run]]
        print(f"moved between workers ({result.get('protocol', 'tcp')}, Dask's transfer "
              f"records): " + "; ".join(parts))


BACKEND_CHOICES = (*BACKENDS, "all")


def backend_option(text: str) -> str:
    """``--backend``: one backend, ``all``, or several separated by commas (side by side)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BACKEND_CHOICES or (n == "all" and len(names) > 1)]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"{(unknown or [text])[0]!r}: choose from {', '.join(BACKEND_CHOICES)}, or several "
            "backends separated by commas")
    return ",".join(dict.fromkeys(names))  # each once, in the order given


def print_comparison(result: dict) -> None:
    print(f"{result['task']} on {result['dataset']}: train {result['n_train']}, test "
          f"{result['n_test']}; {result['workers']} {result['device']} workers")
    head = f"{'backend':<12} {'accuracy':>8} {'cold fit':>9} {'cold pred':>9} " \
           f"{'warm fit':>9} {'warm pred':>9} {'vs cuML':>8} {'!=sklearn':>9}"
    print(head)
    for r in result["backends"]:
        if r["status"] != "ok":
            print(f"{r['backend']:<12} {r['status']}")
            continue
        vs = f"{r['speedup_vs_cuml']:.2f}x" if "speedup_vs_cuml" in r else "n/a"
        differ = r.get("differ_from_sklearn", "n/a")
        print(f"{r['backend']:<12} {r['accuracy']:>8.4f} {r['cold']['fit']:>8.3f}s "
              f"{r['cold']['predict']:>8.3f}s {r['warm']['fit']:>8.3f}s "
              f"{r['warm']['predict']:>8.3f}s {vs:>8} {differ:>9}"
              + (f"  ({r['note']})" if r.get("note") else ""))
    if any("differ_from_sklearn" in r for r in result["backends"]):
        print("!=sklearn: test predictions that differ from the scikit-learn row's")


def cmd_task(args: argparse.Namespace) -> int:
    from .files import write_json

    if dry_run(args):
        return 0
    if args.backend != "numba":
        result = run_comparison(args)
        print_comparison(result)
    else:
        result = run_task(args)
        result["process"] = {"interpreter start to command": args.startup_seconds}
        print_job(result)
    if args.json:
        write_json(args.json, result)
        print(f"wrote {args.json}")
    return 0


def _list(text: str, kind: type) -> list:
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise MgpuDaskError(f"{text!r} is not a comma-separated list of {kind.__name__}") from None


def cmd_bench(args: argparse.Namespace) -> int:
    import time

    from .bench import merge_rows, run_sweep, write_outputs
    from .jobs import _report, machine

    if args.replot:
        return _replot(Path(args.out))
    tasks = _list(args.tasks, str)
    for task in tasks:
        if task not in ("knn", "logreg"):
            raise MgpuDaskError(f"--tasks {task!r}: choose from knn, logreg")
    backends = list(BACKENDS) if args.backends == "all" else _list(args.backends, str)
    for name in backends:
        if name not in BACKENDS:
            raise MgpuDaskError(f"--backends {name!r}: choose from {', '.join(BACKENDS)} or all")
    cpu = {"cpu_max_train": args.cpu_max_train}
    options = {"knn": {"k": args.k, "weights": args.weights, "repeats": args.repeats, **cpu},
               "logreg": {"C": args.C, "max_iter": args.max_iter, "tol": 1e-4,
                          "comm": args.comm, "repeats": args.repeats, **cpu}}
    out = Path(args.out)
    previous: dict = {}
    if args.append and (out / "results.json").exists():
        previous = json.loads((out / "results.json").read_text())
    kwargs = cluster_kwargs(args)
    kwargs.pop("workers")
    data = dict(dataset=args.dataset, data_dir=args.data_dir, download=not args.no_download,
                test_size=args.test_size, seed=args.seed)
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    with _report(args.report):
        rows = run_sweep(tasks, _list(args.workers_list, int), _list(args.fractions, float),
                         backends, options=options, cluster_options=kwargs, data=data,
                         progress=not args.quiet)
    command = args.command_line
    meta = {"command": command, "commands": [*previous.get("commands", []), command],
            "machine": machine(), "started": previous.get("started", started)}
    rows = merge_rows(previous.get("rows", []), rows)
    for path in write_outputs(rows, out, meta):
        print(f"wrote {path}")
    ok = [r for r in rows if r["status"] == "ok"]
    for r in ok:
        print(f"{r['task']:<7} {r['backend']:<12} workers {r['workers']:<2} fraction "
              f"{r['fraction']:<5} accuracy {r['accuracy']:.4f} warm {r['warm_total']:.3f} s")
    for r in rows:
        if r["status"] != "ok":
            print(f"{r['task']:<7} {r['backend']:<12} workers {r['workers']:<2} {r['status']}")
    return 0


def _replot(out: Path) -> int:
    """Write the CSV, the plots and the HTML page again from OUT/results.json."""
    from .bench import write_outputs

    source = out / "results.json"
    try:
        saved = json.loads(source.read_text())
        rows = saved["rows"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MgpuDaskError(f"--replot needs a bench results.json in {out} ({exc}); "
                            "point --out at a bench folder") from None
    meta = {k: v for k, v in saved.items() if k != "rows"}
    for path in write_outputs(rows, out, meta):
        print(f"wrote {path}")
    return 0


def cmd_workflow(args: argparse.Namespace) -> int:
    from .files import write_json
    from .workflow import load_workflow, run_workflow

    flow = load_workflow(args.file)
    results = run_workflow(flow, build_parser(), cluster_argv=args.cluster_argv, echo=print)
    payload = {"workflow": flow.name, "file": str(args.file), "runs": results}
    if args.json:
        write_json(args.json, payload)
        print(f"wrote {args.json}")
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    """Start a cluster and keep it up until Ctrl-C or SIGTERM; runs join it by address."""
    import time

    from .cluster import IgnoreInterrupt, connect

    if args.scheduler_address or args.scheduler_file:
        raise MgpuDaskError("`cluster` starts a cluster; to use a running one, pass "
                            "--scheduler-address to knn, logreg, data or workflow instead")
    with connect(**cluster_kwargs(args)) as rc:
        address = rc.client.scheduler.address
        link = rc.dashboard_link or "(none: bokeh is not installed)"
        rc.client.register_plugin(IgnoreInterrupt(), name="mgpu-dask-ignore-sigint")
        n = len(scheduler_workers(rc.client))
        print(f"cluster: {rc.plan.kind.value}, {n} workers ({rc.plan.device}), started in "
              f"{rc.start_seconds:.1f} s")
        print(f"scheduler: {address}")
        print(f"dashboard: {link}")
        print(f"join it:   python -m mgpu_dask.run knn --scheduler-address {address}")
        print("Ctrl-C (or SIGTERM) stops it.", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (raised as Terminated, a subclass)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C: shut down anyway
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print("stopping the cluster ...", flush=True)
    print("cluster stopped", flush=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mgpu_dask.run", description=__doc__)
    parser.add_argument("--version", action="version", version=f"mgpu_dask {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("info", help="GPUs, versions, usable backends, the cluster it would start")
    add_cluster_args(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=cmd_info)

    p = sub.add_parser("cluster", help="start a cluster and keep it up (Ctrl-C stops it); "
                                       "runs join it with --scheduler-address")
    add_cluster_args(p)
    p.set_defaults(handler=cmd_cluster)

    p = sub.add_parser("data", help="fetch/verify a data set and print a summary")
    add_data_args(p)
    add_cluster_args(p)
    p.add_argument("--verify", action="store_true", help="check SHA-256 of local files too")
    p.add_argument("--shard", action="store_true",
                   help="start the cluster, shard the training set, show where shards live")
    p.add_argument("--preview", default=None, metavar="FILE.png",
                   help="write a PNG of eight training images (and, for NAME-deformed data, "
                        "their deformed copies)")
    p.set_defaults(handler=cmd_data)

    p = sub.add_parser("knn", help="k-nearest neighbours with our Numba kernels, cold and warm")
    add_data_args(p)
    add_cluster_args(p)
    p.add_argument("--k", "--n-neighbors", dest="k", type=int, default=3, help="neighbours (3)")
    p.add_argument("--weights", choices=("distance", "uniform"), default="distance")
    p.add_argument("--plan", choices=("auto", "replicate", "shard"), default="auto",
                   help="replicate the training set on every worker, or shard it and "
                        "tree-merge (auto: replicate when it fits the memory budget)")
    p.add_argument("--method", choices=("gemm", "direct"), default="gemm",
                   help="bulk distances by BLAS/cuBLAS product or our tiled kernel")
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="arithmetic of the distance product. 8-bit data (MNIST pixels) are exact "
                        "in every precision; auto takes bf16 tensor cores for them (int8 before "
                        "Ampere) and tf32 for "
                        "float data, whose ranking is re-ranked in float64 and certified by an "
                        "error bound (rows it cannot certify are recomputed): no precision "
                        "changes a neighbour. int8 needs 8-bit integer data")
    p.add_argument("--backend", type=backend_option, default="numba",
                   help="numba: our kernels; cupy, cuda-c (our algorithm as CUDA C kernels), "
                        "cuml (multi-GPU), cuml-single (one GPU), cuvs (cuVS brute force, "
                        "one GPU), sklearn, torch (PyTorch on "
                        "every worker's shards), torch-script (the PyTorch script on one "
                        "GPU): the comparison backends; all: every usable backend on the same "
                        "split, one table; several separated by commas (numba,cuda-c): those, "
                        "side by side")
    p.add_argument("--dtype", choices=("uint8", "float32"), default="uint8",
                   help="the pixels on the GPUs: uint8 as loaded (1 byte each), or float32 "
                        "(the study's Float32 axis; same predictions, 4x the bytes); "
                        "backends that need float32 convert and say so")
    p.add_argument("--memory-budget", default=None,
                   help="per-worker bytes for the training set, e.g. 2GB (default: 80%% of free)")
    add_output_args(p, repeats=5)
    p.set_defaults(handler=cmd_task)

    p = sub.add_parser("logreg", help="multinomial logistic regression, data-parallel L-BFGS")
    add_data_args(p)
    add_cluster_args(p)
    p.add_argument("--C", "-C", dest="C", type=float, default=1.0,
                   help="inverse L2 strength, as scikit-learn (1.0)")
    p.add_argument("--max-iter", type=int, default=100, help="L-BFGS iterations at most (100)")
    p.add_argument("--tol", type=float, default=1e-4, help="gradient tolerance (1e-4)")
    p.add_argument("--classes", default=None, metavar="A,B,...",
                   help="keep only the rows of these labels, in train and test (3,8: the "
                        "binary 3-versus-8 problem); every backend gets the same rows")
    p.add_argument("--comm", default="auto",
                   help="single-host: one worker maps every shard of the node and runs the "
                        "whole fit; actors: one message round per evaluation (any cluster); "
                        "auto: single-host where possible (default)")
    p.add_argument("--optimizer", choices=("auto", "device", "host"), default="auto",
                   help="where the L-BFGS vectors live: device (the fitting GPU, a few "
                        "scalars to the host per iteration), host (NumPy), auto: the device "
                        "when every shard is on a GPU (default)")
    p.add_argument("--precision", choices=("auto", "fp32", "int8", "bf16"), default="auto",
                   help="products of each evaluation on a GPU: fp32, float32 cuBLAS; "
                        "int8, tensor cores where the rows are 8-bit levels such as pixels / "
                        "255 (compute capability 7.5+): one byte per value read, coefficients "
                        "and residuals in four int8 terms, exact integer sums (closer to "
                        "float64 than fp32); bf16, tensor cores for such rows (8.0+), three "
                        "bf16 terms, the gradient summed in short row blocks (can differ from "
                        "fp32 in the last digits); auto (default): int8 where it applies; "
                        "fp32 wherever the chosen one does not apply")
    p.add_argument("--dtype", choices=("uint8", "float32"), default="uint8",
                   help="the pixels on the workers: uint8 as loaded (1 byte each; the model "
                        "scales them to [0, 1] as it reads them), or float32 copies scaled "
                        "to [0, 1] (4x the bytes); the same model either way. Backends that "
                        "need float32 convert and say so")
    p.add_argument("--backend", type=backend_option, default="numba",
                   help="numba: our kernels; cupy, cuda-c (our softmax as a CUDA C kernel), "
                        "cuml (multi-GPU), cuml-single (one GPU), sklearn, torch (PyTorch "
                        "L-BFGS on every worker's shards, a torch.distributed group), "
                        "torch-script (one GPU): the comparison backends; all: every usable "
                        "backend on the same split, one table; several separated by commas: "
                        "those, side by side")
    add_output_args(p, repeats=3)
    p.set_defaults(handler=cmd_task)

    p = sub.add_parser("bench", help="sweep tasks x workers x data sizes x backends; "
                                     "JSON, CSV, PNG and HTML plots")
    add_data_args(p)
    add_cluster_args(p)
    p.set_defaults(workers=None)
    p.add_argument("--tasks", default="knn,logreg", help="comma list of knn, logreg")
    p.add_argument("--workers-list", "--gpus", dest="workers_list", default="1,2,4",
                   help="comma list of worker counts, one cluster each (1,2,4)")
    p.add_argument("--fractions", default="0.25,1,4", help="comma list of data sizes (0.25,1,4)")
    p.add_argument("--backends", default="all",
                   help=f"comma list of {', '.join(BACKENDS)}")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--weights", choices=("distance", "uniform"), default="distance")
    p.add_argument("--C", dest="C", type=float, default=1.0)
    p.add_argument("--max-iter", type=int, default=100)
    p.add_argument("--comm", default="auto", help="logreg: auto, single-host or actors")
    p.add_argument("--out", default="bench-results", help="folder for JSON, CSV and plots")
    p.add_argument("--replot", action="store_true",
                   help="run nothing: write the CSV, PNG plots and HTML page again from "
                        "OUT/results.json")
    p.add_argument("--append", action="store_true",
                   help="keep the rows already in OUT/results.json that this sweep does not redo")
    p.add_argument("--cpu-max-train", type=int, default=60_000, metavar="ROWS",
                   help="run scikit-learn only up to this many training rows (60000; its "
                        "KNN on 210,000 rows takes minutes per run)")
    add_output_args(p, repeats=3)
    p.set_defaults(handler=cmd_bench)

    p = sub.add_parser("workflow", help="run a declarative sweep file from workflows/")
    p.add_argument("file", help="a workflow YAML file, e.g. workflows/knn-mnist.yaml")
    p.add_argument("--json", default=None, metavar="FILE", help="write every run's results")
    p.set_defaults(handler=cmd_workflow)
    p.epilog = "Other options (e.g. --scheduler-file F, --workers 4) apply to every run."
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so every ``with`` block (cluster, files) unwinds."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


@contextlib.contextmanager
def _timeouts(seconds: float | None) -> Iterator[None]:
    """``--timeout`` bounds cluster start and every wait on results."""
    if not seconds:
        yield
        return
    import dask

    with dask.config.set({"mgpu-dask.cluster.start-timeout": f"{seconds}s",
                          "mgpu-dask.cluster.compute-timeout": f"{seconds}s"}):
        yield


def _since_process_start() -> float | None:
    """Seconds since this process started (imports included), where the OS says.

    On Linux from ``/proc`` (10 ms ticks on both sides); psutil's
    ``create_time`` elsewhere, which counts from a boot time rounded to the
    second and so can be up to 1 s off.
    """
    try:
        import os

        with open("/proc/self/stat") as f:  # field 22 (after the parenthesised name): start
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import time

        import psutil

        return time.time() - psutil.Process().create_time()
    except Exception:
        return None


def _starts_local_cluster(args: argparse.Namespace) -> bool:
    return (getattr(args, "cluster", None) == "local" and hasattr(args, "device")
            and not getattr(args, "scheduler_address", None)
            and not getattr(args, "scheduler_file", None))


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    startup = _since_process_start()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "workflow":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.cluster_argv = extra
    args.startup_seconds = startup
    args.command_line = "python -m mgpu_dask.run " + " ".join(
        sys.argv[1:] if argv is None else argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    if _starts_local_cluster(args):  # before the heavy imports, so the two overlap
        from .worker_start import start_early

        start_early(args.device)
    if args.command != "info":  # every other command reads data sets into dask arrays
        import_dask_array()  # this process never uses xarray (see UNUSED_BY_DASK_ARRAY)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        with _timeouts(getattr(args, "timeout", None)):
            return handler(args)
    except MgpuDaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except TimeoutError as exc:
        print(f"error: a wait timed out ({exc}); the cluster was shut down. Raise --timeout, or "
              "watch the dashboard for a stuck or dead worker", file=sys.stderr)
        return 3
    except Terminated:
        print("terminated (SIGTERM): cluster shut down, no partial result files", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("interrupted: cluster shut down, no partial result files", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def cli() -> None:
    """``python -m mgpu_dask.run`` and the ``mgpu-dask`` command: :func:`main`, then the exit
    without the interpreter's teardown.

    When ``main`` returns, the cluster is closed and every file is written;
    Python's exit handlers (``atexit``: logging, multiprocessing, Dask) run
    here, and only the interpreter's finalisation of every module and object
    is skipped (most of a second of a cold run, needed by nothing of ours).
    """
    code = main()
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    cli()
