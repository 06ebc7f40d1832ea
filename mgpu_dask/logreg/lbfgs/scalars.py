"""The host's copy of the device L-BFGS's scalars (:class:`.device.DeviceBackend`'s
``scal``): the one thing the host loop reads from the device."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...kernels.lbfgs import cuda as K


class Scalars:
    """``scal`` read by the host: a copy into pinned memory queued on ``stream`` behind the
    work queued so far (:meth:`copy`), and a wait for that copy (:meth:`wait`), so that
    more work may be queued in between.  Under the CUDA simulator (``stream`` None) the
    kernels have run by the time they are queued: the copy is taken at once.

    ``last``: the values the last wait gave (zeros before any); ``syncs``: the host's
    waits so far.
    """

    def __init__(self, scal: Any, device: Any, stream: Any) -> None:
        self.scal, self.device, self.stream = scal, device, stream
        self.reset()
        if stream is not None:
            import cupy
            import cupyx

            self._pinned = cupyx.empty_pinned(K.N_SCALARS, dtype=np.float64)
            with device:
                self._copied = cupy.cuda.Event(disable_timing=True)

    def reset(self) -> None:
        """Zeros, no waits: as before a fit."""
        self.last = np.zeros(K.N_SCALARS)
        self.syncs = 0

    def copy(self) -> None:
        """Queue the copy of the scalars as they stand after everything queued so far."""
        if self.stream is None:
            self.last = np.array(self.scal)
            return
        from cupy.cuda import runtime

        with self.device:
            runtime.memcpyAsync(self._pinned.ctypes.data, self.scal.data.ptr, self.scal.nbytes,
                                runtime.memcpyDeviceToHost, self.stream.ptr)
            self._copied.record(self.stream)

    def wait(self) -> np.ndarray:
        """The scalars of the last :meth:`copy`, once it is done (a host wait)."""
        self.syncs += 1
        if self.stream is not None:
            self._copied.synchronize()
            self.last = np.array(self._pinned)
        return self.last

    def read(self) -> np.ndarray:
        """The scalars after everything queued so far."""
        self.copy()
        return self.wait()
