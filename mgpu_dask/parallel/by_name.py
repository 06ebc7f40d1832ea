"""Functions that run on the workers, named by the client without importing them.

A task's function is pickled by reference: the client must import its module
to hand it to Dask, and every process that unpickles the task imports it: the
worker that runs it, and the scheduler, which unpickles every graph it is
sent (in the client's own process for a local cluster, on its event loop).
The worker side of a fit (the device L-BFGS and its CUDA kernels, Numba) is
most of a second to import, and neither the client nor the scheduler runs it.

:class:`WorkerFunction` names such a function by module and attribute.  It
unpickles as the function itself in a process that runs a Dask worker, the
module imported then (where pickling by reference imports it: as the task
arrives, before it runs); elsewhere (the scheduler) as the name again, which
imports nothing.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any


def resolve(module: str, name: str) -> Any:
    """``module.name``, importing ``module`` where needed."""
    return getattr(importlib.import_module(module), name)


def _runs_a_worker() -> bool:
    """Whether a Dask worker runs in this process (a worker process, or a cluster of
    threads in this one)."""
    worker = sys.modules.get("distributed.worker")
    return worker is not None and bool(getattr(worker.Worker, "_instances", ()))


def unpickled(module: str, name: str) -> Any:
    """What a :class:`WorkerFunction` unpickles as: the function where the module is
    loaded or a worker runs here, else the name (a scheduler passing the task on)."""
    if module in sys.modules or _runs_a_worker():
        return resolve(module, name)
    return WorkerFunction(f"{module}.{name}")


class WorkerFunction:
    """A function of a module only the workers import, named by ``"package.module.name"``.

    Pass it to ``client.submit`` or ``client.run`` in place of the function:
    it is unpickled as the function itself.  Called here (a cluster of threads
    in this process), it imports the module and calls the function.
    """

    __slots__ = ("module", "name")

    def __init__(self, qualified: str) -> None:
        module, _, name = qualified.rpartition(".")
        if not module or not name:
            raise ValueError(f"{qualified!r} is not 'package.module.function'")
        self.module, self.name = module, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return resolve(self.module, self.name)(*args, **kwargs)

    def __reduce__(self) -> tuple:
        return unpickled, (self.module, self.name)

    def __repr__(self) -> str:
        return f"WorkerFunction({self.module}.{self.name})"

    @property
    def __name__(self) -> str:  # Dask names tasks and reports after their function
        return self.name
