"""The device L-BFGS's kernel launches over its buffers (:class:`.device.DeviceBackend`).

Each is a :class:`~mgpu_dask.kernels.launch.Launcher`, laid out once and launched
every iteration (or captured into its CUDA graph) with the grid beside it:
the proposal (:mod:`mgpu_dask.kernels.lbfgs.cuda`) and the end of an iteration
(:mod:`mgpu_dask.kernels.lbfgs.finish`).

A fit on a machine whose kernel cache lacks them would compile these kernels one
after another (seconds, most of a first fit).  :func:`compile_ahead`, called where a
fit begins, has a few side processes compile them at once
(:class:`~mgpu_dask.kernels.ahead.Compiling`) while the fit maps its rows and builds its
evaluations; :func:`launches` waits for them and then loads them from the cache.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import numpy as np

from ...kernels.launch import Launcher
from ...kernels.lbfgs import cuda as K
from ...kernels.lbfgs import finish as Fin

AHEAD_PROCESSES = 6
"""Side processes that compile the loop's eight kernels (each imports Numba): the three
longest one each, so that the longest alone sets when they are done."""
COMPILE_SECONDS = {"products": 1.6, "direction": 1.9, "assemble": 2.3, "apply": 0.5,
                   "trial": 0.5, "set_trial": 0.1, "forget": 0.06, "arm": 0.07}
"""About how long each of the loop's kernels takes to compile (as ``jobs/ahead.json``
records them): what :func:`~mgpu_dask.kernels.ahead.balance` shares the processes by."""
AHEAD_SECONDS = 120.0
"""How long :func:`launches` waits for them; what is not done by then compiles here."""
_AHEAD: list[Any] = []  # the Compiling started by compile_ahead, until launches waits
_SETTLED: list[bool] = []  # compile_ahead found the kernels cached, or started them: once
_MEANWHILE: list[bool] = []  # a fit ran the host's loop while these compiled: once
_LOCK = threading.Lock()


def buffers(xp: Any, d: int, k: int, shards: int, memory: int,
            chunks: int) -> dict[str, Any]:
    """The device L-BFGS's buffers, zeroed (``xp``: CuPy, or NumPy under the simulator),
    for ``d`` features, ``k`` classes, ``shards`` shards, ``memory`` curvature pairs and
    sweeps of ``chunks`` blocks: the point, gradients, direction and pairs (float64), the
    scalars the host reads, the trial parameters and the shards' sums they land in, and
    the sweeps' parts."""
    m = d * k + k

    def z(*shape: int, dtype: Any = np.float64) -> Any:
        return xp.zeros(shape, dtype=dtype)

    return {"x": z(m), "g": z(m), "gt": z(m), "p": z(m),
            "pg": z(m),  # the pseudo-gradient (OWL-QN; a copy of g without an L1 part)
            "S": z(memory, m), "Y": z(memory, m), "rho": z(memory), "scal": z(K.N_SCALARS),
            "params": z(m, dtype=np.float32), "parts": z(shards, d * k, dtype=np.float32),
            "psums": z(shards, k + 1), "SY": z(memory, memory), "YY": z(memory, memory),
            "dparts": z(2 * memory + 1, chunks), "pparts": z(1, chunks),
            "gparts": z(3 * memory, chunks), "fparts": z(Fin.N_PARTS, chunks),
            "count": z(K.N_COUNTS, dtype=np.int32)}  # blocks.last_block's, zero between launches


def _laid_out(b: Any, memory: int, chunks: int, sweep: int, inv_n: float, penalty: float,
              l1: float, dk: int) -> dict[str, tuple[Any, list, int, int | None]]:
    """Each launch as ``(kernel, arguments, threads, grid)`` over the buffers of ``b``
    (grid None: given at each call); the longest compiles first."""
    l1, dk = float(l1), int(dk)
    return {
        "products": (K.products, [b.S, b.Y, b.pg, b.scal, b.dparts, b.gparts, b.SY, b.YY,
                                  b.count], sweep, (2 * memory + 1 + 3 * memory) * chunks),
        "direction": (K.direction, [b.S, b.Y, b.pg, b.rho, b.SY, b.YY, b.scal, b.dparts, b.p,
                                    b.pparts, l1, dk], sweep, chunks),
        "assemble": (Fin.assemble, [b.parts, b.psums, b.x, b.p, b.g, b.gt, b.rho, b.scal,
                                    b.fparts, b.count, inv_n, penalty, K.INIT, b.pg, l1],
                     sweep, chunks),
        "apply": (Fin.apply, [b.x, b.p, b.g, b.gt, b.S, b.Y, b.scal, b.pg, l1, dk], sweep,
                  chunks),
        "trial": (K.trial, [b.x, b.p, b.scal, b.pparts, b.params, b.pg, l1, dk], sweep, chunks),
        "set_trial": (K.set_trial, [b.x, b.p, b.scal, b.params, 0.0, b.pg, l1, dk], 256, None),
        "forget": (K.forget, [b.scal], 1, None),
        "arm": (K.arm, [b.scal, 0.0, 0.0, 0.0], 1, None)}


