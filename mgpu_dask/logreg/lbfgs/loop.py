"""Unconstrained L-BFGS: one loop, two places for its vectors.

The loop (:func:`run`) decides; a *backend* holds the point, the gradient and
the curvature pairs and does the vector work:

* :class:`HostBackend` -- NumPy vectors, any ``fun(x) -> (value, gradient)``
  (:func:`minimize_lbfgs`).
* :class:`.device.DeviceBackend` -- every vector on a GPU; the host reads a
  few scalars per iteration.

One iteration: the two-loop recursion gives the direction, the backend tries
the first step (:func:`line_search.first_step`) and keeps it when both strong
Wolfe conditions hold -- almost every iteration, one evaluation and no
decision on the host, so a backend may run several iterations ahead before
the host looks (``advance``).  Otherwise the host runs the scalar line search
(:mod:`line_search`), which asks the backend for value and slope at each
trial step, then commits the last one.  A direction along which no step is
found drops the curvature pairs and goes downhill instead.  Near the optimum,
where the values can no longer show the decrease a step promises (their rounding is
the backend's ``rounding``: float32's, or float64's for exact int8 sums), a step is
kept on its curvature alone (:func:`line_search.acceptable`); a value that then
rises within rounding ends the fit by ``ftol`` one evaluation later, not after
two failed searches of ten trials each.

Why not SciPy's L-BFGS-B: its bound-constrained machinery is host work on
every iteration (what it cost: docs/performance-history.md), and our problem
has no bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np

from . import line_search, owlqn

Objective = Callable[[np.ndarray], "tuple[float, np.ndarray]"]

ACCEPTED, SEARCH, NOT_DESCENT = 0, 1, 2  # what a proposal did


@dataclass
class Step:
    """What the host reads back after a proposal or a commit (scalars only)."""

    status: int          # ACCEPTED, SEARCH or NOT_DESCENT
    f: float             # value at the current point (after the commit, if any)
    gmax: float          # largest gradient entry there, in absolute value
    decrease: float      # relative decrease of the value by the last commit
    slope0: float = 0.0  # slope along the direction at the current point
    step: float = 0.0    # the trial step
    value: float = 0.0   # value at the trial step
    slope: float = 0.0   # slope at the trial step


class Backend(Protocol):
    evaluations: int
    pairs: int
    run_ahead: int                            # iterations one ``advance`` may make
    owlqn: bool                               # an L1 part (:mod:`.owlqn`)
    rounding: float                           # its values' relative rounding (rules)

    def start(self) -> Step: ...              # evaluate at the start point
    # Up to ``ahead`` proposals while they are kept and no stopping rule holds:
    # (the last kept step, or the first one not kept; steps kept).  ``more``: how many
    # the next call may make besides (a backend may queue some of them already).
    def advance(self, ahead: int, gtol: float, ftol: float,
                more: int = 0) -> tuple[Step, int]: ...
    def probe(self, step: float) -> tuple[float, float]: ...  # value and slope at a step
    def commit(self) -> Step: ...             # move to the last probed step
    def forget(self) -> None: ...             # drop the curvature pairs
    def solution(self) -> np.ndarray: ...     # the current point, on the host


def run(backend: Backend, *, maxiter: int = 100, gtol: float = 1e-4,
        ftol: float = 64 * np.finfo(float).eps, maxls: int = 50) -> dict[str, Any]:
    """The L-BFGS loop over ``backend``.

    Stops when the largest gradient entry is at most ``gtol``, when the
    relative decrease of the value is at most ``ftol``, or after ``maxiter``
    iterations (then ``success`` is False).  The backend may make up to
    ``backend.run_ahead`` iterations per call (:meth:`Backend.advance`): the
    same steps, fewer waits.

    Returns
    -------
    dict
        ``x``, ``fun``, ``nit`` (iterations), ``nfev`` (evaluations),
        ``success``, ``message`` (why it stopped), ``grad_max`` (the largest
        gradient entry, in absolute value, where it stopped) and ``searches``
        (iterations that needed the host's line search).
    """
    state = backend.start()
    message, success, nit, searches = "maximum number of iterations reached", False, 0, 0
    while nit < maxiter:
        if state.gmax <= gtol:
            message, success = "gradient below gtol", True
            break
        ahead = min(max(1, backend.run_ahead), maxiter - nit)
        state, done, searched = _iterate(backend, maxls, ahead, gtol, ftol,
                                         maxiter - nit - ahead)
        nit, searches = nit + done, searches + searched
        if state.status != ACCEPTED and backend.pairs:  # a poor direction: forget, go downhill
            backend.forget()
            state, done, searched = _iterate(backend, maxls, 1, gtol, ftol)
            nit, searches = nit + done, searches + searched
        if state.status != ACCEPTED:
            message = "line search found no acceptable step"
            break
        if state.decrease <= ftol:
            message, success = "relative decrease below ftol", True
            break
    else:
        success = state.gmax <= gtol
    return {"x": backend.solution(), "fun": float(state.f), "nit": nit,
            "nfev": backend.evaluations, "success": bool(success), "message": message,
            "grad_max": float(state.gmax), "searches": searches}


def _iterate(backend: Backend, maxls: int, ahead: int, gtol: float,
             ftol: float, more: int = 0) -> tuple[Step, int, int]:
    """Up to ``ahead`` iterations: (where they ended, iterations made, line searches run);
    ``more``: iterations the loop may make after these.

    The step returned is ACCEPTED when the last iteration moved; otherwise
    no acceptable step was found from the point it describes.
    """
    trial, done = backend.advance(ahead, gtol, ftol, more)
    if trial.status != SEARCH:
        return trial, done, 0
    if backend.owlqn:  # the trial's slope is the pseudo-gradient's product with the step
        step = owlqn.backtracking(backend.probe, trial.f, trial.step,
                                  first=(trial.value, trial.slope), maxiter=maxls)
    else:
        step = line_search.strong_wolfe(backend.probe, trial.f, trial.slope0, trial.step,
                                        first=(trial.value, trial.slope), maxiter=maxls,
                                        rounding=backend.rounding)
    return (trial, done, 1) if step is None else (backend.commit(), done + 1, 1)


def relative_decrease(f_old: float, f_new: float) -> float:
    return (f_old - f_new) / max(abs(f_old), abs(f_new), 1.0)


class HostBackend:
    """L-BFGS vectors in NumPy (float64) for any ``fun(x) -> (value, gradient)``; with
    ``l1`` (one weight per entry) OWL-QN on ``fun(x) + sum(l1 |x|)``; ``rounding``: the
    relative rounding of ``fun``'s values (:func:`.rules.acceptable`), or a function
    that says it once ``fun`` has run (asked once, after the first evaluation)."""

    run_ahead = 1  # nothing to gain: the host decides each step anyway

    def __init__(self, fun: Objective, x0: np.ndarray, memory: int = 10,
                 l1: np.ndarray | None = None,
                 rounding: float | Callable[[], float] = line_search.FLOAT32_ROUNDING) -> None:
        self.fun, self.memory, self._rounding = fun, memory, rounding
        self.x = np.asarray(x0, dtype=np.float64).copy()
        self.owlqn = l1 is not None and bool(np.any(l1))
        self.l1 = np.asarray(l1, dtype=np.float64) if self.owlqn else None
        self.penalised = self.l1 > 0 if self.owlqn else None
        self.history: list[tuple[np.ndarray, np.ndarray, float]] = []
        self.evaluations = 0
        self.f = self.f_prev = 0.0
        self.g = self.pg = self.p = np.empty(0)
        self._trial: tuple[float, np.ndarray, float, np.ndarray] | None = None
        self._decreases: list[float] = []  # OWL-QN: the last few steps' relative decreases

    @property
    def pairs(self) -> int:
        return len(self.history)

    @property
    def rounding(self) -> float:
        if callable(self._rounding):
            self._rounding = float(self._rounding())
        return self._rounding

    def _evaluate(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """The whole objective (with its L1 part) and the smooth part's gradient."""
        self.evaluations += 1
        f, g = self.fun(x)
        if self.owlqn:
            f = float(f) + float(np.abs(x) @ self.l1)
        return float(f), np.asarray(g, dtype=np.float64)

    def _pseudo(self, x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return owlqn.pseudo_gradient(x, g, self.l1) if self.owlqn else g

    def _gmax(self) -> float:
        return float(np.max(np.abs(self.pg))) if self.pg.size else 0.0

    def start(self) -> Step:
        self.f, self.g = self._evaluate(self.x)
        self.pg = self._pseudo(self.x, self.g)
        # First trial step of about unit length, as SciPy's BFGS.
        self.f_prev = self.f + float(np.linalg.norm(self.pg)) / 2
        return Step(ACCEPTED, self.f, self._gmax(), np.inf)

    def propose(self) -> Step:
        self.p = -_two_loop(self.pg, self.history)
        if self.owlqn:
            owlqn.agreeing(self.p, self.pg, self.penalised)
        slope0 = float(self.pg @ self.p)
        if not slope0 < 0:
            return Step(NOT_DESCENT, self.f, self._gmax(), np.inf, slope0)
        step = (owlqn.first_owlqn_step(self.f, self.f_prev, slope0, self.pairs) if self.owlqn
                else line_search.first_step(self.f, self.f_prev, slope0))
        value, slope = self.probe(step)
        if (owlqn.sufficient_decrease(value, slope, self.f) if self.owlqn
                else line_search.acceptable(value, slope, step, self.f, slope0, self.rounding)):
            return self.commit()
        return Step(SEARCH, self.f, self._gmax(), np.inf, slope0, step, value, slope)

    def advance(self, ahead: int, gtol: float, ftol: float,
                more: int = 0) -> tuple[Step, int]:
        done = 0
        while True:
            step = self.propose()
            if step.status != ACCEPTED:
                return step, done
            done += 1
            if done == ahead or step.gmax <= gtol or step.decrease <= ftol:
                return step, done

    def probe(self, step: float) -> tuple[float, float]:
        """Value at the trial step and the slope along the direction (OWL-QN: the
        pseudo-gradient's product with the step taken to the projected point)."""
        if self.owlqn:
            point = owlqn.projected(self.x, self.p, self.pg, step, self.penalised)
        else:
            point = self.x + step * self.p
        value, grad = self._evaluate(point)
        self._trial = (step, point, value, grad)
        if self.owlqn:
            return value, float(self.pg @ (point - self.x))
        return value, float(grad @ self.p)

    def commit(self) -> Step:
        step, point, value, grad = self._trial
        s = point - self.x if self.owlqn else step * self.p
        y = grad - self.g
        sy = float(s @ y)
        if sy > 1e-10 * float(y @ y):
            self.history.append((s, y, 1.0 / sy))
            if len(self.history) > self.memory:
                self.history.pop(0)
        decrease = relative_decrease(self.f, value)
        if self.owlqn:  # a backtracked step alone may gain little: the last few's best
            self._decreases = (self._decreases + [decrease])[-owlqn.STALLED:]
            decrease = max(self._decreases)
        self.x = point if self.owlqn else self.x + s
        self.f_prev, self.f, self.g = self.f, value, grad
        self.pg = self._pseudo(self.x, self.g)
        return Step(ACCEPTED, self.f, self._gmax(), decrease)

    def forget(self) -> None:
        self.history.clear()

    def solution(self) -> np.ndarray:
        return self.x


def minimize_lbfgs(fun: Objective, x0: np.ndarray, *, maxiter: int = 100, gtol: float = 1e-4,
                   ftol: float = 64 * np.finfo(float).eps, memory: int = 10,
                   maxls: int = 50, l1: np.ndarray | None = None,
                   rounding: float | Callable[[], float] = line_search.FLOAT32_ROUNDING
                   ) -> dict[str, Any]:
    """Minimise ``fun`` (returning value and gradient) from ``x0`` on the host; with
    ``l1`` (a weight per entry), ``fun(x)[0] + sum(l1 |x|)`` by OWL-QN.  ``rounding``:
    the relative rounding of ``fun``'s values (float32's unless they are more exact; a
    function: asked once ``fun`` has run).

    See :func:`run` for the stopping rules and what is returned (``fun``: the whole
    objective; ``grad_max``: the pseudo-gradient's largest entry with an L1 part).
    """
    return run(HostBackend(fun, x0, memory, l1, rounding), maxiter=maxiter, gtol=gtol,
               ftol=ftol, maxls=maxls)


def _two_loop(g: np.ndarray, pairs: list[tuple[np.ndarray, np.ndarray, float]]) -> np.ndarray:
    """The L-BFGS inverse-Hessian approximation applied to ``g``.

    BLAS ``ddot``/``daxpy`` in place: no temporary vector per step (half the
    time of the NumPy expressions at 7,850 unknowns).  SciPy's BLAS is imported here, by
    the host loop alone: the device loop's process (a worker) never loads ``scipy.linalg``.
    """
    from scipy.linalg.blas import daxpy, ddot

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
