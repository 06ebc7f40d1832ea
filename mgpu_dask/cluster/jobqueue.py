"""SLURM and PBS clusters through dask-jobqueue, configured by ``jobqueue.yaml``.

``--cluster slurm`` reads ``jobqueue.mgpu-slurm`` and ``--cluster pbs`` reads
``jobqueue.mgpu-pbs`` from dask.config (packaged defaults, overridden by the
user's ``~/.config/dask/*.yaml``).  GPU jobs start ``dask_cuda.cli`` so every GPU
of a job gets its own worker; CPU jobs start the plain dask worker.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import dask

from ..exceptions import BackendUnavailableError, ClusterError

SYSTEMS = {"slurm": ("SLURMCluster", ["sinfo", "--noheader"]),
           "pbs": ("PBSCluster", ["qstat", "-B"])}


def _section(system: str) -> dict[str, Any]:
    try:
        return dict(dask.config.get(f"jobqueue.mgpu-{system}"))
    except KeyError:
        raise ClusterError(f"no dask config section jobqueue.mgpu-{system}; copy "
                           "deploy/jobqueue.yaml to ~/.config/dask/") from None


def _cluster_class(system: str) -> Any:
    if system not in SYSTEMS:
        raise ClusterError(f"--cluster {system!r} is not one of local, slurm, pbs")
    try:
        import dask_jobqueue
    except ImportError:
        raise BackendUnavailableError("dask-jobqueue is not installed; "
                                      "pip install 'mgpu-dask[hpc]'") from None
    return getattr(dask_jobqueue, SYSTEMS[system][0])


def job_options(system: str, device: str, gpus_per_job: int | None) -> tuple[dict[str, Any], int]:
    """Keyword arguments for the dask-jobqueue class, and workers each job brings."""
    section = _section(system)
    try:
        gpus = int(gpus_per_job or section["gpus-per-job"] or 0)
        processes = int(section["processes"] or 1)
        options: dict[str, Any] = {"config_name": f"mgpu-{system}"}
        if device == "gpu":
            if gpus < 1:
                raise ClusterError(f"--gpus-per-job {gpus} must be at least 1 for GPU jobs")
            options["worker_command"] = "dask_cuda.cli"
            options["processes"] = gpus  # splits the job's cores and memory per GPU worker
            if system == "slurm":
                options["job_extra_directives"] = [*section["job-extra-directives"],
                                                   f"--gres=gpu:{gpus}"]
            else:
                options["resource_spec"] = section["resource-spec"] or (
                    f"select=1:ncpus={section['cores']}:ngpus={gpus}:"
                    f"mem={str(section['memory']).replace(' ', '')}")
            return options, gpus
        options["worker_command"] = "distributed.cli.dask_worker"
        return options, processes
    except KeyError as exc:
        raise ClusterError(f"the dask config section jobqueue.mgpu-{system} has no key {exc}; "
                           "add it (deploy/jobqueue.yaml lists every key)") from None


def _build(system: str, device: str, gpus_per_job: int | None, **extra: Any) -> tuple[Any, int]:
    cls = _cluster_class(system)
    options, per_job = job_options(system, device, gpus_per_job)
    try:
        return cls(**options, **extra), per_job
    except KeyError as exc:
        raise ClusterError(f"the dask config section jobqueue.mgpu-{system} has no key {exc}; "
                           "add it (deploy/jobqueue.yaml lists every key)") from None


def job_script(system: str, *, device: str = "gpu", gpus_per_job: int | None = None) -> str:
    """The batch script one job would run, without starting or submitting anything."""
    cls = _cluster_class(system)
    options, _ = job_options(system, device, gpus_per_job)
    try:
        job = cls.job_cls(scheduler="tcp://SCHEDULER-ADDRESS:8786", name=f"mgpu-{system}-job",
                          **options)
    except KeyError as exc:
        raise ClusterError(f"the dask config section jobqueue.mgpu-{system} has no key {exc}; "
                           "add it (deploy/jobqueue.yaml lists every key)") from None
    return job.job_script()


def check_batch_system(system: str, timeout: float = 30.0) -> None:
    """Fail early, and clearly, when the batch system's commands are missing or mute."""
    command = SYSTEMS[system][1]
    if shutil.which(command[0]) is None:
        raise ClusterError(f"{command[0]} is not on PATH: this machine is not a {system.upper()} "
                           "submit host (or load its module first)")
    try:
        subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=True)
    except subprocess.CalledProcessError as exc:
        reason = (exc.stderr or exc.stdout or "").strip().splitlines()[-1:] or ["no output"]
        raise ClusterError(f"{system.upper()} does not answer ({' '.join(command)}: "
                           f"{reason[0]}); check that its controller is up") from None
    except subprocess.TimeoutExpired:
        raise ClusterError(f"{system.upper()} did not answer {' '.join(command)} within "
                           f"{timeout:.0f} s; check that its controller is up") from None


def _test_submit(cluster: Any) -> None:
    """``sbatch --test-only`` the job script: a refused request is an error now, not a timeout."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".sh") as script:
        script.write(cluster.job_script())
        script.flush()
        proc = subprocess.run(["sbatch", "--test-only", script.name], capture_output=True,
                              text=True, timeout=60)
    if proc.returncode != 0:
        lines = [x.strip() for x in (proc.stderr or proc.stdout).splitlines() if x.strip()]
        cluster.close(timeout=30)
        raise ClusterError(f"SLURM refused the job: {lines[0] if lines else 'no reason given'}; "
                           "adjust jobqueue.mgpu-slurm (cores, memory, queue, walltime)")


def start_job_cluster(system: str, *, jobs: int, device: str, gpus_per_job: int | None,
                      dashboard_address: str) -> tuple[Any, int]:
    """Build the dask-jobqueue cluster and submit ``jobs`` jobs; return it and the workers expected."""
    check_batch_system(system)
    cluster, per_job = _build(system, device, gpus_per_job,
                              scheduler_options={"dashboard_address": dashboard_address})
    if system == "slurm":
        _test_submit(cluster)
    cluster.scale(jobs=jobs)
    return cluster, jobs * per_job


def job_ids(cluster: Any) -> list[str]:
    """Batch job ids the cluster submitted (those known so far)."""
    return [str(job.job_id) for job in getattr(cluster, "workers", {}).values()
            if getattr(job, "job_id", None)]
