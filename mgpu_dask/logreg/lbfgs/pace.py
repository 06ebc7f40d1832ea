"""How many iterations the device L-BFGS queues before the host reads the scalars."""

from __future__ import annotations

from typing import Any

import numpy as np

AHEAD_SECONDS = 2e-3   # device time worth queueing per look (each wait has a fixed cost)
MAX_AHEAD = 16
SIMULATOR_AHEAD = 4


class RunAhead:
    """Iterations per look: ``fixed``, or ``AHEAD_SECONDS`` of device work.

    Without ``fixed`` the number is first taken from the device time of one
    evaluation (:meth:`first`), then from the device time per iteration of every
    look whose queued steps were all kept (:meth:`span`, :meth:`settle`): an
    evaluation that reads shards of other processes is slow the first time, and
    the loop's own iterations are what is queued.
    """

    def __init__(self, fixed: int | None) -> None:
        if fixed is not None and fixed < 1:
            raise ValueError(f"run_ahead={fixed} must be at least 1")
        self.value = fixed
        self.paced = fixed is None

    def first(self, seconds: float) -> int:
        """The number, chosen from one evaluation's device time (nan: the simulator)."""
        if self.value is None:
            self.value = SIMULATOR_AHEAD if not np.isfinite(seconds) else self._of(seconds)
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

            self.value = self._of(cupy.cuda.get_elapsed_time(*span) / 1e3 / queued)

    @staticmethod
    def _of(seconds: float) -> int:
        return int(np.clip(AHEAD_SECONDS // max(seconds, 1e-6), 1, MAX_AHEAD))
