"""Fault injection for the reliability tests: a worker killed in the middle of a fit."""

from __future__ import annotations

import os
import signal
from typing import Any

import cloudpickle


def kill_during_fit(pids: list[int], victim: str, marker: str, after: int = 8) -> None:
    """Run on every worker (``client.run``): from now on, the ``after``-th evaluation of a
    logistic-regression shard in this process SIGKILLs one worker, once for the whole
    cluster (the first process to create the file ``marker`` does it).

    ``victim``: ``"other"`` kills the first of ``pids`` that is not this process,
    ``"self"`` this process.  Every fit route evaluates its shards through
    :meth:`ShardObjective.launch`, so that is where the count is kept.
    """
    from mgpu_dask.kernels.logreg import objective

    original = objective.ShardObjective.launch
    calls = [0]

    def launch(self: Any, coef: Any, intercept: Any) -> None:
        calls[0] += 1
        if calls[0] >= after:
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass
            else:
                os.kill(os.getpid() if victim == "self" else
                        next(p for p in pids if p != os.getpid()), signal.SIGKILL)
        return original(self, coef, intercept)

    objective.ShardObjective.launch = launch


def by_value() -> None:
    """Ship this module's functions to the workers by value: they cannot import it."""
    import sys

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
