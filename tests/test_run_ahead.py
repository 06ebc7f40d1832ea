"""How many iterations the device L-BFGS queues per look (``logreg.lbfgs.pace``)."""

from __future__ import annotations

import sys
import types

import pytest

from mgpu_dask.logreg.lbfgs import pace
from mgpu_dask.logreg.lbfgs.pace import (AHEAD_SECONDS, MAX_AHEAD, PRIOR_ITERATIONS,
                                         SIMULATOR_AHEAD, WAIT_SECONDS, RunAhead)


@pytest.fixture
def elapsed_ms(monkeypatch):
    """A stand-in for CuPy's event timing: ``elapsed_ms[0]`` between any two events."""
    value = [0.0]
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(get_elapsed_time=lambda a, b: value[0])
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return value


def test_a_fixed_number_stays_and_is_not_timed():
    ahead = RunAhead(3)
    assert ahead.first(1e-6) == 3 and ahead.span(device=object()) is None
    ahead.settle(None, 3, 3)
    assert ahead.value == 3
    with pytest.raises(ValueError, match="at least 1"):
        RunAhead(0)


def _best(kept: int, stops: int, seconds: float) -> int:
    """The number the class's docstring derives, for a stop rate and an iteration time."""
    rate = (stops + 0.5) / (kept + PRIOR_ITERATIONS)
    return max(1, int((2 * WAIT_SECONDS / (rate * seconds)) ** 0.5))


def test_the_first_evaluation_chooses_until_the_iterations_are_timed(elapsed_ms):
    ahead = RunAhead(None)
    assert ahead.first(float("nan")) == SIMULATOR_AHEAD
    ahead = RunAhead(None)
    slow_first = 1e-3  # a first evaluation that reads other processes' rows
    assert ahead.first(slow_first) == _best(0, 0, slow_first) == 1
    span = ("start", "end")
    elapsed_ms[0] = 0.05  # the look's one iteration took 0.05 ms, kept
    ahead.settle(span, 1, 1)
    assert ahead.seconds == pytest.approx(0.05e-3)
    assert ahead.value == _best(1, 0, 0.05e-3) > 1


def test_steps_kept_run_further_ahead_and_stops_run_less_far(elapsed_ms):
    """Looks whose steps are all kept lower the stop rate, so later looks queue more
    iterations (never more than ``AHEAD_SECONDS`` of them); a look that stopped short
    raises it; long iterations run one a look."""
    t = 1e-4
    ahead = RunAhead(None)
    first = ahead.first(t)
    span = ("start", "end")
    looks, kept = [first], 0
    for _ in range(10):
        elapsed_ms[0] = ahead.value * t * 1e3
        kept += ahead.value
        ahead.settle(span, ahead.value, ahead.value)
        looks.append(ahead.value)
    assert looks == sorted(looks) and looks[-1] > looks[0]
    assert ahead.value == min(_best(kept, 0, t), int(AHEAD_SECONDS // t))
    before = ahead.value
    elapsed_ms[0] = 0.0  # the span of a look that stopped: not an iteration's time
    ahead.settle(span, before, 2)
    assert ahead.value < before and ahead.value == _best(kept + 2, 1, t)
    assert ahead.seconds == pytest.approx(t)
    fixed = RunAhead(3)
    fixed.first(t)
    fixed.settle(span, 3, 1)
    assert fixed.value == 3 and fixed.stops == 0
    slow = RunAhead(None)
    assert slow.first(2e-3) == 1  # 2 ms iterations: one a look
    quick = RunAhead(None)
    quick.first(1e-6)
    assert quick.value == MAX_AHEAD  # 1 us iterations: as many as allowed
    assert pace.RunAhead._of(1.0) == 1


def test_the_bridge_covers_the_hosts_turn_once_an_iteration_is_timed(elapsed_ms):
    """Iterations queued past a look: none before an iteration's device time is known (the
    simulator), then ``BRIDGE_SECONDS`` of them, at most a look's worth, and none for
    iterations longer than that."""
    assert RunAhead(None).bridge() == 0
    simulated = RunAhead(None)
    simulated.first(float("nan"))
    assert simulated.bridge() == 0
    assert RunAhead(3, bridge=2).bridge() == 2 and RunAhead(None, bridge=0).bridge() == 0
    with pytest.raises(ValueError, match="at least 0"):
        RunAhead(None, bridge=-1)
    ahead = RunAhead(None)
    ahead.first(pace.BRIDGE_SECONDS / 2.5)  # the first evaluation: three per bridge
    assert ahead.bridge() == 3
    elapsed_ms[0] = 8 * 1e3 * pace.BRIDGE_SECONDS  # iterations as long as a bridge: one
    ahead.settle(("start", "end"), 8, 8)
    assert ahead.bridge() == 1
    elapsed_ms[0] = 8 * 1e3 * pace.BRIDGE_SECONDS * 1.01  # longer: none
    ahead.settle(("start", "end"), 8, 8)
    assert ahead.bridge() == 0
    elapsed_ms[0] = 8 * 1e-3  # 1 us iterations: a look's worth at most
    ahead.settle(("start", "end"), 8, 8)
    assert ahead.value == MAX_AHEAD and ahead.bridge() == MAX_AHEAD
