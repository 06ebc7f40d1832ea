"""Jobs from parsed command-line options.

The CLI (:mod:`mgpu_dask.cli`) parses and prints; a workflow
(:mod:`.workflow`) parses each run's options with the same parser; both call
these to run the job.
"""

from __future__ import annotations

import argparse
import contextlib
import math

from ..exceptions import DataError, MgpuDaskError

MAX_NEIGHBOURS = 64  # kernels.knn.MAX_K (not imported here: it is cheap to check, costly to load)
COMMS = ("auto", "single-host", "actors")  # LogisticRegression's


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
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise DataError(f"--classes {text}: give integer labels separated by commas, e.g. 3,8") \
            from None


def _number(flag: str, value: float, *, low: float = 0.0, high: float | None = None,
            closed: bool = False) -> None:
    ok = math.isfinite(value) and (value >= low if closed else value > low)
    if ok and high is not None:
        ok = value < high
    if not ok:
        where = f"above {low:g}" if not closed else f"at least {low:g}"
        if high is not None:
            where += f" and below {high:g}"
        raise DataError(f"{flag} {value:g} must be a number {where}")


def check(args: argparse.Namespace) -> None:
    """Every option of a ``knn`` or ``logreg`` run checked before anything loads or
    starts, each bad value one error naming the flag: the data's, the cluster's (as
    :func:`~mgpu_dask.cluster.plan_cluster` decides, GPUs counted without CUDA) and the
    model's."""
    from ..cluster.plan import plan_cluster
    from ..data.deformed import deformed_spec
    from ..data.registry import DATASETS, deformed_base

    if args.dataset is not None and args.dataset not in DATASETS \
            and deformed_base(args.dataset) is None:
        raise DataError(f"--dataset {args.dataset!r}: choose from {', '.join(DATASETS)} or "
                        "NAME-deformed (mnist-deformed, ...)")
    deformed_spec(args.dataset, args.copies, args.deform, args.seed)
    _number("--fraction", args.fraction)
    _number("--test-size", args.test_size, high=1.0)
    if args.timeout is not None:
        _number("--timeout", args.timeout)
    if args.repeats < 1:
        raise DataError(f"--repeats {args.repeats} must be at least 1")
    plan_cluster(args.workers, scheduler_address=args.scheduler_address, device=args.device,
                 cluster=args.cluster, jobs=args.jobs, gpus_per_job=args.gpus_per_job,
                 scheduler_file=args.scheduler_file)
    if args.command == "knn":
        if not 1 <= args.k <= MAX_NEIGHBOURS:
            raise DataError(f"--k {args.k}: n_neighbors={args.k} must be a positive integer "
                            f"(1 to {MAX_NEIGHBOURS}, e.g. 3)")
        if args.memory_budget is not None:
            from dask.utils import parse_bytes

            try:
                parse_bytes(args.memory_budget)
            except (ValueError, TypeError):
                raise DataError(f"--memory-budget {args.memory_budget!r} is not a size; give "
                                "bytes or a size such as 20GB") from None
    elif args.command == "logreg":
        if not (math.isfinite(args.C) and args.C > 0):  # the estimator's own words
            raise DataError(f"C={float(args.C)!r} must be a positive number (e.g. 1.0)")
        _number("--tol", args.tol, closed=True)
        if args.max_iter < 1:
            raise DataError(f"--max-iter {args.max_iter} must be at least 1")
        if args.comm not in COMMS:
            raise DataError(f"comm={args.comm!r} is not one of {', '.join(COMMS)}")
        classes = label_list(args.classes)
        if classes is not None and len(set(classes)) < 2:
            raise DataError(f"--classes {args.classes}: give at least two labels, e.g. 3,8")


def spec(args: argparse.Namespace) -> dict:
    """What the run's searches or fits are made of, for the workers' warm-up."""
    from .warmup import knn_spec, logreg_spec

    if args.command == "knn":
        return knn_spec(dtype=args.dtype, dataset=args.dataset, precision=args.precision,
                        method=args.method, k=args.k, weights=args.weights, plan=args.plan,
                        workers=args.workers)
    return logreg_spec(dtype=args.dtype, dataset=args.dataset, precision=args.precision,
                       classes=label_list(args.classes), optimizer=args.optimizer)


