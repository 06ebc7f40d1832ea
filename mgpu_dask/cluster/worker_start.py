"""How local worker processes start: forked from a server that has their libraries loaded.

Dask's Nanny spawns each worker as a fresh interpreter, which then imports
everything a worker needs (:mod:`.worker_imports`: seconds per worker, on
the critical path of a cold run).  Python's ``forkserver`` start method instead forks
each worker from one server process that imported those modules once.  The
CLI starts the server first thing, so its imports overlap the client's own;
:func:`~.connection.connect` starts it (if not yet
running) for local clusters in the Python API.

The server never initialises CUDA, and each forked worker creates its own
context after dask-cuda has set its ``CUDA_VISIBLE_DEVICES``, exactly as a
spawned one.  Dask's pre-spawn environment (``OMP_NUM_THREADS=1`` and the
others of ``distributed.nanny.pre-spawn-environ``) is the server's
environment, so forked workers get it too.

``mgpu-dask.cluster.worker-start`` chooses: ``auto`` (the fork server for
local GPU clusters, Dask's ``spawn`` for CPU ones), ``forkserver`` or
``spawn`` for both.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from typing import Iterator

from .. import config
from ..exceptions import ClusterError

METHODS = ("auto", "forkserver", "spawn")
SERVER_MODULE = "mgpu_dask.cluster.worker_imports"


def method(device: str) -> str:
    """``"forkserver"`` or ``"spawn"``: how this process starts local workers on ``device``."""
    chosen = str(config.get("cluster.worker-start") or "auto")
    if chosen not in METHODS:
        raise ClusterError(f"mgpu-dask.cluster.worker-start is {chosen!r}; use one of "
                           f"{', '.join(METHODS)}")
    if chosen == "auto":
        chosen = "forkserver" if device == "gpu" else "spawn"
    if chosen == "forkserver" and not hasattr(os, "fork"):
        chosen = "spawn"  # Windows has no fork
    return chosen


def _distributed_defaults() -> dict:
    """``distributed.yaml``'s ``distributed`` section, read without importing distributed
    (the CLI starts the server before that import, which is most of a second)."""
    import importlib.util
    from pathlib import Path

    import yaml

    spec = importlib.util.find_spec("distributed")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(list(spec.submodule_search_locations)[0]) / "distributed.yaml"
    try:
        return (yaml.safe_load(path.read_text()) or {}).get("distributed", {})
    except (OSError, yaml.YAMLError):
        return {}


def _pre_spawn_environ() -> dict[str, str]:
    """Dask's ``distributed.nanny.pre-spawn-environ``: distributed's defaults (from its
    YAML where distributed is not imported yet) updated by the configured values."""
    import dask

    values = dict(_distributed_defaults().get("nanny", {}).get("pre-spawn-environ") or {})
    values.update(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
    return {str(k): str(v) for k, v in values.items() if v is not None}


def server_pid() -> int | None:
    """The fork server's process id, or None when none runs."""
    from multiprocessing import forkserver

    return getattr(forkserver._forkserver, "_forkserver_pid", None)


def start_server() -> None:
    """Start the fork server now (it imports in the background); idempotent.

    The server is a child of this process and exits with it.
    """
    if server_pid() is not None:
        return
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload([SERVER_MODULE])
    saved = {k: os.environ.get(k) for k in _pre_spawn_environ()}
    os.environ.update(_pre_spawn_environ())
    try:
        forkserver.ensure_running()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def start_early(device: str) -> None:
    """Called by the CLI before its heavy imports, for commands that start a local cluster.

    ``device`` is the ``--device`` option; with ``auto`` the server starts
    only where a local GPU cluster will (a visible GPU and dask-cuda).
    """
    from ..config.environment import gpu_count, is_installed

    if device == "auto":
        device = "gpu" if gpu_count() and is_installed("dask_cuda") else "cpu"
    with contextlib.suppress(ClusterError):  # a bad setting is reported by connect()
        if method(device) == "forkserver":
            start_server()


@contextlib.contextmanager
def starting_workers(device: str) -> Iterator[str]:
    """Dask's worker start method set for the workers started inside this block.

    Yields the method used.  Workers restarted later (after a crash) are
    spawned the usual way.
    """
    how = method(device)
    if how == "spawn":
        yield how
        return
    import dask

    start_server()
    _keep_server_preload()
    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
        yield how


def _keep_server_preload() -> None:
    """Stop Dask from choosing the fork server's preload: ours is already running.

    The first time a nanny asks for a ``forkserver`` context,
    ``distributed.utils.get_mp_context`` imports distributed's required and
    optional packages in *this* process (pandas among them) and names them as the
    server's preload.  A running server never reads its preload again, so that
    import only delays the first worker, on the event loop that starts it; and a
    server restarted after a crash would load Dask's list instead of
    :data:`SERVER_MODULE`.  Dask keeps "already done" in a module flag, which this
    sets (a Dask without the flag is left alone).
    """
    import distributed.utils

    if hasattr(distributed.utils, "_forkserver_preload_set"):
        distributed.utils._forkserver_preload_set = True
