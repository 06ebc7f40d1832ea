"""The step rules of our L-BFGS, shared by the host loop and the device kernels."""

from __future__ import annotations

from ..jitable import both_targets

C1, C2 = 1e-4, 0.9  # sufficient decrease, curvature (the usual quasi-Newton choice)


@both_targets
def first_step(f, f_prev, slope0):
    """The first trial step: the previous decrease repeated (Nocedal and Wright, 3.60), at most 1."""
    if slope0 < 0:
        step = 1.01 * 2.0 * (f - f_prev) / slope0
        if step > 0.0 and step < 1.0:
            return step
    return 1.0


@both_targets
def acceptable(value, slope, step, f0, slope0):
    """Both strong-Wolfe conditions at ``step`` (a NaN value is never acceptable)."""
    return value <= f0 + C1 * step * slope0 and abs(slope) <= -C2 * slope0
