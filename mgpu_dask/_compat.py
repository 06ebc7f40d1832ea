"""Optional imports and hardware discovery that never touch a CUDA context.

The client process must not create a CUDA context before dask-cuda's workers
start (each worker pins its own GPU through ``CUDA_VISIBLE_DEVICES``), so GPU
counting here goes through NVML or ``nvidia-smi``, never through CUDA itself.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import shutil
import subprocess
from types import ModuleType
from typing import Any, NamedTuple

from .exceptions import BackendUnavailableError


class GPU(NamedTuple):
    index: int
    name: str
    memory_bytes: int


def optional_import(name: str) -> ModuleType | None:
    """Import ``name`` or return ``None`` when it (or what it needs) is missing."""
    try:
        return importlib.import_module(name)
    except Exception:  # a broken optional stack counts as missing, by design
        return None


UNUSED_BY_DASK_ARRAY = ("xarray",)
"""Optional libraries that ``dask.array`` imports when installed and our processes never
use: dask.array.core imports xarray (and with it pandas) only for ``da.from_array`` of a
dask-backed ``DataArray``.  On the H200 machines that import is 0.5-0.6 s of a cold
``knn`` run's client and again of its fork server (``benchmarks/results/round10-1xH200``)."""


def import_dask_array() -> None:
    """Import ``dask.array`` without the libraries of ``UNUSED_BY_DASK_ARRAY``, for the
    processes that are ours alone: the CLI's and the worker fork server's.

    They count as absent only during this import (so a later ``import xarray`` works
    as usual); where one is imported already, nothing changes.  The one thing it
    loses is ``da.from_array``'s shortcut for dask-backed xarray objects.
    """
    import sys

    if "dask.array" in sys.modules:
        return
    hidden = [name for name in UNUSED_BY_DASK_ARRAY if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        importlib.import_module("dask.array")
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


def require(name: str, extra: str) -> ModuleType:
    """Import ``name`` or raise an error that says which extra installs it."""
    module = optional_import(name)
    if module is None:
        raise BackendUnavailableError(
            f"{name} is not importable here; install it with "
            f"`pip install 'mgpu-dask[{extra}]'` on a machine with an NVIDIA GPU"
        )
    return module


def is_installed(name: str) -> bool:
    """True when a top-level package can be found, without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _visible_filter(gpus: list[GPU]) -> list[GPU]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return gpus
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    keep = []
    for token in wanted:
        if token.isdigit() and int(token) < len(gpus):
            keep.append(gpus[int(token)])
    return keep


def _gpus_from_nvml() -> list[GPU] | None:
    pynvml = optional_import("pynvml")
    if pynvml is None:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            memory = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
            gpus.append(GPU(i, name, memory))
        return gpus
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _gpus_from_nvidia_smi() -> list[GPU]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit():
            gpus.append(GPU(int(parts[0]), parts[1], int(float(parts[2])) * 2**20))
    return gpus


@functools.lru_cache(maxsize=1)
def visible_gpus() -> tuple[GPU, ...]:
    """The GPUs this process may use, honouring ``CUDA_VISIBLE_DEVICES``."""
    if os.environ.get("MGPU_DASK_FORCE_CPU"):
        return ()
    gpus = _gpus_from_nvml()
    if gpus is None:
        gpus = _gpus_from_nvidia_smi()
    return tuple(_visible_filter(gpus))


def gpu_count() -> int:
    return len(visible_gpus())


def has_gpu() -> bool:
    """True when an NVIDIA GPU is visible and CuPy plus a CUDA Numba can be found."""
    return gpu_count() > 0 and is_installed("cupy")


def nvlink_topology() -> str | None:
    """``nvidia-smi topo -m`` as text, or ``None`` where it cannot be read."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        return subprocess.run(
            [exe, "topo", "-m"], capture_output=True, text=True, timeout=20, check=True
        ).stdout.rstrip()
    except (OSError, subprocess.SubprocessError):
        return None


def scheduler_workers(client: Any) -> dict[str, dict]:
    """The scheduler's entry for every worker, asked for now (address -> info).

    Not ``client.scheduler_info()["workers"]``: distributed (2025.x and later)
    caches that answer, and the client's periodic refresh (cluster totals, no
    workers) can replace the cache between the fetch and the return, so the
    worker list comes back empty at random (it failed a CI run).
    """
    try:
        info = client.sync(client.scheduler.identity, n_workers=-1)
    except TypeError:  # distributed before n_workers: every worker, always
        info = client.sync(client.scheduler.identity)
    return dict(info["workers"])
