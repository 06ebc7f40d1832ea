"""How many iterations the device L-BFGS queues before the host reads the scalars, and
how many it queues past that read (the bridge)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

AHEAD_SECONDS = 2e-3   # device time worth queueing per look (each wait has a fixed cost)
MAX_AHEAD = 16
SIMULATOR_AHEAD = 4
BRIDGE_SECONDS = 3e-4  # device time queued past a look: the host's turn between two looks
                       # (its wait ending, the scalars read, the next look queued); no bridge
                       # for longer iterations, whose evaluations a stop would waste


class RunAhead:
    """Iterations per look: ``fixed``, or ``AHEAD_SECONDS`` of device work.

    Without ``fixed`` the number is first taken from the device time of one
    evaluation (:meth:`first`), then from the device time per iteration of every
    look whose queued steps were all kept (:meth:`span`, :meth:`settle`): an
    evaluation that reads shards of other processes is slow the first time, and
    the loop's own iterations are what is queued.
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
                self.seconds, self.value = seconds, self._of(seconds)
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
        """After the look: every queued step kept, the number follows their device time."""
        if span is not None and kept == queued > 0:
            import cupy

            self.seconds = cupy.cuda.get_elapsed_time(*span) / 1e3 / queued
            self.value = self._of(self.seconds)

    @staticmethod
    def _of(seconds: float) -> int:
        return int(np.clip(AHEAD_SECONDS // max(seconds, 1e-6), 1, MAX_AHEAD))


def elapsed(timed: tuple) -> float:
    """Seconds between two recorded CUDA events ``(start, end)``, once the end is done."""
    import cupy

    timed[1].synchronize()
    return cupy.cuda.get_elapsed_time(*timed) / 1e3
