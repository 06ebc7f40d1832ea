"""The one way to get a Dask client: local CUDA, local CPU, an address, or batch jobs.

``connect`` starts ``dask_cuda.LocalCUDACluster`` (one worker per GPU) where
GPUs and dask-cuda are present, a plain ``LocalCluster`` otherwise, joins a
running scheduler, or submits dask-jobqueue jobs.  Nothing here touches CUDA
in the client process: the workers are the first to create contexts
(dask-cuda's documented pitfall).  Every wait has a timeout.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from typing import Iterator
from urllib.parse import urlsplit

from distributed import Client, LocalCluster

from .. import config
from ..config.environment import is_installed
from ..exceptions import ClusterError
from ..parallel import latency
from ..parallel.workers import scheduler_workers
from . import worker_start
from .plan import ClusterKind, ClusterPlan, RunningCluster, plan_cluster
from .worker_plugins import QuietClose

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def exposure_warning(host: str | None, dashboard_address: str) -> str | None:
    """One line when the scheduler or dashboard would listen beyond this machine."""
    dash_host = dashboard_address.rsplit(":", 1)[0].strip("[]") if ":" in dashboard_address else ""
    wide = [what for what, h in (("scheduler", host or "127.0.0.1"),
                                 ("dashboard", dash_host or host or "127.0.0.1"))
            if h not in LOOPBACK]
    if not wide:
        return None
    where = "all interfaces" if (host or dash_host) in ("0.0.0.0", "::", "") else (host or dash_host)
    return (f"warning: the {' and '.join(wide)} listen on {where}: anyone who can reach this "
            "machine can see the dashboard and run code on the workers; use --host 127.0.0.1 "
            "unless you need that")


def _fixed_port(dashboard_address: str | None) -> int | None:
    """The port of a dashboard address the caller gave, unless it is 0 (any port)."""
    port = (dashboard_address or "").rsplit(":", 1)[-1]
    return int(port) if port.isdigit() and int(port) else None


PROTOCOLS = ("tcp", "ucx")


def _check_protocol(protocol: str, plan: ClusterPlan) -> None:
    if protocol not in PROTOCOLS:
        raise ClusterError(f"protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    if protocol == "ucx":
        if plan.kind not in (ClusterKind.LOCAL_CUDA, ClusterKind.LOCAL_CPU):
            raise ClusterError("--protocol ucx applies to a local cluster; a joined or batch "
                               "cluster keeps the protocol its scheduler was started with")
        if not is_installed("distributed_ucxx"):
            raise ClusterError("--protocol ucx needs the distributed-ucxx package (RAPIDS: "
                               "pip install distributed-ucxx-cu13, or -cu12), not installed here")


def _start_local(plan: ClusterPlan, dashboard_address: str, memory_limit: str | None,
                 host: str | None = None, protocol: str = "tcp") -> LocalCluster:
    with worker_start.starting_workers(plan.device):
        return _start_local_cluster(plan, dashboard_address, memory_limit, host or "127.0.0.1",
                                    protocol)


def _start_local_cluster(plan: ClusterPlan, dashboard_address: str,
                         memory_limit: str | None, host: str, protocol: str) -> LocalCluster:
    if plan.kind is ClusterKind.LOCAL_CUDA:
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster(
            CUDA_VISIBLE_DEVICES=list(plan.gpu_indices), n_workers=plan.n_workers,
            threads_per_worker=1, dashboard_address=dashboard_address, protocol=protocol,
            memory_limit=memory_limit or "auto", device_memory_limit=0, silence_logs=logging.ERROR,
            pre_import=["cupy", "numba.cuda"], host=host)
    return LocalCluster(n_workers=plan.n_workers, threads_per_worker=plan.threads_per_worker,
                        processes=True, dashboard_address=dashboard_address,
                        memory_limit=memory_limit or "auto", silence_logs=logging.ERROR, host=host,
                        protocol=protocol)


def _wait_for_file(path: str, timeout: float) -> None:
    """A scheduler file appears once the scheduler is up (batch scripts start both at once)."""
    deadline = time.perf_counter() + timeout
    while not os.path.exists(path):
        if time.perf_counter() > deadline:
            raise ClusterError(f"no scheduler file at {path} after {timeout:.0f} s; start "
                               f"`dask scheduler --scheduler-file {path}` first")
        time.sleep(0.2)


@contextlib.contextmanager
def connect(workers: int | None = None, *, scheduler_address: str | None = None,
            device: str = "auto", dashboard_address: str | None = None,
            timeout: float | None = None, memory_limit: str | None = None,
            cluster: str = "local", jobs: int = 1, gpus_per_job: int | None = None,
            scheduler_file: str | None = None, host: str | None = None,
            protocol: str = "tcp") -> Iterator[RunningCluster]:
    """Start (or join) a cluster, yield it with its client, and shut it down.

    Parameters
    ----------
    workers, scheduler_address, device, cluster, jobs, gpus_per_job, scheduler_file
        See :func:`plan_cluster`.
    dashboard_address : str or None, default None
        Where the dashboard listens (``":8787"``; ``":0"`` picks a free port);
        defaults to ``mgpu-dask.cluster.dashboard-address``.
    timeout : float or None, default None
        Seconds allowed for the cluster to start and its workers to arrive;
        defaults to ``mgpu-dask.cluster.start-timeout``.
    memory_limit : str or None, default None
        Host memory budget per worker (``"8GB"``), ``"auto"`` when omitted.
    host : str or None, default None
        Interface the local scheduler and dashboard listen on (``127.0.0.1``
        when omitted; ``0.0.0.0`` for all, with a one-line warning on stderr).
    protocol : {"tcp", "ucx"}, default "tcp"
        Transport of a local cluster (``"ucx"``: UCX through the
        ``distributed-ucxx`` package, NVLink between GPUs of one node).
        A joined or batch cluster keeps its own.

    Yields
    ------
    RunningCluster
        The client, the plan, the start time in seconds and the dashboard link.
    """
    plan = plan_cluster(workers, scheduler_address=scheduler_address, device=device,
                        cluster=cluster, jobs=jobs, gpus_per_job=gpus_per_job,
                        scheduler_file=scheduler_file)
    _check_protocol(protocol, plan)
    timeout = timeout or config.seconds("cluster.start-timeout")
    asked, fixed_port = dashboard_address, _fixed_port(dashboard_address)  # taken: an error
    dashboard_address = dashboard_address or config.get("cluster.dashboard-address")
    started = time.perf_counter()
    local = None
    client = None
    try:
        if plan.kind is ClusterKind.ADDRESS:
            try:
                if scheduler_file:
                    _wait_for_file(scheduler_file, timeout)
                    client = Client(scheduler_file=scheduler_file, timeout=timeout)
                else:
                    client = Client(plan.address, timeout=timeout)
            except (OSError, TimeoutError) as exc:
                raise ClusterError(f"no Dask scheduler answered at {plan.address} within "
                                   f"{timeout:.0f} s ({exc}); check --scheduler-address") from None
        elif plan.kind in (ClusterKind.SLURM, ClusterKind.PBS):
            from .jobqueue import start_job_cluster

            local, _ = start_job_cluster(plan.kind.value, jobs=plan.jobs, device=plan.device,
                                         gpus_per_job=plan.gpus_per_job,
                                         dashboard_address=dashboard_address)
            client = Client(local, timeout=timeout)
        else:
            warning = exposure_warning(host, dashboard_address)
            if warning:
                print(warning, file=sys.stderr)
            if dashboard_address.startswith(":"):  # a bare port binds every interface
                dashboard_address = f"{host or '127.0.0.1'}{dashboard_address}"
            local = _start_local(plan, dashboard_address, memory_limit, host, protocol)
            # Results come straight from the workers, not relayed by the scheduler.
            client = Client(local, timeout=timeout, direct_to_workers=True)
            # Our workers write to the user's terminal: nothing from them while they close.
            client.register_plugin(QuietClose())
        wanted = plan.n_workers or 1
        try:
            client.wait_for_workers(wanted, timeout=timeout)
        except TimeoutError:
            have = len(scheduler_workers(client))
            detail = "raise --timeout or check the workers' logs"
            if plan.kind in (ClusterKind.SLURM, ClusterKind.PBS):
                from .jobqueue import job_ids

                ids = job_ids(local)
                detail = (f"the batch jobs did not start in time (queue busy or request too "
                          f"large?); cancelled job(s) {', '.join(ids) or '(none submitted)'}")
            raise ClusterError(f"only {have} of {wanted} workers arrived within {timeout:.0f} s; "
                               f"{detail}") from None
        notes = tuple(n for n in (plan.note, latency.tighten(client)) if n)
        link = client.dashboard_link if is_installed("bokeh") else None
        if local is not None and link and fixed_port and urlsplit(link).port != fixed_port:
            raise ClusterError(f"--dashboard-address {asked}: that port is taken; "
                               "choose another, or :0 for any free one")
        yield RunningCluster(client, plan, time.perf_counter() - started, link, notes)
    finally:
        with contextlib.suppress(Exception):
            if client is not None:
                client.close(timeout=10)
        with contextlib.suppress(Exception):
            if local is not None:
                local.close(timeout=30)  # for batch clusters this cancels every job
