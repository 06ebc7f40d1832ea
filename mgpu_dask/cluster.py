"""The one way to get a Dask client: local CUDA, local CPU, or an address.

``connect`` starts ``dask_cuda.LocalCUDACluster`` (one worker per GPU) where
GPUs and dask-cuda are present, a plain ``LocalCluster`` otherwise, or joins
a running scheduler.  Nothing here touches CUDA in the client process: GPUs
are counted through NVML / ``nvidia-smi`` so the workers are the first to
create contexts (dask-cuda's documented pitfall).  Every wait has a timeout.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from enum import Enum
from typing import Iterator, NamedTuple

from distributed import Client, LocalCluster

from . import config
from ._compat import gpu_count, is_installed, visible_gpus
from .exceptions import ClusterError


class ClusterKind(str, Enum):
    LOCAL_CUDA = "local-cuda"
    LOCAL_CPU = "local-cpu"
    ADDRESS = "address"


class ClusterPlan(NamedTuple):
    """What :func:`connect` would start, decided without starting anything."""

    kind: ClusterKind
    n_workers: int | None          # None: whatever the remote scheduler has
    device: str                    # "gpu" or "cpu"
    gpu_indices: tuple[int, ...]
    threads_per_worker: int
    address: str | None
    note: str | None


class RunningCluster(NamedTuple):
    client: Client
    plan: ClusterPlan
    start_seconds: float
    dashboard_link: str | None


def plan_cluster(workers: int | None = None, *, scheduler_address: str | None = None,
                 device: str = "auto") -> ClusterPlan:
    """Decide the cluster for the arguments given; raise what the user must fix.

    Parameters
    ----------
    workers : int or None, default None
        Worker count: GPUs to use (default all visible) or CPU worker processes
        (default ``min(4, cpu_count)``).
    scheduler_address : str or None, default None
        Join this scheduler instead of starting a local cluster.
    device : {"auto", "gpu", "cpu"}, default "auto"
        ``"auto"`` uses GPUs when any are visible and dask-cuda is installed.
    """
    if device not in ("auto", "gpu", "cpu"):
        raise ClusterError(f"--device {device!r} is not one of auto, gpu, cpu")
    if workers is not None and workers < 1:
        raise ClusterError(f"--workers {workers} must be at least 1")
    if scheduler_address:
        return ClusterPlan(ClusterKind.ADDRESS, workers, device, (), 0, scheduler_address, None)
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


def _start_local(plan: ClusterPlan, dashboard_address: str, memory_limit: str | None) -> LocalCluster:
    if plan.kind is ClusterKind.LOCAL_CUDA:
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster(
            CUDA_VISIBLE_DEVICES=list(plan.gpu_indices), n_workers=plan.n_workers,
            threads_per_worker=1, dashboard_address=dashboard_address, protocol="tcp",
            memory_limit=memory_limit or "auto", device_memory_limit=0, silence_logs=logging.ERROR,
            pre_import=["cupy", "numba.cuda"])
    return LocalCluster(n_workers=plan.n_workers, threads_per_worker=plan.threads_per_worker,
                        processes=True, dashboard_address=dashboard_address,
                        memory_limit=memory_limit or "auto", silence_logs=logging.ERROR)


@contextlib.contextmanager
def connect(workers: int | None = None, *, scheduler_address: str | None = None,
            device: str = "auto", dashboard_address: str | None = None,
            timeout: float | None = None, memory_limit: str | None = None) -> Iterator[RunningCluster]:
    """Start (or join) a cluster, yield it with its client, and shut it down.

    Parameters
    ----------
    workers, scheduler_address, device
        See :func:`plan_cluster`.
    dashboard_address : str or None, default None
        Where the dashboard listens (``":8787"``; ``":0"`` picks a free port);
        defaults to ``mgpu-dask.cluster.dashboard-address``.
    timeout : float or None, default None
        Seconds allowed for the cluster to start and its workers to arrive;
        defaults to ``mgpu-dask.cluster.start-timeout``.
    memory_limit : str or None, default None
        Host memory budget per worker (``"8GB"``), ``"auto"`` when omitted.

    Yields
    ------
    RunningCluster
        The client, the plan, the start time in seconds and the dashboard link.
    """
    plan = plan_cluster(workers, scheduler_address=scheduler_address, device=device)
    timeout = timeout or config.seconds("cluster.start-timeout")
    dashboard_address = dashboard_address or config.get("cluster.dashboard-address")
    started = time.perf_counter()
    cluster = None
    client = None
    try:
        if plan.kind is ClusterKind.ADDRESS:
            try:
                client = Client(plan.address, timeout=timeout)
            except (OSError, TimeoutError) as exc:
                raise ClusterError(f"no Dask scheduler answered at {plan.address} within "
                                   f"{timeout:.0f} s ({exc}); check --scheduler-address") from None
        else:
            cluster = _start_local(plan, dashboard_address, memory_limit)
            client = Client(cluster, timeout=timeout)
        wanted = plan.n_workers or 1
        try:
            client.wait_for_workers(wanted, timeout=timeout)
        except TimeoutError:
            have = len(client.scheduler_info(n_workers=-1)["workers"])
            raise ClusterError(f"only {have} of {wanted} workers arrived within {timeout:.0f} s; "
                               "raise --timeout or check the workers' logs") from None
        link = client.dashboard_link if is_installed("bokeh") else None
        yield RunningCluster(client, plan, time.perf_counter() - started, link)
    finally:
        with contextlib.suppress(Exception):
            if client is not None:
                client.close(timeout=10)
        with contextlib.suppress(Exception):
            if cluster is not None:
                cluster.close(timeout=30)