def _local_gpu(args: argparse.Namespace) -> bool:
    """Whether this command starts its own cluster, on this machine, maybe on its GPUs
    (the workers then share this process's kernel caches)."""
    from ..config.environment import is_installed

    return (args.cluster == "local" and not args.scheduler_address
            and not args.scheduler_file and args.device != "cpu"
            and is_installed("cupy") and is_installed("numba"))


def compile_ahead(args: argparse.Namespace) -> object | None:
    """For a ``knn`` or ``logreg`` run that will start a local GPU cluster: start compiling
    its kernels now (:func:`.ahead.start`), so the CLI can do it before its own imports;
    None where nothing starts.  Cheap: no option is checked here (:func:`run_task` does,
    and a run it refuses stops the compiling processes as it exits).  :func:`run_task`
    uses ``args.compiling``."""
    from . import ahead
    from .phases import stderr_echo

    if not _local_gpu(args):
        return None
    try:
        kind = spec(args)
    except MgpuDaskError:
        return None
    return ahead.start(kind, (lambda message: None) if args.quiet else stderr_echo)


def run_task(args: argparse.Namespace) -> dict:
    """Run the ``knn`` or ``logreg`` job the parsed options describe; return its results.

    The data files start to be read, and the cluster to start, each on threads of
    their own; this process imports the job's modules (scikit-learn, ...) meanwhile.
    """
    from ..cluster import StartingCluster
    from . import ahead
    from .phases import stderr_echo
    from .warmup import begin

    check(args)
    from ..data.datasets import read_dataset_ahead

    read_dataset_ahead(args.dataset, data_dir=args.data_dir)  # decompressed while we import
    classes = label_list(args.classes) if args.command == "logreg" else None
    echo = None if args.quiet else stderr_echo
    say = echo or (lambda message: None)
    kind, local = spec(args), _local_gpu(args)
    if hasattr(args, "compiling"):  # started by the CLI (compile_ahead)
        compiling = args.compiling
    else:
        compiling = ahead.start(kind, say) if local else None
    on_ready = begin(kind, say, compiling)
    with contextlib.closing(StartingCluster(on_ready=on_ready, **cluster_kwargs(args))) \
            as starting:
        from ..config.environment import import_dask_array, import_scikit_learn

        import_dask_array()  # the CLI leaves it to here, after the cluster is asked for
        import_scikit_learn()
        from .knn import knn_job
        from .logreg import logreg_job

        common = dict(dataset=args.dataset, data_dir=args.data_dir,
                      download=not args.no_download, fraction=args.fraction,
                      test_size=args.test_size, seed=args.seed,
                      cluster_options=cluster_kwargs(args), repeats=args.repeats,
                      report=args.report, echo=echo, copies=args.copies,
                      deformation=args.deform, starting=starting)
        if args.command == "knn":
            result = knn_job(n_neighbors=args.k, weights=args.weights, plan=args.plan,
                             method=args.method, precision=args.precision,
                             memory_budget=args.memory_budget, dtype=args.dtype, **common)
        else:
            result = logreg_job(C=args.C, max_iter=args.max_iter, tol=args.tol,
                                comm=args.comm, optimizer=args.optimizer,
                                precision=args.precision, classes=classes, dtype=args.dtype,
                                **common)
    kernels = result.get("kernels") or {}
    if (local and result.get("device") == "gpu" and kernels.get("compiled") == 0
            and not kernels.get("compiled after the warm-up")):
        ahead.mark_ready(kind)  # every kernel loaded: the next run starts no compiling
    return result


def run_comparison(args: argparse.Namespace) -> dict:
    """Run the job with every backend ``--backend`` names, side by side; return the rows."""
    from ..compare import BACKENDS
    from .compare import compare_job
    from .phases import stderr_echo

    check(args)
    names = list(BACKENDS) if args.backend == "all" else args.backend.split(",")
    if args.command == "knn":
        options = {"k": args.k, "weights": args.weights, "repeats": args.repeats,
                   "dtype": args.dtype, "faiss_shards": args.faiss_shards}
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
