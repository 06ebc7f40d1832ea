"""OWL-QN: L-BFGS for a smooth objective plus an L1 penalty (Andrew and Gao, 2007).

``F(x) = f(x) + sum_j l1[j] |x_j|`` with ``f`` smooth: the L1 and elastic-net logistic
regression (``l1_ratio > 0``; the intercept has no L1 weight).  Each iteration takes the
*pseudo-gradient* of ``F`` (the gradient of ``f`` plus ``l1 sign(x)``, or at ``x_j = 0`` the
one-sided derivative that decreases ``F``, zero where neither does), the L-BFGS direction
from it with the curvature pairs of ``f``'s gradient, keeps of that direction only the
entries that agree in sign with the steepest descent, and searches along it by
backtracking, each trial point projected on the orthant of the current point (entries
that would change sign are set to zero).  Entries leave zero only where the
pseudo-gradient pushes them out, so the L1 solution's zeros are exact zeros.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .loop import _two_loop

Objective = Callable[[np.ndarray], "tuple[float, np.ndarray]"]
ARMIJO = 1e-4
SHRINK = 0.5
STALLED = 3  # iterations in a row that decrease the objective by less than ftol


def pseudo_gradient(x: np.ndarray, g: np.ndarray, l1: np.ndarray) -> np.ndarray:
    """The steepest-descent direction's negative for ``f + l1 |x|`` at ``x``."""
    out = g + l1 * np.sign(x)
    zero = x == 0
    right, left = g + l1, g - l1  # one-sided derivatives at 0
    out[zero] = np.where(left[zero] > 0, left[zero], np.where(right[zero] < 0, right[zero], 0.0))
    return out


def minimize_owlqn(fun: Objective, x0: np.ndarray, l1: np.ndarray, *, maxiter: int = 100,
                   gtol: float = 1e-4, ftol: float = 64 * np.finfo(float).eps,
                   memory: int = 10, maxls: int = 60) -> dict[str, Any]:
    """Minimise ``fun(x)[0] + sum(l1 * |x|)`` from ``x0`` (``fun`` returns the smooth part's
    value and gradient).

    Stops where the largest pseudo-gradient entry is below ``gtol``, where the objective
    decreased by less than ``ftol`` relative, or after ``maxiter`` iterations.  Returns
    what :func:`.loop.run` returns (``x``, ``fun`` of the whole objective, ``nit``,
    ``nfev``, ``success``, ``message``, ``grad_max``, ``searches``).
    """
    x = np.array(x0, dtype=np.float64)
    penalised = l1 > 0  # the others (the intercept) move freely, as in L-BFGS
    f, g = fun(x)
    F = f + float(np.abs(x) @ l1)
    nfev, pairs, searches, stalled = 1, [], 0, 0
    message, success = "maximum number of iterations reached", False
    nit = 0
    for nit in range(1, maxiter + 1):
        pg = pseudo_gradient(x, g, l1)
        gmax = float(np.abs(pg).max()) if pg.size else 0.0
        if gmax < gtol:
            message, success, nit = "gradient below gtol", True, nit - 1
            break
        d = -_two_loop(pg, pairs)
        d[penalised & (d * pg >= 0)] = 0.0  # keep what agrees with steepest descent
        if not d.any():
            d = -pg
        orthant = np.where(x != 0, np.sign(x), -np.sign(pg))
        step = 1.0 if pairs else min(1.0, 1.0 / max(gmax, 1e-300))
        for _ in range(maxls):
            trial = x + step * d
            trial[penalised & (np.sign(trial) != orthant)] = 0.0  # the orthant of x
            f_new, g_new = fun(trial)
            nfev += 1
            F_new = f_new + float(np.abs(trial) @ l1)
            if F_new <= F + ARMIJO * float(pg @ (trial - x)):
                break
            step *= SHRINK
            searches += 1
        else:
            message, success = "no step decreases the objective", True
            break
        s, y = trial - x, g_new - g
        sy = float(s @ y)
        if sy > 1e-12 * float(y @ y):
            pairs.append((s, y, 1.0 / sy))
            if len(pairs) > memory:
                pairs.pop(0)
        decrease = (F - F_new) / max(abs(F), abs(F_new), 1.0)
        x, f, g, F = trial, f_new, g_new, F_new
        stalled = stalled + 1 if decrease <= ftol else 0
        if stalled >= STALLED:  # a backtracked step alone may gain little: a few in a row
            message, success = "objective stopped decreasing", True
            break
    pg = pseudo_gradient(x, g, l1)
    return {"x": x, "fun": F, "nit": nit, "nfev": nfev, "success": success,
            "message": message, "grad_max": float(np.abs(pg).max()) if pg.size else 0.0,
            "searches": searches}
