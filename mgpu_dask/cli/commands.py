"""The commands that are not a timed job: ``info``, ``data``, ``cluster`` and ``workflow``."""

from __future__ import annotations

import argparse
import json
import signal

from .. import __version__
from ..exceptions import DataError, MgpuDaskError
from ..jobs.options import cluster_kwargs
from ..parallel.workers import scheduler_workers


def dry_run(args: argparse.Namespace) -> bool:
    """Print the batch job script for ``--dry-run``; True when the command should stop."""
    if not args.dry_run:
        return False
    if args.cluster == "local":
        raise MgpuDaskError("--dry-run prints a batch job script: use it with --cluster slurm|pbs")
    from ..cluster import plan_cluster
    from ..cluster.jobqueue import job_script

    plan = plan_cluster(cluster=args.cluster, jobs=args.jobs, gpus_per_job=args.gpus_per_job,
                        device=args.device)
    print(f"# {args.jobs} job(s) x {plan.n_workers // max(args.jobs, 1)} worker(s), "
          f"device {plan.device}")
    print(job_script(args.cluster, device=plan.device, gpus_per_job=args.gpus_per_job))
    return True


def cmd_info(args: argparse.Namespace) -> int:
    from ..jobs.machine import describe

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
    for name, reason in info["unavailable"].items():
        print(f"  {name}: {reason}")
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
    import numpy as np

    from ..data import load_dataset, split
    from ..data.deformed import deformed_spec

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
        from ..data.preview import preview_png

        if int(round(np.sqrt(parts.X_train.shape[1]))) ** 2 != parts.X_train.shape[1]:
            raise DataError(f"--preview draws square images; {ds.name} rows have "
                            f"{parts.X_train.shape[1]} features")
        shown = preview_png(args.preview, parts.X_train[:8],
                            copies=min(6, spec.copies) if spec else 1, seed=args.seed,
                            deformation=spec.deformation if spec else None)
        print(f"wrote {shown}")
    if args.shard:
        from ..cluster import connect
        from ..data import shard, shard_locations

        with connect(**cluster_kwargs(args)) as rc:
            print(f"cluster: {rc.plan.kind.value}, {len(scheduler_workers(rc.client))} "
                  f"workers, started in {rc.start_seconds:.2f} s; dashboard {rc.dashboard_link}")
            X = shard(parts.X_train, rc.client, dtype=np.float32, timeout=args.timeout)
            print(f"train shards: {X.numblocks[0]} x float32, meta "
                  f"{type(X._meta).__module__}.{type(X._meta).__name__}")
            for s in shard_locations(X, rc.client):
                print(f"  shard {s.index}: {s.rows} rows on {s.worker} as {s.array_type} ({s.device})")
    return 0


def cmd_workflow(args: argparse.Namespace) -> int:
    from ..data.files import write_json
    from ..jobs.workflow import load_workflow, run_workflow

    flow = load_workflow(args.file)
    results = run_workflow(flow, args.build_parser(), cluster_argv=args.cluster_argv,
                           echo=print)
    payload = {"workflow": flow.name, "file": str(args.file), "runs": results}
    if args.json:
        write_json(args.json, payload)
        print(f"wrote {args.json}")
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    """Start a cluster and keep it up until Ctrl-C or SIGTERM; runs join it by address."""
    import time

    from ..cluster import IgnoreInterrupt, connect

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
