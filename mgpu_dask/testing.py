"""Fault injection for the reliability tests and ``benchmarks/worker_kill.py``."""

from __future__ import annotations

import os
import signal
from typing import Any

import numpy as np

from .kernels import logreg as logreg_kernels

_CALLS = 0


def loss_grad_that_kills(X: Any, labels: Any, coef: np.ndarray, intercept: np.ndarray, *,
                         pids: list[int], victim: str, marker: str, after: int = 8) -> tuple:
    """Our per-shard loss_grad that SIGKILLs one worker, once, mid-fit.

    At its ``after``-th call in a process, the first caller to create the file
    ``marker`` kills ``victim``: ``"other"`` the first of ``pids`` that is not
    itself, ``"self"`` its own process.  Pass it, bound with
    ``functools.partial``, as ``LogisticRegression(loss_grad=...)``.
    """
    global _CALLS
    _CALLS += 1
    if _CALLS >= after:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass
        else:
            os.kill(os.getpid() if victim == "self" else
                    next(p for p in pids if p != os.getpid()), signal.SIGKILL)
    return logreg_kernels.loss_grad(X, labels, coef, intercept)
