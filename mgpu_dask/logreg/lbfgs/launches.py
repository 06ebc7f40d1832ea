"""The device L-BFGS's kernel launches over its buffers (:class:`.device.DeviceBackend`).

Each is a :class:`~mgpu_dask.kernels.launch.Launcher`, laid out once and launched
every iteration (or captured into its CUDA graph) with the grid beside it:
the proposal (:mod:`mgpu_dask.kernels.lbfgs.cuda`) and the end of an iteration
(:mod:`mgpu_dask.kernels.lbfgs.finish`).
"""

from __future__ import annotations

from typing import Any

from ...kernels.launch import Launcher
from ...kernels.lbfgs import cuda as K
from ...kernels.lbfgs import finish as Fin


def launches(b: Any, memory: int, chunks: int, sweep: int, inv_n: float, penalty: float,
             l1: float, dk: int) -> tuple[list, list, Launcher, Launcher, Launcher]:
    """``(propose, finish, set_trial, forget, arm)`` over the buffers of backend ``b``:
    two lists of ``(launcher, grid)`` and three launchers, all on ``b.stream``;
    ``chunks`` blocks of ``sweep`` threads run the sweeps over the vectors (``products``:
    that many for each of its vectors).  ``l1``: the L1 weight on the first ``dk``
    entries (0: none); the recursion runs on the pseudo-gradient ``b.pg``, a copy of
    ``b.g`` without one."""
    l1, dk = float(l1), int(dk)
    propose = [
        (Launcher(K.products, [b.S, b.Y, b.pg, b.scal, b.dparts, b.gparts, b.SY, b.YY,
                               b.count], sweep, b.stream),
         (2 * memory + 1 + 3 * memory) * chunks),
        (Launcher(K.direction, [b.S, b.Y, b.pg, b.rho, b.SY, b.YY, b.scal, b.dparts, b.p,
                                b.pparts, l1, dk], sweep, b.stream), chunks),
        (Launcher(K.trial, [b.x, b.p, b.scal, b.pparts, b.params, b.pg, l1, dk], sweep,
                  b.stream), chunks)]
    finish = [
        (Launcher(Fin.assemble, [b.parts, b.psums, b.x, b.p, b.g, b.gt, b.rho, b.scal,
                                 b.fparts, b.count, inv_n, penalty, K.INIT, b.pg, l1],
                  sweep, b.stream), chunks),
        (Launcher(Fin.apply, [b.x, b.p, b.g, b.gt, b.S, b.Y, b.scal, b.pg, l1, dk], sweep,
                  b.stream), chunks)]
    trial = Launcher(K.set_trial, [b.x, b.p, b.scal, b.params, 0.0, b.pg, l1, dk], 256,
                     b.stream)
    forget = Launcher(K.forget, [b.scal], 1, b.stream)
    arm = Launcher(K.arm, [b.scal, 0.0, 0.0], 1, b.stream)
    return propose, finish, trial, forget, arm


def launch_note(b: Any) -> str | None:
    """Why backend ``b``'s loop kernels (or a shard's) go through Numba's own launch."""
    launchers = [launcher for launcher, _ in b._propose_launches + b._finish_launches]
    launchers += [b._k_trial, b._k_forget, b._k_arm]
    slow = [launcher.why for launcher in launchers if not launcher.fast]
    if slow:
        return f"the L-BFGS kernels are launched through Numba's own launch, slower ({slow[0]})"
    return next((o.launch_note for o in b.objectives if o.launch_note), None)