def compiling() -> bool:
    """Whether side processes started by :func:`compile_ahead` are still compiling the
    loop's kernels (a machine's first device fit, while it runs)."""
    with _LOCK:
        return any(not c.finished() for c in _AHEAD)


def bind(b: Any, wait: bool = True) -> bool:
    """Bind backend ``b``'s loop launches (:func:`launches` over ``b._loop``) unless they are;
    where ``wait`` is False, the kernels are still being compiled ahead (:func:`compiling`)
    and no fit of this process has gone without them yet, nothing: returns whether they
    are bound.  One fit meanwhile (a machine's first); later ones wait for the kernels."""
    if b._propose_launches is not None:
        return True
    if not wait and compiling():
        with _LOCK:
            first, _MEANWHILE[:] = not _MEANWHILE, [True]
        if first:
            return False
    with b._leader():
        (b._propose_launches, b._finish_launches, b._k_trial, b._k_forget,
         b._k_arm) = launches(b, *b._loop)
    return True


def launches(b: Any, memory: int, chunks: int, sweep: int, inv_n: float, penalty: float,
             l1: float, dk: int) -> tuple[list, list, Launcher, Launcher, Launcher]:
    """``(propose, finish, set_trial, forget, arm)`` over the buffers of backend ``b``:
    two lists of ``(launcher, grid)`` and three launchers, all on ``b.stream``;
    ``chunks`` blocks of ``sweep`` threads run the sweeps over the vectors (``products``:
    that many for each of its vectors).  ``l1``: the L1 weight on the first ``dk``
    entries (0: none); the recursion runs on the pseudo-gradient ``b.pg``, a copy of
    ``b.g`` without one.  Kernels being compiled ahead are waited for first."""
    with _LOCK:
        pending, _AHEAD[:] = list(_AHEAD), []
    for compiling in pending:
        compiling.wait(AHEAD_SECONDS)
    laid = _laid_out(b, memory, chunks, sweep, inv_n, penalty, l1, dk)
    made = {name: (Launcher(kernel, args, threads, b.stream), grid)
            for name, (kernel, args, threads, grid) in laid.items()}
    return ([made["products"], made["direction"], made["trial"]],
            [made["assemble"], made["apply"]],
            made["set_trial"][0], made["forget"][0], made["arm"][0])


def loop_items() -> list[dict[str, Any]]:
    """The loop's kernels as :mod:`mgpu_dask.kernels.ahead` lists them (``module:name`` and
    argument types), typed from the backend's :func:`buffers` at their smallest: their
    dtypes and dimensions are all a kernel's signature depends on."""
    return [item for _, item in _typed()]


def _typed() -> list[tuple[Any, dict[str, Any]]]:
    """Each of the loop's kernels and its :func:`loop_items` item."""
    import numba

    from ...kernels.ahead import encode

    b = SimpleNamespace(**buffers(np, 1, 1, 1, 1, 1))
    items = []
    for name, (kernel, args, _, _) in _laid_out(b, 1, 1, 256, 1.0, 0.0, 0.0, 1).items():
        fn = getattr(kernel, "py_func", None) or kernel.fn  # the simulator's keeps ``fn``
        values = [np.int64(a) if isinstance(a, int) else np.float64(a) if isinstance(a, float)
                  else a for a in args]  # as Launcher passes them
        items.append((kernel, {"numba": f"{fn.__module__}:{fn.__qualname__}",
                               "signature": encode(tuple(numba.typeof(v) for v in values)),
                               "seconds": COMPILE_SECONDS[name]}))
    return items


def compile_ahead() -> bool:
    """Start compiling the loop's kernels in side processes where this process has a GPU
    and Numba's cache lacks one of them (a machine's first device fit); the next
    :func:`launches` waits for them.  Returns whether it started them.  Once it found them cached
    or started them, a process asks no more (a warm fit pays nothing for it)."""
    from numba import config

    if _SETTLED or config.ENABLE_CUDASIM:
        return False
    try:
        import cupy

        gpus = cupy.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - no CuPy or no GPU: nothing to compile for
        gpus = 0
    if gpus < 1:
        _SETTLED.append(True)
        return False
    from ...kernels.ahead import Compiling
    from ...kernels.compiled import in_cache

    with _LOCK:
        if _SETTLED:
            return False
        _SETTLED.append(True)
        typed = _typed()
        if in_cache([kernel for kernel, _ in typed]):
            return False
        _AHEAD.append(Compiling([item for _, item in typed], AHEAD_PROCESSES))
    return True


def launch_note(b: Any) -> str | None:
    """Why backend ``b``'s loop kernels (or a shard's) go through Numba's own launch."""
    launchers = [launcher for launcher, _ in b._propose_launches + b._finish_launches]
    launchers += [b._k_trial, b._k_forget, b._k_arm]
    slow = [launcher.why for launcher in launchers if not launcher.fast]
    if slow:
        return f"the L-BFGS kernels are launched through Numba's own launch, slower ({slow[0]})"
    return next((o.launch_note for o in b.objectives if o.launch_note), None)
