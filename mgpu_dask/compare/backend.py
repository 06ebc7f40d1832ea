"""The interface every comparison backend implements, and what they share."""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from ..config.environment import unusable

BACKENDS = ("numba", "cupy", "cuda-c", "cuml", "cuml-single", "cuvs", "faiss", "sklearn",
            "torch", "torch-script")
NEEDS = {"cupy": [("cupy", "cuda13", "CuPy")], "cuda-c": [("cupy", "cuda13", "CuPy")],
         "cuml": [("cuml", "rapids13", "cuML")], "cuml-single": [("cuml", "rapids13", "cuML")],
         "cuvs": [("cuvs", "rapids13", "cuVS")], "faiss": [("faiss", "faiss-cu13", "FAISS")],
         "torch": [("torch", "torch", "PyTorch")],
         "torch-script": [("torch", "torch", "PyTorch")]}
"""The packages each backend imports, the extra that installs them, and their names."""


class BackendSkipped(Exception):
    """A backend declines this run (e.g. too large for the CPU reference); says why."""


class BackendRun(NamedTuple):
    """What every backend gets: the same split, cluster and options."""

    parts: Any              # data.Split (host arrays; X_train a dask array when generated)
    client: Any             # distributed.Client or None
    device: str             # "gpu" or "cpu"
    options: dict[str, Any]
    timeout: float


def unavailable(name: str, device: str) -> str | None:
    """Why backend ``name`` cannot run on ``device`` here, or None when it can."""
    if name not in BACKENDS:
        return f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}"
    if name in ("cupy", "cuda-c", "cuml", "cuml-single", "cuvs") and device != "gpu":
        return f"{name} needs GPU workers (this run is on CPU)"
    for module, extra, title in NEEDS.get(name, ()):
        why = unusable(module, extra, title)
        if why is not None:
            return why
    return None


MODULES = {"numba": "ours", "cupy": "cupy", "cuda-c": "cuda_c", "cuml": "cuml",
           "cuml-single": "cuml_single", "cuvs": "cuvs", "faiss": "faiss", "sklearn": "sklearn", "torch": "torch",
           "torch-script": "torch_script"}
"""The module of each backend, in this package."""


def module(name: str) -> Any:
    """The module implementing backend ``name``."""
    import importlib

    return importlib.import_module(f".{MODULES[name]}", __package__)


def _block_max(block: Any) -> Any:
    import numpy as np

    return np.array([float(block.max())]) if block.size else np.zeros(1)


def pixel_scale(X: Any) -> float:
    """``1 / max(X)`` (at least 1): pixels to [0, 1], for host or worker-resident rows."""
    import numpy as np

    from ..parallel import placement
    from ..parallel.inputs import active_client, to_host

    if isinstance(X, np.ndarray):
        return 1.0 / max(1.0, float(X.max()))
    tops = placement.map_blocks(active_client(), _block_max, X, name=placement.fresh_name("max"),
                                chunks=((1,) * X.numblocks[0],), meta=np.empty(0))
    return 1.0 / max(1.0, float(to_host(tops).max()))


def train_labels(run: BackendRun, X: Any, dtype: Any) -> Any:
    """The training labels on the workers, each block with its rows of ``X``."""
    from ..data import shard

    return shard(run.parts.y_train, run.client, dtype=dtype, timeout=run.timeout, like=X)


def converted_note(run: BackendRun, dtype: str = "float32") -> str | None:
    """What a backend that computes in ``dtype`` says when ``--dtype`` asked for another."""
    asked = run.options.get("dtype")
    return f"rows converted to {dtype} (--dtype {asked})" if asked and asked != dtype else None


def join_notes(*notes: str | None) -> str | None:
    return "; ".join(n for n in notes if n) or None


DASK = "from the client, through Dask, rows resident on the workers"
ONE_WORKER = "inside one worker, rows resident on its device"
HOST = "on the client's CPU cores, rows in its memory"
"""What a row times: its fit and predict on rows already where they compute (the rows'
placement from the client is timed apart, as ``placement``)."""


class Placing:
    """Times the placement of a backend's training and test rows from the client, once:
    ``with placing: ...`` (any number of blocks, added up in ``seconds``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._began = 0.0

    def __enter__(self) -> "Placing":
        self._began = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds += time.perf_counter() - self._began


def repeat(run: BackendRun, fit: Any, predict: Any) -> dict[str, Any]:
    """One cold and ``repeats`` warm (fit, predict) timings with the accuracy of each, and
    the last repetition's host predictions (``predictions``: compared, never written)."""
    import numpy as np

    rows = []
    for _ in range(1 + max(1, int(run.options.get("repeats", 1)))):
        started = time.perf_counter()
        model = fit()
        fitted = time.perf_counter()
        pred = predict(model)
        done = time.perf_counter()
        rows.append({"fit": fitted - started, "predict": done - fitted,
                     "accuracy": float((pred == run.parts.y_test).mean())})
    return {"cold": rows[0], "warm": rows[1:], "predictions": np.asarray(pred)}
