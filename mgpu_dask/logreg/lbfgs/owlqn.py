"""OWL-QN: L-BFGS for a smooth objective plus an L1 penalty (Andrew and Gao, 2007).

``F(x) = f(x) + sum_j l1[j] |x_j|`` with ``f`` smooth: the L1 and elastic-net logistic
regression (``l1_ratio > 0``; the intercept has no L1 weight).  The L-BFGS loop
(:func:`.loop.run`) runs it on either backend, host or device, with four changes
that this module and :mod:`mgpu_dask.kernels.lbfgs.rules` hold:

* the *pseudo-gradient* of ``F`` stands in for the gradient (the gradient of ``f``
  plus ``l1 sign(x)``, or at ``x_j = 0`` the one-sided derivative that decreases
  ``F``, zero where neither does) in the two-loop recursion, the slope and the
  stopping rule; the curvature pairs stay those of ``f``'s gradient;
* of the direction only the entries that agree in sign with the steepest descent
  are kept;
* each trial point is projected on the orthant of the current point (entries
  that would change sign are set to zero), so the L1 solution's zeros are exact;
* the first trial step is 1 once there are curvature pairs, and a step is kept on
  sufficient decrease alone (Armijo, against the step actually
  taken), and the host's search backtracks (:func:`backtracking`);
* the relative decrease that the stopping rule reads is the best of the last
  ``STALLED`` steps': a backtracked step alone may gain little.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ...kernels.lbfgs.rules import STALLED, first_owlqn_step, sufficient_decrease

__all__ = ["STALLED", "first_owlqn_step", "sufficient_decrease", "pseudo_gradient", "agreeing",
           "projected", "backtracking"]

SHRINK = 0.5  # the backtracking's factor


def pseudo_gradient(x: np.ndarray, g: np.ndarray, l1: np.ndarray) -> np.ndarray:
    """The steepest-descent direction's negative for ``f + l1 |x|`` at ``x``
    (``rules.pseudo_entry`` over whole vectors)."""
    out = g + l1 * np.sign(x)
    zero = x == 0
    right, left = g + l1, g - l1  # one-sided derivatives at 0
    out[zero] = np.where(left[zero] > 0, left[zero], np.where(right[zero] < 0, right[zero], 0.0))
    return out


def agreeing(p: np.ndarray, pg: np.ndarray, penalised: np.ndarray) -> np.ndarray:
    """Direction ``p`` with the penalised entries that do not point against the
    pseudo-gradient ``pg`` set to zero."""
    p[penalised & (p * pg >= 0)] = 0.0
    return p


def projected(x: np.ndarray, p: np.ndarray, pg: np.ndarray, step: float,
              penalised: np.ndarray) -> np.ndarray:
    """``x + step p`` on the orthant of ``x`` (``rules.moved_entry`` over whole vectors)."""
    trial = x + step * p
    orthant = np.where(x != 0, np.sign(x), -np.sign(pg))
    trial[penalised & (np.sign(trial) != orthant)] = 0.0
    return trial


def backtracking(probe: Callable[[float], "tuple[float, float]"], f0: float, step: float, *,
                 first: tuple[float, float], maxiter: int = 50) -> float | None:
    """The first of ``step``, ``step / 2``, ... with sufficient decrease, or None.

    ``probe(step) -> (value, change)``: the objective at the projected trial point and
    the pseudo-gradient's product with the step taken; ``first``: ``probe(step)``
    already made.  The step returned is always the last one probed.
    """
    value, change = first
    for _ in range(maxiter):
        if sufficient_decrease(value, change, f0):
            return step
        step *= SHRINK
        if not (step > 0 and math.isfinite(step)):
            return None
        value, change = probe(step)
    return None
