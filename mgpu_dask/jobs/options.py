"""Jobs from parsed command-line options.

The CLI (:mod:`mgpu_dask.cli`) parses and prints; a workflow
(:mod:`.workflow`) parses each run's options with the same parser; both call
these to run the job.
"""

from __future__ import annotations

import argparse
import contextlib


def cluster_kwargs(args: argparse.Namespace) -> dict:
    """The keyword arguments of ``cluster.connect`` from the cluster options."""
    return dict(workers=args.workers, scheduler_address=args.scheduler_address,
                device=args.device, dashboard_address=args.dashboard_address,
                timeout=args.timeout, cluster=args.cluster, jobs=args.jobs,
                gpus_per_job=args.gpus_per_job, scheduler_file=args.scheduler_file,
                host=getattr(args, "host", None), protocol=getattr(args, "protocol", "tcp"))


def label_list(text: str | None) -> list[int] | None:
    """``"3,8"`` -> ``[3, 8]`` (``--classes``); DataError for anything else."""
    if not text:
        return None
    from ..exceptions import DataError

    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise DataError(f"--classes {text}: give integer labels separated by commas, e.g. 3,8") \
            from None


def run_task(args: argparse.Namespace) -> dict:
    """Run the ``knn`` or ``logreg`` job the parsed options describe; return its results.

    The cluster starts first, on a thread of its own, and this process imports the
    job's modules (scikit-learn, dask.array, ...: about two seconds on a GPU machine)
    while its workers come up.
    """
    from ..cluster import StartingCluster

    classes = label_list(args.classes) if args.command == "logreg" else None
    with contextlib.closing(StartingCluster(**cluster_kwargs(args))) as starting:
        from .knn import knn_job
        from .logreg import logreg_job
        from .phases import stderr_echo

        common = dict(dataset=args.dataset, data_dir=args.data_dir,
                      download=not args.no_download, fraction=args.fraction,
                      test_size=args.test_size, seed=args.seed,
                      cluster_options=cluster_kwargs(args), repeats=args.repeats,
                      report=args.report, echo=None if args.quiet else stderr_echo,
                      copies=args.copies, deformation=args.deform, starting=starting)
        if args.command == "knn":
            return knn_job(n_neighbors=args.k, weights=args.weights, plan=args.plan,
                           method=args.method, precision=args.precision,
                           memory_budget=args.memory_budget, dtype=args.dtype, **common)
        return logreg_job(C=args.C, max_iter=args.max_iter, tol=args.tol, comm=args.comm,
                          optimizer=args.optimizer, precision=args.precision,
                          classes=classes, dtype=args.dtype, **common)


def run_comparison(args: argparse.Namespace) -> dict:
    """Run the job with every backend ``--backend`` names, side by side; return the rows."""
    from ..compare import BACKENDS
    from .compare import compare_job
    from .phases import stderr_echo

    names = list(BACKENDS) if args.backend == "all" else args.backend.split(",")
    if args.command == "knn":
        options = {"k": args.k, "weights": args.weights, "repeats": args.repeats,
                   "dtype": args.dtype}
    else:
        options = {"C": args.C, "max_iter": args.max_iter, "tol": args.tol,
                   "comm": args.comm, "precision": args.precision, "repeats": args.repeats,
                   "dtype": args.dtype}
    return compare_job(args.command, names, dataset=args.dataset, data_dir=args.data_dir,
                       download=not args.no_download, fraction=args.fraction,
                       test_size=args.test_size, seed=args.seed, options=options,
                       cluster_options=cluster_kwargs(args), report=args.report,
                       echo=None if args.quiet else stderr_echo, copies=args.copies,
                       deformation=args.deform, classes=label_list(getattr(args, "classes", None)))
