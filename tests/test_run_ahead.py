"""How many iterations the device L-BFGS queues per look (``logreg.lbfgs.pace``)."""

from __future__ import annotations

import math
import sys
import types

import pytest

from mgpu_dask.logreg.lbfgs import pace
from mgpu_dask.logreg.lbfgs.pace import AHEAD_SECONDS, MAX_AHEAD, SIMULATOR_AHEAD, RunAhead


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


def test_the_first_evaluation_chooses_until_the_iterations_are_timed(elapsed_ms):
    ahead = RunAhead(None)
    assert ahead.first(float("nan")) == SIMULATOR_AHEAD
    ahead = RunAhead(None)
    slow_first = 4 * AHEAD_SECONDS / 10  # a first evaluation that reads other processes' rows
    assert ahead.first(slow_first) == 2
    span = ("start", "end")
    elapsed_ms[0] = 8 * 0.25  # eight iterations of 0.25 ms each, all kept
    ahead.settle(span, 8, 8)
    assert ahead.value == math.floor(AHEAD_SECONDS / 0.25e-3)
    elapsed_ms[0] = 8 * 0.01  # not all kept: the span held iterations skipped on the device
    ahead.settle(span, 8, 5)
    assert ahead.value == math.floor(AHEAD_SECONDS / 0.25e-3)
    ahead.settle(span, 8, 8)  # quick iterations: as many as allowed
    assert ahead.value == MAX_AHEAD
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
