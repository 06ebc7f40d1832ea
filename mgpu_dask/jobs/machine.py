"""What this machine offers (GPUs, links, package versions, usable backends) for the
``info`` command, and the machine every result file names."""

from __future__ import annotations

import importlib.metadata
import platform
import socket
from typing import Any

from .. import __version__
from ..cluster.plan import plan_cluster
from ..config.environment import nvlink_topology, unusable, visible_gpus
from ..exceptions import MgpuDaskError

PACKAGES = ("mgpu-dask", "dask", "distributed", "dask-cuda", "dask-jobqueue", "numpy", "numba",
            "numba-cuda", "cupy-cuda12x", "cupy-cuda13x", "cuml-cu12", "cuml-cu13",
            "scikit-learn", "bokeh")


def versions() -> dict[str, str]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def backends() -> dict[str, str | None]:
    """Which compute backends can be used here, and why not: our kernels on CPU and GPU,
    dask-cuda, and every ``--backend`` comparison backend by the rule ``--backend all``
    uses (``compare.unavailable``: the package is imported, so a broken one shows its
    own error; importing CuPy creates no CUDA context).  None: usable."""
    from ..compare import BACKENDS, unavailable

    gpus = bool(visible_gpus())
    no_gpu = "no GPU visible here"
    found = {
        "numba-cpu": unusable("numba", "test"),
        "numba-cuda": (unusable("cupy", "cuda13") or unusable("numba.cuda", "cuda13")
                       if gpus else no_gpu),
        "dask-cuda": unusable("dask_cuda", "cuda13") if gpus else no_gpu,
    }
    found.update({name: unavailable(name, "gpu" if gpus else "cpu")
                  for name in BACKENDS if name != "numba"})
    return found


def _backends() -> dict[str, Any]:
    why = backends()
    return {"backends": {name: reason is None for name, reason in why.items()},
            "unavailable": {name: reason for name, reason in why.items() if reason}}


def describe(workers: int | None = None, scheduler_address: str | None = None,
             device: str = "auto") -> dict[str, Any]:
    """Everything ``python -m mgpu_dask.run info`` prints, as a dictionary."""
    try:
        plan = plan_cluster(workers, scheduler_address=scheduler_address, device=device)
        cluster = {"kind": plan.kind.value, "workers": plan.n_workers, "device": plan.device,
                   "gpus": list(plan.gpu_indices), "threads_per_worker": plan.threads_per_worker,
                   "note": plan.note}
    except MgpuDaskError as exc:
        cluster = {"error": str(exc)}
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "gpus": [{"index": g.index, "name": g.name, "memory_gib": round(g.memory_bytes / 2**30, 1)}
                 for g in visible_gpus()],
        "topology": nvlink_topology() if visible_gpus() else None,
        "versions": versions(),
        **_backends(),
        "cluster": cluster,
    }


def machine() -> dict[str, Any]:
    gpus = visible_gpus()
    return {"host": socket.gethostname(), "platform": platform.platform(),
            "python": platform.python_version(), "mgpu_dask": __version__,
            "gpus": [f"{g.name} ({g.memory_bytes / 2**30:.0f} GiB)" for g in gpus]}
