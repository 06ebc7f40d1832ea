"""The command line's parser: one sub-command per job, option groups shared by all."""

from __future__ import annotations

import argparse

from .. import __version__
from ..compare import BACKENDS
from ..kernels.precision import Precision
from .commands import cmd_cluster, cmd_data, cmd_info, cmd_workflow
from .tasks import cmd_bench, cmd_task

DESCRIPTION = """Command line: ``python -m mgpu_dask.run {info,data,cluster,knn,logreg,bench,workflow}``.

Errors a user can cause print as one ``error:`` line and exit with status 2."""


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mgpu_dask.run", description=DESCRIPTION)
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
    p.add_argument("--precision", choices=tuple(Precision), default="auto",
                   help="arithmetic of the distance product. 8-bit data (MNIST pixels) are exact "
                        "in every precision; auto takes int8 tensor cores for them (one fused "
                        "product and top-k kernel from Ampere on) and tf32 for "
                        "float data, whose ranking is re-ranked in float64 and certified by an "
                        "error bound (rows it cannot certify are recomputed): no precision "
                        "changes a neighbour. int8 needs 8-bit integer data")
    p.add_argument("--backend", type=backend_option, default="numba",
                   help="numba: our kernels; cupy, cuda-c (our algorithm as CUDA C kernels), "
                        "cuml (multi-GPU), cuml-single (one GPU), cuvs (cuVS brute force, "
                        "one GPU), faiss (FAISS's exact flat index on one worker's GPUs), "
                        "sklearn, torch (PyTorch on "
                        "every worker's shards), torch-script (the PyTorch script on one "
                        "GPU): the comparison backends; all: every usable backend on the same "
                        "split, one table; several separated by commas (numba,cuda-c): those, "
                        "side by side")
    p.add_argument("--faiss-shards", action="store_true",
                   help="--backend faiss on a worker that sees several GPUs: split the "
                        "training rows over them (default: a replica on each)")
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
    p.set_defaults(handler=cmd_workflow, build_parser=build_parser)
    p.epilog = "Other options (e.g. --scheduler-file F, --workers 4) apply to every run."
    return parser
