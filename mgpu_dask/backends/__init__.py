"""Comparison backends behind one small interface.

Each backend module offers ``knn(run)`` and ``logreg(run)`` taking a
:class:`BackendRun` and returning ``{"fit": s, "predict": s, "accuracy": a}``
for one cold and the warm repetitions.  ``unavailable(name, device)`` says in
one line why a backend cannot run here, or ``None``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .._compat import is_installed

BACKENDS = ("numba", "cupy", "cuml", "sklearn")


class BackendSkipped(Exception):
    """A backend declines this run (e.g. too large for the CPU reference); says why."""


class BackendRun(NamedTuple):
    """What every backend gets: the same split, cluster and options."""

    parts: Any              # data.Split (host arrays)
    client: Any             # distributed.Client or None
    device: str             # "gpu" or "cpu"
    options: dict[str, Any]
    timeout: float


def unavailable(name: str, device: str) -> str | None:
    """Why backend ``name`` cannot run on ``device`` here, or None when it can."""
    if name not in BACKENDS:
        return f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}"
    if name in ("cupy", "cuml") and device != "gpu":
        return f"{name} needs GPU workers (this run is on CPU)"
    if name == "cupy" and not is_installed("cupy"):
        return "CuPy is not installed (pip install 'mgpu-dask[cuda13]')"
    if name == "cuml" and not is_installed("cuml"):
        return "cuML is not installed (pip install 'mgpu-dask[rapids13]')"
    return None


def module(name: str) -> Any:
    """The module implementing backend ``name``."""
    import importlib

    return importlib.import_module(f".{name}_backend", __name__)
