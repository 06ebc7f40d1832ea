"""The step rules of our L-BFGS, shared by the host loop and the device kernels."""

from __future__ import annotations

from ..jitable import both_targets

C1, C2 = 1e-4, 0.9  # sufficient decrease, curvature (the usual quasi-Newton choice)
# The relative rounding of an evaluation's value, which the step test allows for: float32
# products' (the float32 and bf16 evaluations), or float64's where the sums are exact
# (int8 products: integer sums, the value put together in float64).
FLOAT32_ROUNDING = 2.0 ** -23
FLOAT64_ROUNDING = 2.0 ** -52
STALLED = 3  # OWL-QN: the decrease the stopping rule reads is the best of this many last steps


def rounding_of(precisions: "list[str]") -> float:
    """The relative rounding of a value summed over shards evaluated in ``precisions``
    (:class:`~mgpu_dask.kernels.precision.Precision` values): float64's where every
    shard's sums are exact (int8 products), else float32's."""
    exact = bool(precisions) and all(str(p) == "int8" for p in precisions)
    return FLOAT64_ROUNDING if exact else FLOAT32_ROUNDING


@both_targets
def first_step(f, f_prev, slope0):
    """The first trial step: the previous decrease repeated (Nocedal and Wright, 3.60), at most 1."""
    if slope0 < 0:
        step = 1.01 * 2.0 * (f - f_prev) / slope0
        if step > 0.0 and step < 1.0:
            return step
    return 1.0


@both_targets
def first_owlqn_step(f, f_prev, slope0, pairs):
    """OWL-QN's first trial step: 1 once there are curvature pairs (its backtracking only
    shrinks, so a short step would make the next one short too), else :func:`first_step`."""
    if pairs > 0:
        return 1.0
    return first_step(f, f_prev, slope0)


@both_targets
def acceptable(value, slope, step, f0, slope0, rounding):
    """The strong-Wolfe conditions at ``step`` (a NaN value is never acceptable).

    Where the decrease the step promises (``-step * slope0``) is within the rounding
    of the value (``rounding * |f0|``, ``rounding`` the evaluation's relative
    rounding), the values cannot show it: there the step is kept on the curvature
    condition and a value no worse than ``f0`` beyond that rounding -- the
    approximate Wolfe conditions of Hager and Zhang (SIAM J. Optim. 16, 2005), which
    stop a float32 fit near its optimum from spending ten trial steps on rounding
    noise and then stopping anyway.  Values more exact than that must say so: taken
    for float32's, a float64 value's steps of real but small decrease are kept on
    curvature alone, and one that shows none ends the fit by ``ftol`` short of its
    optimum.
    """
    if not abs(slope) <= -C2 * slope0:
        return False
    if value <= f0 + C1 * step * slope0:
        return True
    noise = rounding * abs(f0)
    return -step * slope0 <= noise and value <= f0 + noise


@both_targets
def sufficient_decrease(value, change, f0):
    """OWL-QN's step rule (Armijo alone): ``value <= f0 + C1 * change``, ``change`` being
    the pseudo-gradient's product with the step actually taken (after the projection on
    the orthant); a NaN value is never acceptable."""
    return value <= f0 + C1 * change


@both_targets
def pseudo_entry(x, g, l1):
    """One entry of the pseudo-gradient of ``f + l1 |x|`` (OWL-QN, Andrew and Gao 2007):
    ``g + l1 sign(x)``, or at ``x = 0`` the one-sided derivative that decreases the
    objective, zero where neither does.  ``l1 = 0``: ``g`` itself."""
    if x > 0.0:
        return g + l1
    if x < 0.0:
        return g - l1
    if g - l1 > 0.0:
        return g - l1
    if g + l1 < 0.0:
        return g + l1
    return 0.0


@both_targets
def moved_entry(x, p, pg, step, l1):
    """``x + step p`` projected on the orthant of ``x`` (OWL-QN): an entry that would
    change sign, or leave zero other than against the pseudo-gradient ``pg``, is zero.
    ``l1 = 0`` (an entry without L1 weight): the step as it is."""
    t = x + step * p
    if l1 > 0.0:
        side = x if x != 0.0 else -pg
        if not ((t > 0.0 and side > 0.0) or (t < 0.0 and side < 0.0)):
            t = 0.0
    return t
