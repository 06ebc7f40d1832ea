"""Unconstrained L-BFGS: two-loop recursion with a strong-Wolfe line search.

Why not SciPy's L-BFGS-B: its bound-constrained machinery costs milliseconds
per iteration at 7,850 unknowns (measured: 3.6 ms per ``setulb`` call on a
small CPU, about as much as one whole multi-GPU evaluation), and our problem
has no bounds.  The two-loop recursion is O(m n): tens of microseconds.  The
line search is SciPy's public ``line_search`` (strong Wolfe conditions).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
from scipy.linalg.blas import daxpy, ddot
from scipy.optimize import line_search

Objective = Callable[[np.ndarray], "tuple[float, np.ndarray]"]


class _Evaluations:
    """``fun(x) -> (value, gradient)`` evaluated once per distinct point."""

    def __init__(self, fun: Objective) -> None:
        self.fun = fun
        self.calls = 0
        self.x: np.ndarray | None = None
        self.value = 0.0
        self.grad = np.empty(0)

    def __call__(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        if self.x is None or not np.array_equal(x, self.x):
            self.value, self.grad = self.fun(x)
            self.x = x.copy()
            self.calls += 1
        return self.value, self.grad


def minimize_lbfgs(fun: Objective, x0: np.ndarray, *, maxiter: int = 100, gtol: float = 1e-4,
                   ftol: float = 64 * np.finfo(float).eps, memory: int = 10,
                   maxls: int = 50) -> dict[str, Any]:
    """Minimise ``fun`` (returning value and gradient) from ``x0``.

    Stops when the largest gradient entry is at most ``gtol``, when the
    relative decrease of the value is at most ``ftol``, or after ``maxiter``
    iterations (then ``success`` is False).

    Returns
    -------
    dict
        ``x``, ``fun``, ``nit`` (iterations), ``nfev`` (evaluations),
        ``success``, ``message`` (why it stopped) and ``grad_max`` (the
        largest gradient entry, in absolute value, where it stopped).
    """
    evaluate = _Evaluations(fun)
    x = np.asarray(x0, dtype=np.float64).copy()
    f, g = evaluate(x)
    f_prev = f + np.linalg.norm(g) / 2  # first trial step of about unit length, as SciPy's BFGS
    pairs: list[tuple[np.ndarray, np.ndarray, float]] = []
    message, success, nit = "maximum number of iterations reached", False, 0
    while nit < maxiter:
        if np.max(np.abs(g)) <= gtol:
            message, success = "gradient below gtol", True
            break
        p = -_two_loop(g, pairs)
        step = _search(evaluate, x, p, g, f, f_prev, maxls)
        if step is None and pairs:  # a poor direction: forget the curvature pairs, go downhill
            pairs.clear()
            p = -g
            step = _search(evaluate, x, p, g, f, f_prev, maxls)
        if step is None:
            message = "line search found no acceptable step"
            break
        x_new = x + step * p
        f_new, g_new = evaluate(x_new)
        s, y = x_new - x, g_new - g
        sy = float(s @ y)
        if sy > 1e-10 * float(y @ y):
            pairs.append((s, y, 1.0 / sy))
            if len(pairs) > memory:
                pairs.pop(0)
        nit += 1
        decrease = (f - f_new) / max(abs(f), abs(f_new), 1.0)
        x, f_prev, f, g = x_new, f, f_new, g_new
        if decrease <= ftol:
            message, success = "relative decrease below ftol", True
            break
    else:
        success = bool(np.max(np.abs(g)) <= gtol)
    return {"x": x, "fun": float(f), "nit": nit, "nfev": evaluate.calls, "success": success,
            "message": message, "grad_max": float(np.max(np.abs(g)))}


def _two_loop(g: np.ndarray, pairs: list[tuple[np.ndarray, np.ndarray, float]]) -> np.ndarray:
    """The L-BFGS inverse-Hessian approximation applied to ``g``.

    BLAS ``ddot``/``daxpy`` in place: no temporary vector per step (half the
    time of the NumPy expressions at 7,850 unknowns).
    """
    q = np.array(g, dtype=np.float64)
    alphas = []
    for s, y, rho in reversed(pairs):
        a = rho * ddot(s, q)
        daxpy(y, q, a=-a)
        alphas.append(a)
    if pairs:
        s, y, _ = pairs[-1]
        q *= ddot(s, y) / ddot(y, y)
    for (s, y, rho), a in zip(pairs, reversed(alphas)):
        daxpy(s, q, a=a - rho * ddot(y, q))
    return q


def _search(evaluate: _Evaluations, x: np.ndarray, p: np.ndarray, g: np.ndarray, f: float,
            f_prev: float, maxls: int) -> float | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the line search did not converge": we handle None
        step = line_search(lambda z: evaluate(z)[0], lambda z: evaluate(z)[1], x, p, gfk=g,
                           old_fval=f, old_old_fval=f_prev, c1=1e-4, c2=0.9, maxiter=maxls)[0]
    return None if step is None or not np.isfinite(step) or step <= 0 else float(step)
