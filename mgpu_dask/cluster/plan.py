"""What cluster the options ask for, decided before anything starts.

:func:`plan_cluster` checks the options and says what :func:`~.connection.connect`
would start (local CUDA, local CPU, a running scheduler, or batch jobs), with
one clear error for anything the user must fix; it imports no GPU library and
touches no CUDA context (GPUs are counted through NVML or ``nvidia-smi``).
"""

from __future__ import annotations

import os
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

from ..config.environment import gpu_count, is_installed, visible_gpus
from ..exceptions import ClusterError

if TYPE_CHECKING:
    from distributed import Client


class ClusterKind(str, Enum):
    LOCAL_CUDA = "local-cuda"
    LOCAL_CPU = "local-cpu"
    ADDRESS = "address"
    SLURM = "slurm"
    PBS = "pbs"


class ClusterPlan(NamedTuple):
    """What :func:`connect` would start, decided without starting anything."""

    kind: ClusterKind
    n_workers: int | None          # None: whatever the remote scheduler has
    device: str                    # "gpu" or "cpu"
    gpu_indices: tuple[int, ...]
    threads_per_worker: int
    address: str | None
    note: str | None
    jobs: int = 0                  # batch jobs (slurm / pbs)
    gpus_per_job: int | None = None


class RunningCluster(NamedTuple):
    """A started (or joined) cluster: its client, plan, start time, dashboard and the
    notes of anything that fell back while it started."""

    client: Client
    plan: ClusterPlan
    start_seconds: float
    dashboard_link: str | None
    notes: tuple[str, ...] = ()


def plan_cluster(workers: int | None = None, *, scheduler_address: str | None = None,
                 device: str = "auto", cluster: str = "local", jobs: int = 1,
                 gpus_per_job: int | None = None, scheduler_file: str | None = None) -> ClusterPlan:
    """Decide the cluster for the arguments given; raise what the user must fix.

    Parameters
    ----------
    workers : int or None, default None
        Worker count: GPUs to use (default all visible) or CPU worker processes
        (default ``min(4, cpu_count)``).
    scheduler_address : str or None, default None
        Join this scheduler instead of starting a local cluster.
    scheduler_file : str or None, default None
        Join the scheduler described by this file (``dask scheduler --scheduler-file``).
    device : {"auto", "gpu", "cpu"}, default "auto"
        ``"auto"`` uses GPUs when any are visible and dask-cuda is installed
        (for batch jobs: when ``gpus-per-job`` is set).
    cluster : {"local", "slurm", "pbs"}, default "local"
        Submit ``jobs`` batch jobs through dask-jobqueue instead of starting locally.
    jobs : int, default 1
        Batch jobs to submit (each brings ``gpus_per_job`` GPU workers).
    gpus_per_job : int or None, default None
        GPUs per batch job; ``None`` reads ``jobqueue.mgpu-<cluster>.gpus-per-job``.
    """
    if device not in ("auto", "gpu", "cpu"):
        raise ClusterError(f"--device {device!r} is not one of auto, gpu, cpu")
    if workers is not None and workers < 1:
        raise ClusterError(f"--workers {workers} must be at least 1")
    if scheduler_address and scheduler_file:
        raise ClusterError("give --scheduler-address or --scheduler-file, not both")
    if scheduler_address or scheduler_file:
        where = scheduler_address or f"file:{scheduler_file}"
        return ClusterPlan(ClusterKind.ADDRESS, workers, device, (), 0, where, None)
    if cluster != "local":
        import dask

        from .jobqueue import SYSTEMS, job_options

        if cluster not in SYSTEMS:
            raise ClusterError(f"--cluster {cluster!r} is not one of local, slurm, pbs")
        if jobs < 1:
            raise ClusterError(f"--jobs {jobs} must be at least 1")
        if device == "auto":
            configured = dask.config.get(f"jobqueue.mgpu-{cluster}.gpus-per-job", None)
            device = "gpu" if (gpus_per_job or configured) else "cpu"
        _, per_job = job_options(cluster, device, gpus_per_job)
        kind = ClusterKind.SLURM if cluster == "slurm" else ClusterKind.PBS
        return ClusterPlan(kind, jobs * per_job, device, (), 1, None, None, jobs, gpus_per_job)
    n_gpus = gpu_count()
    note = None
    if device == "auto":
        device = "gpu" if n_gpus and is_installed("dask_cuda") and is_installed("cupy") else "cpu"
        if n_gpus and device == "cpu":
            note = (f"{n_gpus} GPU(s) visible but dask-cuda or CuPy is missing; running on CPU "
                    "(pip install 'mgpu-dask[cuda13]' for the GPU path)")
    if device == "gpu":
        if n_gpus == 0:
            raise ClusterError("--device gpu but no NVIDIA GPU is visible here; use --device cpu")
        for module, extra in (("dask_cuda", "cuda13"), ("cupy", "cuda13")):
            if not is_installed(module):
                raise ClusterError(f"{module} is not installed; pip install 'mgpu-dask[{extra}]'")
        n = workers or n_gpus
        if n > n_gpus:
            raise ClusterError(f"--workers {n} asks for more GPU workers than the {n_gpus} GPU(s) "
                               f"visible; use --workers {n_gpus} or fewer (one worker per GPU)")
        indices = tuple(g.index for g in visible_gpus()[:n])
        return ClusterPlan(ClusterKind.LOCAL_CUDA, n, "gpu", indices, 1, None, note)
    cpus = os.cpu_count() or 1
    n = workers or min(4, cpus)
    return ClusterPlan(ClusterKind.LOCAL_CPU, n, "cpu", (), max(1, cpus // n), None, note)
