"""The device L-BFGS's kernel launches over its buffers (:class:`.device.DeviceBackend`).

Each is a :class:`~mgpu_dask.kernels.launch.Launcher`, laid out once and launched
every iteration (or captured into its CUDA graph) with the grid beside it:
the proposal (:mod:`mgpu_dask.kernels.lbfgs.cuda`, which also brings the curvature
pairs' products up to date) and the end of an iteration
(:mod:`mgpu_dask.kernels.lbfgs.finish`).
"""

from __future__ import annotations

from typing import Any

from ...kernels.launch import Launcher
from ...kernels.lbfgs import cuda as K
from ...kernels.lbfgs import finish as Fin


def launches(b: Any, memory: int, chunks: int, sweep: int, threads: int, inv_n: float,
             penalty: float) -> tuple[list, list, Launcher, Launcher, Launcher]:
    """``(propose, finish, set_trial, forget, arm)`` over the buffers of backend ``b``: two
    lists of ``(launcher, grid)`` and three launchers; ``chunks`` blocks of ``sweep``
    threads run the sweeps over the vectors, ``threads`` the one block of ``finish``.
    ``dots`` has a block per chunk of each of its products and of each product of a
    newly stored pair (which ``direction`` adds into ``SY`` and ``YY``)."""
    propose = [
        (Launcher(K.dots, [b.S, b.Y, b.g, b.scal, b.dparts, b.gparts], sweep, b.stream),
         (2 * memory + 1) * chunks + 3 * memory * chunks),
        (Launcher(K.direction, [b.S, b.Y, b.g, b.rho, b.SY, b.YY, b.scal, b.dparts,
                                b.gparts, b.p, b.pparts], sweep, b.stream), chunks),
        (Launcher(K.trial, [b.x, b.p, b.scal, b.pparts, b.params], sweep, b.stream), chunks)]
    finish = [
        (Launcher(Fin.assemble, [b.parts, b.psums, b.x, b.p, b.g, b.gt, b.scal, b.fparts,
                                 inv_n, penalty, K.INIT], sweep, b.stream), chunks),
        (Launcher(Fin.finish, [b.psums, b.rho, b.scal, b.fparts, inv_n, penalty, K.INIT],
                  threads, b.stream), 1),
        (Launcher(Fin.apply, [b.x, b.p, b.g, b.gt, b.S, b.Y, b.scal], sweep, b.stream),
         chunks)]
    trial = Launcher(K.set_trial, [b.x, b.p, b.scal, b.params, 0.0], 256, b.stream)
    forget = Launcher(K.forget, [b.scal], 1, b.stream)
    arm = Launcher(K.arm, [b.scal, 0.0, 0.0], 1, b.stream)
    return propose, finish, trial, forget, arm
