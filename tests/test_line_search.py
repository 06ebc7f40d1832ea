"""The line search of both L-BFGS loops: strong Wolfe, and what it does where float32
values cannot show the decrease a step promises."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from mgpu_dask.kernels import logreg as L
from mgpu_dask.kernels.lbfgs.rules import (FLOAT32_ROUNDING, FLOAT64_ROUNDING, acceptable,
                                           rounding_of)
from mgpu_dask.logreg.lbfgs.line_search import C1, C2, strong_wolfe
from mgpu_dask.logreg.lbfgs.loop import minimize_lbfgs


def test_line_search_finds_strong_wolfe_steps():
    calls = []

    def phi(step):  # a quartic along the direction: minimum near step 2.0
        calls.append(step)
        return (step - 2.0) ** 4 - 4 * step, 4 * (step - 2.0) ** 3 - 4

    f0, s0 = phi(0.0)
    calls.clear()
    for first in (0.1, 1.0, 50.0):  # extrapolate, accept at once or nearly, zoom back
        step = strong_wolfe(phi, f0, s0, first)
        value, slope = phi(step)
        assert value <= f0 + C1 * step * s0 and abs(slope) <= -C2 * s0
        assert calls[-2] == step  # the accepted step was the last one evaluated
    assert strong_wolfe(phi, f0, -s0, 1.0) is None  # not a descent direction
    assert strong_wolfe(lambda a: (float("nan"), float("nan")), f0, s0, 1.0) is None


@pytest.mark.parametrize("f0", [1.5, 0.02, 40.0])
def test_a_step_promising_less_than_rounding_is_kept_on_its_curvature(f0):
    """Approximate Wolfe: a promised decrease within the value's rounding, a value no
    worse beyond it and the curvature condition keep the step; each part alone does not."""
    noise = FLOAT32_ROUNDING * f0
    slope0 = -0.5 * noise  # a unit step promises half the rounding

    def ok(value, slope, step):
        return acceptable(value, slope, step, f0, slope0, FLOAT32_ROUNDING)

    assert ok(f0 + 0.9 * noise, 0.5 * slope0, 1.0)
    assert not ok(f0 + 1.1 * noise, 0.5 * slope0, 1.0)  # worse beyond it
    assert not ok(f0, 0.95 * slope0, 1.0)  # still steep: not curved enough
    assert not ok(f0, -0.95 * slope0, 1.0)
    assert not ok(f0 + 0.9 * noise, 0.5 * slope0, 3.0)  # promises more
    assert ok(f0 + 3 * C1 * slope0, 0.5 * slope0, 3.0)  # and shows it
    assert not ok(float("nan"), 0.5 * slope0, 1.0)


def test_values_more_exact_than_float32_keep_steps_on_their_decrease():
    """A value summed exactly (int8 products) is rounded as float64's: a step that
    promises less than float32's rounding and shows no decrease is not kept, as it is
    for float32 values (taken for float32's, such steps ended two GPUs' int8 fit by
    ``ftol`` 6.6e-5 above its optimum)."""
    f0 = 1.4
    noise = FLOAT32_ROUNDING * f0
    slope0 = -0.5 * noise
    assert acceptable(f0, 0.5 * slope0, 1.0, f0, slope0, FLOAT32_ROUNDING)
    assert not acceptable(f0, 0.5 * slope0, 1.0, f0, slope0, FLOAT64_ROUNDING)
    assert acceptable(f0 + C1 * slope0, 0.5 * slope0, 1.0, f0, slope0, FLOAT64_ROUNDING)
    assert rounding_of(["int8", "int8"]) == FLOAT64_ROUNDING
    for ran in (["int8", "fp32"], ["bf16"], ["fp32"], []):
        assert rounding_of(ran) == FLOAT32_ROUNDING


def test_the_host_loop_asks_for_the_rounding_once_its_values_exist():
    """A rounding given as a function (what the evaluations ran, known once they ran) is
    asked once, after the first evaluation (at the first step test), and the loop then runs
    on it."""
    evaluations, asked = [], []

    def fun(x):
        evaluations.append(1)
        return float(x @ x), 2 * x

    def rounding():
        asked.append(len(evaluations))
        return FLOAT64_ROUNDING

    out = minimize_lbfgs(fun, np.ones(3), maxiter=5, rounding=rounding)
    assert out["success"] and len(asked) == 1 and asked[0] >= 1


def test_a_search_in_rounding_noise_ends_at_its_first_curved_step():
    """Values that jitter by rounding around a flat line: the first step whose slope
    has turned is kept, not ten more trials that no value can decide."""
    f0, slope0 = 1.0, -0.1 * FLOAT32_ROUNDING
    jitter = np.random.default_rng(3).uniform(0.0, 0.8 * FLOAT32_ROUNDING, 64)
    calls = []

    def phi(step):  # a quadratic of minimum at 1.2, its values lost in rounding
        calls.append(step)
        return f0 + jitter[len(calls)], slope0 * (1 - step / 1.2)

    assert strong_wolfe(phi, f0, slope0, 1.0) == 1.0 and calls == [1.0]
    calls.clear()
    step = strong_wolfe(phi, f0, slope0, 4.0)  # overshot: the zoom's first turned step
    assert step is not None and abs(1 - step / 1.2) <= C2 and len(calls) <= 3


def _float32_logistic(n, d, k, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d), dtype=np.float32)
    logits = X @ (rng.standard_normal((d, k)) * 0.3).astype(np.float32)
    y = np.argmax(logits + rng.gumbel(size=logits.shape), axis=1).astype(np.int32)
    penalty = 1.0 / n

    def fun(theta):  # the CPU path's evaluation: float32 products, as on the GPUs
        W, b = theta[: d * k].reshape(d, k), theta[d * k:]
        loss, gW, gb = L.loss_grad(X, y, W, b)
        return (loss / n + 0.5 * penalty * (W * W).sum(),
                np.concatenate([(gW / n + penalty * W).ravel(), gb / n]))

    def exact(theta):  # the same objective in float64
        W, b = theta[: d * k].reshape(d, k), theta[d * k:]
        z = X.astype(np.float64) @ W + b
        z -= z.max(1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(1, keepdims=True)
        f = -np.log(p[np.arange(n), y]).mean() + 0.5 * penalty * (W * W).sum()
        p[np.arange(n), y] -= 1
        return f, np.concatenate([(X.T @ p / n + penalty * W).ravel(), p.mean(0)])

    return fun, exact, d * k + k


@pytest.mark.parametrize("n, d, k, seed", [(5000, 8, 3, 0), (20000, 16, 5, 1), (3000, 30, 7, 2)])
def test_a_float32_fit_run_to_its_end_spends_no_evaluations_on_rounding(n, d, k, seed):
    """``tol=0``: the fit runs until float32 values stop showing decreases.  It stops
    there with one evaluation per iteration (not a failed search of ten trials, then
    another from steepest descent) at the float64 optimum's value to float32 rounding."""
    fun, exact, m = _float32_logistic(n, d, k, seed)
    out = minimize_lbfgs(fun, np.zeros(m), maxiter=200, gtol=0.0)
    best = minimize(exact, np.zeros(m), jac=True, method="L-BFGS-B",
                    options=dict(maxiter=2000, gtol=1e-12, ftol=0.0))
    assert out["success"] and out["message"] == "relative decrease below ftol"
    assert out["nit"] < 200 and out["nfev"] <= out["nit"] + out["searches"] + 2
    assert exact(out["x"])[0] - best.fun <= 4 * FLOAT32_ROUNDING * best.fun
