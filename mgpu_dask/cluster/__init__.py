"""The one way to get a Dask client: a local CUDA or CPU cluster, a running scheduler,
or batch jobs through dask-jobqueue, and how local workers start.

:func:`connect` is the entry; :func:`plan_cluster` says what it would start
without starting anything.  The names load on first use, so that the CLI can
start the worker fork server (:mod:`.worker_start`) before it imports
``distributed``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .connection import connect, exposure_warning
    from .plan import ClusterKind, ClusterPlan, RunningCluster, plan_cluster
    from .starting import StartingCluster
    from .worker_plugins import IgnoreInterrupt

_WHERE = {"IgnoreInterrupt": "worker_plugins", "connect": "connection",
          "exposure_warning": "connection", "ClusterKind": "plan", "ClusterPlan": "plan", "RunningCluster": "plan",
          "plan_cluster": "plan", "StartingCluster": "starting"}
__all__ = ["ClusterKind", "ClusterPlan", "IgnoreInterrupt", "RunningCluster",
           "StartingCluster", "connect", "exposure_warning", "plan_cluster"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
