"""What this machine has: optional packages and GPUs, found without a CUDA context.

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
import threading
from types import ModuleType
from typing import NamedTuple


class GPU(NamedTuple):
    index: int
    name: str
    memory_bytes: int


IMPORT_ERRORS: dict[str, str] = {}
"""Optional packages that are installed but failed to import here: name -> the error."""


def optional_import(name: str) -> ModuleType | None:
    """Import ``name``; ``None`` where it is not installed, or where it is installed but
    does not import, in which case :func:`import_error` keeps the error's own text."""
    if not is_installed(name):
        return None
    try:
        return importlib.import_module(name)
    except Exception as exc:  # a broken stack: the caller falls back, and can say why
        IMPORT_ERRORS[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return None


def import_error(name: str) -> str | None:
    """Why the installed package ``name`` did not import here (None: it did, or was not
    tried, or is not installed)."""
    return IMPORT_ERRORS.get(name)


def unusable(name: str, extra: str, title: str | None = None) -> str | None:
    """Why the optional package ``name`` cannot be used here, in one line (it is imported
    to find out), or None when it can; ``extra`` is the pip extra that installs it,
    ``title`` how the line names it (default ``name``)."""
    if optional_import(name) is not None:
        return None
    error = import_error(name)
    if error:
        return f"{title or name} is installed but does not import ({error})"
    return f"{title or name} is not installed (pip install 'mgpu-dask[{extra}]')"


UNUSED_BY_DASK_ARRAY = ("xarray", "cupyx.scipy.sparse", "scipy.fftpack")
"""Optional libraries that ``dask.array`` imports when installed and our processes never
use: dask.array.core imports xarray (and with it pandas) only for ``da.from_array`` of a
dask-backed ``DataArray``; dask.array.chunk_types imports CuPy's sparse matrices (and
with them SciPy's) only to accept them as chunks; dask.array.fft imports SciPy's legacy
``fftpack`` only to warn about its functions.  Each costs a worker fork server up to a
few tenths of a second, and xarray and fftpack the client too (which imports SciPy's
sparse matrices for scikit-learn all the same)."""


UNUSED_BY_SCIKIT_LEARN = ("pandas",)
"""``sklearn.utils.fixes`` imports pandas (and with it pyarrow, where installed) when it
can, for no estimator of ours: a few tenths of a second of a run's client."""

DEFERRED_BY_SCIKIT_LEARN = ("scipy.stats",)
"""Modules ``sklearn.base`` imports and no code of its import runs: ``sklearn.utils.fixes``
imports ``scipy.stats`` (its distributions: most of the import of ``sklearn.base``) for
functions that call it later.  The CLI's process loads it on its first use instead."""


def import_dask_array() -> None:
    """Import ``dask.array`` without the libraries of ``UNUSED_BY_DASK_ARRAY``, for the
    processes that are ours alone: the CLI's and the worker fork server's.

    They count as absent only during this import (so a later ``import xarray`` works
    as usual); where one is imported already, nothing changes.  The one thing it
    loses is ``da.from_array``'s shortcut for dask-backed xarray objects.
    """
    _import_without("dask.array", UNUSED_BY_DASK_ARRAY)


def import_scikit_learn() -> None:
    """Import ``sklearn.base`` without pandas (``UNUSED_BY_SCIKIT_LEARN``), for the CLI's
    process: as :func:`import_dask_array`, pandas counts as absent only during this
    import and a later ``import pandas`` works as usual.  The modules of
    ``DEFERRED_BY_SCIKIT_LEARN`` load on their first use (:func:`import_on_first_use`)."""
    import sys

    if "sklearn.base" not in sys.modules:
        for name in DEFERRED_BY_SCIKIT_LEARN:
            import_on_first_use(name)
    _import_without("sklearn.base", UNUSED_BY_SCIKIT_LEARN)


def import_on_first_use(name: str) -> None:
    """Make ``import name`` cheap: the module runs on the first use of an attribute of
    its own, here or anywhere else in this process.  Nothing changes where it is
    imported already or cannot be found.

    Not :class:`importlib.util.LazyLoader`: the import system reads ``__spec__`` of
    a module it finds in ``sys.modules``, and that read runs a lazy-loaded module.
    """
    import sys

    if name in sys.modules:
        return
    parent, _, child = name.rpartition(".")
    try:
        spec = importlib.util.find_spec(name)  # imports the parent package
    except (ImportError, ValueError):
        return
    if spec is None or spec.loader is None or name in sys.modules:
        return
    module = importlib.util.module_from_spec(spec)  # __spec__, __path__, ... set
    module.__class__ = _OnFirstUse
    sys.modules[name] = module
    if parent:
        setattr(sys.modules[parent], child, module)


class _OnFirstUse(ModuleType):
    """A module whose code runs when an attribute it does not have yet is asked for."""

    _lock = threading.RLock()

    def __getattr__(self, attr: str):
        with _OnFirstUse._lock:
            if type(self) is _OnFirstUse:
                self.__class__ = ModuleType  # from now on, a module like any other
                try:
                    self.__spec__.loader.exec_module(self)
                except BaseException:  # as a failed import: gone, so that the next one retries
                    import sys

                    sys.modules.pop(self.__name__, None)
                    raise
        return getattr(self, attr)


def _import_without(module: str, unused: tuple[str, ...]) -> None:
    import sys

    if module in sys.modules:
        return
    hidden = [name for name in unused if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        importlib.import_module(module)
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


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
