"""How many iterations the device L-BFGS queues before the host reads the scalars, and
how many it queues past that read (the bridge)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

AHEAD_SECONDS = 2e-3   # the most device time queued per look
WAIT_SECONDS = 3e-5    # what a look's wait costs the device (idle while the host reads the
                       # scalars and queues the next look): 100 MNIST iterations at 6 a look
                       # took 0.3 ms more than at 16, ten waits more
PRIOR_ITERATIONS = 32  # a fit's stop rate before any look: half a stop in this many steps
MAX_AHEAD = 16
SIMULATOR_AHEAD = 4
BRIDGE_SECONDS = 3e-4  # device time queued past a look: the host's turn between two looks
                       # (its wait ending, the scalars read, the next look queued); no bridge
                       # for longer iterations, whose evaluations a stop would waste


class RunAhead:
    """Iterations per look: ``fixed``, or the number that costs the device least.

    Each look costs a wait (``WAIT_SECONDS``).  Where a step is not kept or a stopping
    rule holds, the iterations queued behind it are skipped on the device only in part:
    their evaluations still run, so a stop in a look of ``L`` iterations of ``t`` seconds
    wastes about ``(L - 1) t / 2``.  With ``q`` stops per step kept so far (half a stop in
    ``PRIOR_ITERATIONS`` before any look), the device time per step,
    ``WAIT_SECONDS / L + q (L - 1) t / 2``, is least at ``L = sqrt(2 WAIT_SECONDS / (q t))``,
    and a look never queues more than ``AHEAD_SECONDS`` of device time.  So short
    iterations that are seldom stopped (MNIST's 100 to ``max_iter``) soon run many a
    look, long ones of a fit with line searches (float rows of many features) one
    (docs/performance-history.md, "how far the L-BFGS runs ahead").  An iteration's
    device time is first taken from one evaluation (:meth:`first`), then from the
    iterations of every look whose steps were all kept (:meth:`span`, :meth:`settle`): an
    evaluation that reads shards of other processes is slow the first time, and the
    loop's own iterations are what is queued.
    """

    def __init__(self, fixed: int | None, bridge: int | None = None) -> None:
        if fixed is not None and fixed < 1:
            raise ValueError(f"run_ahead={fixed} must be at least 1")
        if bridge is not None and bridge < 0:
            raise ValueError(f"bridge={bridge} must be at least 0")
        self.value = fixed
        self.paced = fixed is None
        self._bridge = bridge
        self.seconds: float | None = None  # device time of one iteration, once known
        self.kept = self.stops = 0  # steps kept and looks stopped short, so far

    def bridge(self) -> int:
        """Iterations to queue past a look, while the host reads it and queues the next:
        ``BRIDGE_SECONDS`` of device work (at most a look's worth) once an iteration's
        device time is known and is at most that; the number given, if one was.  Each
        look then finds the device busy instead of idle for the host's turn.  A look
        that stops (a step not kept, a stopping rule met) leaves its bridge to be
        skipped on the device, but the shards' evaluations still run there: iterations
        longer than ``BRIDGE_SECONDS``, whose waits cost them little, get no bridge."""
        if self._bridge is not None:
            return self._bridge
        if self.seconds is None or self.value is None or self.seconds > BRIDGE_SECONDS:
            return 0
        return min(self.value, math.ceil(BRIDGE_SECONDS / self.seconds))

    def first(self, seconds: float) -> int:
        """The number, chosen from one evaluation's device time (nan: the simulator)."""
        if self.value is None:
            if np.isfinite(seconds):
                self.seconds = seconds
                self.value = self._pick()
            else:
                self.value = SIMULATOR_AHEAD
        return self.value

    def span(self, device: Any) -> tuple[Any, Any] | None:
        """Two CUDA events to record around a look's iterations (None: not paced)."""
        if not self.paced or device is None:
            return None
        import cupy

        with device:
            return cupy.cuda.Event(), cupy.cuda.Event()

    def settle(self, span: tuple[Any, Any] | None, queued: int, kept: int) -> None:
        """After a look of ``queued`` iterations, ``kept`` of whose steps were kept: the
        stop rate and, every step kept, the iterations' device time; then the number."""
        if not self.paced or queued <= 0:
            return
        self.kept += max(0, kept)
        self.stops += kept < queued
        if span is not None and kept == queued:
            import cupy

            self.seconds = cupy.cuda.get_elapsed_time(*span) / 1e3 / queued
        if self.seconds is not None:
            self.value = self._pick()

    def _pick(self) -> int:
        """The number of least device time per step (the class's docstring)."""
        rate = (self.stops + 0.5) / (self.kept + PRIOR_ITERATIONS)
        best = math.sqrt(2 * WAIT_SECONDS / (rate * max(self.seconds, 1e-6)))
        return int(min(max(1, math.floor(best)), self._of(self.seconds)))

    @staticmethod
    def _of(seconds: float) -> int:
        """Iterations of ``seconds`` each in ``AHEAD_SECONDS`` of device time (1 to
        MAX_AHEAD)."""
        return int(np.clip(AHEAD_SECONDS // max(seconds, 1e-6), 1, MAX_AHEAD))


def elapsed(timed: tuple) -> float:
    """Seconds between two recorded CUDA events ``(start, end)``, once the end is done."""
    import cupy

    timed[1].synchronize()
    return cupy.cuda.get_elapsed_time(*timed) / 1e3
