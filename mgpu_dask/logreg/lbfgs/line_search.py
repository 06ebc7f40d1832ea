"""Strong-Wolfe line search on scalars: the host side of both L-BFGS loops.

The search sees the objective along the search direction only through
``phi(alpha) -> (value, slope)``: one evaluation gives both, so the zoom
interpolates with a cubic through two points and their slopes (Nocedal and
Wright, *Numerical Optimization*, algorithms 3.5 and 3.6, equation 3.59).
For the device-resident L-BFGS that means a search reads two numbers back per
trial step, never a vector.  The step it accepts is always the last one it
evaluated, so a caller can commit the point it has just computed.
"""

from __future__ import annotations

import math
from typing import Callable

from ...kernels.lbfgs.rules import C1, C2, FLOAT32_ROUNDING, acceptable, first_step

__all__ = ["C1", "C2", "FLOAT32_ROUNDING", "acceptable", "first_step", "strong_wolfe"]

Slope = Callable[[float], "tuple[float, float]"]

ZOOM_MAX = 10  # trials of one zoom (SciPy's bound too)


def strong_wolfe(phi: Slope, f0: float, slope0: float, step: float, *,
                 first: tuple[float, float] | None = None, maxiter: int = 50,
                 rounding: float = FLOAT32_ROUNDING) -> float | None:
    """A step satisfying the strong Wolfe conditions, or None.

    Parameters
    ----------
    phi : callable
        ``phi(step) -> (value, slope)`` of the objective along the direction.
    f0, slope0 : float
        Value and slope at step 0 (``slope0 < 0``: a descent direction).
    step : float
        First trial step.
    first : (value, slope) or None
        ``phi(step)`` when the caller has it already.
    maxiter : int
        Evaluations at most.
    rounding : float
        The relative rounding of ``phi``'s values (:func:`.rules.acceptable`).

    Returns
    -------
    float or None
        The accepted step, always the last one ``phi`` was called with (or
        ``step`` when ``first`` already satisfied the conditions).
    """
    if not slope0 < 0:
        return None
    prev, f_prev, s_prev = 0.0, f0, slope0
    value, slope = first if first is not None else phi(step)
    calls = 0 if first is not None else 1
    for i in range(maxiter):
        if step <= 0 or not math.isfinite(step):
            return None
        if acceptable(value, slope, step, f0, slope0, rounding):
            return step
        if not value <= f0 + C1 * step * slope0 or (i > 0 and value >= f_prev):
            return _zoom(phi, f0, slope0, (prev, f_prev, s_prev), (step, value, slope),
                         maxiter - calls, rounding)
        if slope >= 0:
            return _zoom(phi, f0, slope0, (step, value, slope), (prev, f_prev, s_prev),
                         maxiter - calls, rounding)
        prev, f_prev, s_prev = step, value, slope
        step *= 2.0
        if calls >= maxiter:
            return None
        value, slope = phi(step)
        calls += 1
    return None


def _zoom(phi: Slope, f0: float, slope0: float, lo: tuple[float, float, float],
          hi: tuple[float, float, float], budget: int, rounding: float) -> float | None:
    """Shrink the bracket ``[lo, hi]`` (``lo``: the better end) to an acceptable step.

    At most ``ZOOM_MAX`` trials, and none once the bracket is down to rounding
    (float32 evaluations near the optimum can make both conditions
    unattainable; then the caller's fallbacks take over quickly).
    """
    for _ in range(max(0, min(budget, ZOOM_MAX))):
        a_lo, a_hi = lo[0], hi[0]
        width = a_hi - a_lo
        if not abs(width) > 1e-12 * max(abs(a_lo), abs(a_hi)) or not math.isfinite(width):
            return None
        trial = _cubic_min(lo, hi)
        low, high = min(a_lo, a_hi), max(a_lo, a_hi)
        margin = 0.1 * abs(width)
        if trial is None or not (low + margin <= trial <= high - margin):
            trial = a_lo + 0.5 * width  # safeguard: bisect
        value, slope = phi(trial)
        if acceptable(value, slope, trial, f0, slope0, rounding):
            return trial
        if not value <= f0 + C1 * trial * slope0 or value >= lo[1]:
            hi = (trial, value, slope)
            continue
        if slope * width >= 0:
            hi = lo
        lo = (trial, value, slope)
    return None


def _cubic_min(a: tuple[float, float, float], b: tuple[float, float, float]) -> float | None:
    """Minimiser of the cubic through two points with their slopes (None when it has none)."""
    (x0, f0, g0), (x1, f1, g1) = a, b
    if not all(math.isfinite(v) for v in (f0, g0, f1, g1)) or x0 == x1:
        return None
    d1 = g0 + g1 - 3.0 * (f0 - f1) / (x0 - x1)
    disc = d1 * d1 - g0 * g1
    if disc < 0:
        return None
    d2 = math.copysign(math.sqrt(disc), x1 - x0)
    denom = g1 - g0 + 2.0 * d2
    if denom == 0:
        return None
    return x1 - (x1 - x0) * (g1 + d2 - d1) / denom
