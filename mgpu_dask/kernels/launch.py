"""Small helpers shared by the kernel modules: array module, allocation, grids."""

from __future__ import annotations

import math
import sys
from types import ModuleType
from typing import Any

import numpy as np


def array_module(x: Any) -> ModuleType:
    """``cupy`` for CuPy arrays, ``numpy`` otherwise (never imports CuPy needlessly)."""
    if type(x).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


def on_gpu(x: Any) -> bool:
    return type(x).__module__.startswith("cupy")


def beside(values: Any, rows: Any, dtype: Any = None) -> Any:
    """``values`` as an array where ``rows`` are: CuPy on their GPU, else NumPy (``dtype``:
    the array's, None: as it comes)."""
    if not on_gpu(rows):
        return np.asarray(values, dtype=dtype)
    import cupy

    with cupy.cuda.Device(rows.device.id):
        return cupy.asarray(values, dtype=dtype)


def as_numpy(block: Any) -> np.ndarray:
    """A NumPy copy of a CuPy block (the block itself if it already is NumPy)."""
    return block.get() if hasattr(block, "get") else np.asarray(block)


def all_entries_finite(a: Any) -> bool:
    """No NaN or infinity in ``a`` (NumPy or CuPy): its smallest and largest entries are
    finite (NaN propagates into both) -- two reductions, no temporary the size of ``a``."""
    if a.size == 0:
        return True
    xp = array_module(a)
    return bool(xp.isfinite(a.min())) and bool(xp.isfinite(a.max()))


class _FiniteLater:
    """A GPU's answer of :func:`finite_later`: the smallest and largest entries copied into
    pinned host memory as soon as their reductions have run, so that reading the answer
    waits for them alone."""

    def __init__(self, a: Any) -> None:
        import cupy
        import cupyx

        self._ends = (a.min().reshape(1), a.max().reshape(1))  # kept until copied
        self._host = cupyx.empty_pinned(2, dtype=a.dtype)
        for i, end in enumerate(self._ends):
            end.get(out=self._host[i:i + 1], blocking=False)
        self._done = cupy.cuda.get_current_stream().record()

    def __bool__(self) -> bool:
        self._done.synchronize()
        return bool(np.isfinite(self._host).all())

    def __del__(self) -> None:
        """The copy landed before its pinned memory goes back to CuPy's pool (an answer
        dropped unread, on an error's way out)."""
        try:
            self._done.synchronize()
        except Exception:  # made in part, or CuPy gone at exit
            pass


def finite_later(a: Any) -> Any:
    """:func:`all_entries_finite`'s answer without waiting for it: on a GPU, two reductions
    queued on the current stream whose answer is read (``bool``) later -- after a search
    that follows them, say, where a check before it would leave the GPU idle while the
    host waits; on a CPU, the answer."""
    if array_module(a) is np or a.size == 0:
        return all_entries_finite(a)
    return _FiniteLater(a)


def finite_flag(block: Any) -> np.ndarray:
    """``[all_entries_finite(block)]`` as a NumPy array: one block's answer where the
    blocks of a dask array are checked where they live."""
    return np.array([all_entries_finite(block)])


def to_gpu(block: Any) -> Any:
    """A CuPy copy of a NumPy block, on the current GPU."""
    import cupy

    return cupy.asarray(block)


def ucx_active() -> bool:
    """Whether UCX runs in this process: a UCX context made by Dask's UCX comms
    (``distributed-ucxx`` after its first connection) or by ``ucxx`` / ``ucx-py``
    directly.  Installed or imported is not enough: RAPIDS imports ``ucxx`` and
    ``distributed-ucxx`` registers itself whatever the protocol, and neither starts
    UCX until a UCX connection is made."""
    for module in ("ucxx.core", "ucp.core"):
        core = sys.modules.get(module)
        if core is not None and getattr(core, "_ctx", None) is not None:
            return True
    comm = sys.modules.get("distributed_ucxx.ucxx")
    return comm is not None and getattr(comm, "ucxx", None) is not None


def capture_allowed() -> bool:
    """Whether work may be captured as a CUDA graph in this process (KNN's tile loop,
    the device L-BFGS's iteration).

    Not while UCX runs in the process (:func:`ucx_active`, a ``--protocol ucx``
    worker): its communication threads make CUDA calls of their own, and those
    fail while a stream of the process is capturing
    (``cudaErrorStreamCaptureUnsupported``), which breaks the transfer.  The work
    is then launched op by op, and the caller says so.
    """
    return not ucx_active()


def finished(out: Any) -> Any:
    """``out`` once the GPU work queued for it is done (a task that returns it then reports
    an honest time); NumPy arrays as they are."""
    if on_gpu(out):
        import cupy

        cupy.cuda.get_current_stream().synchronize()
    return out


def launch(dispatcher: Any, grid: Any, block: Any, *args: Any, stream: Any = None) -> None:
    """Launch a Numba kernel on ``stream`` (default: CuPy's current stream, for kernels
    given CuPy arrays), without its low-occupancy warning.

    Numba launches on the legacy default stream unless told otherwise; work
    queued by CuPy (and cuBLAS) on another stream -- a tile loop's own
    non-blocking stream, a stream being captured into a CUDA graph -- would
    then run unordered with the kernel.  So a kernel given CuPy arrays goes
    to CuPy's current stream.  Our small kernels (one block per query row)
    get grids that Numba calls under-utilising; that warning is about them,
    not about anything the user can change, so it is silenced for these
    launches only.

    Where every argument is a CuPy array or a scalar, the kernel Numba compiled
    for those types is launched through the driver directly (:func:`_launched`):
    Numba's own launch types every argument again at each call, which costs a
    predict's vote more host time than the kernel takes on the GPU.
    """
    if stream is None and any(on_gpu(a) for a in args):
        import cupy

        stream = cupy.cuda.get_current_stream()
    if stream is not None and _launched(dispatcher, grid, block, args, stream):
        return
    import warnings

    with warnings.catch_warnings():  # Numba warns when the launch is configured, not run
        warnings.filterwarnings("ignore", message=".*will likely result in GPU under-utilization")
        configured = dispatcher[grid, block]
        if stream is not None and stream.ptr:
            from numba import cuda

            configured = dispatcher[grid, block, cuda.external_stream(stream.ptr)]
        configured(*args)


_NUMBA_LAUNCH: set = set()
"""Kernels whose direct launch could not be set up in this process (the simulator, a
Numba whose compiled kernels are not what :func:`_cufunction` expects): Numba's own."""


def _scalar_ok(a: Any) -> bool:
    """A scalar whose kernel parameter :func:`_scalar_param` lays out as Numba types it."""
    if isinstance(a, (bool, np.bool_, float, np.float32, np.float64)):
        return True
    if isinstance(a, np.integer):
        return True
    return isinstance(a, int) and -(1 << 63) <= a < (1 << 63)  # Numba: int64


def _dims(value: Any) -> tuple[int, int, int]:
    dims = tuple(int(v) for v in value) if isinstance(value, (tuple, list)) else (int(value),)
    return dims + (1,) * (3 - len(dims))  # type: ignore[return-value]


def _launched(dispatcher: Any, grid: Any, block: Any, args: tuple, stream: Any) -> bool:
    """``dispatcher[grid, block, stream](*args)`` through the driver (one
    ``cuLaunchKernel``, the parameters laid out as Numba lays them out); False where
    that cannot be done here and nothing was launched."""
    if dispatcher in _NUMBA_LAUNCH or not all(_on_device(a) or _scalar_ok(a) for a in args):
        return False
    try:
        from cupy.cuda import driver

        # ``params`` holds what ``pointers`` points at: alive here until the launch
        function, params, _, pointers = _prepared(dispatcher, list(args))
    except Exception:  # the simulator, another Numba: its own launch, from now on
        _NUMBA_LAUNCH.add(dispatcher)
        return False
    driver.launchKernel(function, *_dims(grid), *_dims(block), 0, stream.ptr, pointers, 0)
    return True


def _prepared(dispatcher: Any, values: list) -> tuple[int, list, dict[int, Any], int]:
    """What a launch through the driver takes: the address of the kernel Numba compiled
    for these values' types, their parameters laid out as Numba lays them out (ctypes
    values: keep them alive until the launch), the scalar slots by argument index (to
    rewrite), and the address of the array of pointers to the parameters (kept alive
    by the parameter list, as its last entry)."""
    import ctypes

    function = _cufunction(dispatcher, values)
    params, slots = _numba_params(values)
    pointers = (ctypes.c_void_p * len(params))(*[ctypes.addressof(p) for p in params])
    return function, params + [pointers], slots, ctypes.addressof(pointers)


def thread_grid(n_rows: int, threads: int = 128) -> tuple[int, int]:
    """Grid for kernels that give each row one thread."""
    return max(1, math.ceil(n_rows / threads)), threads


def _numba_params(values: list) -> tuple[list, dict[int, Any]]:
    """Kernel parameters laid out as Numba passes them: an array as (meminfo, parent, item
    count, item size, data pointer, shape, strides), a scalar as int64 or float64.
    Returns the ctypes values and, by argument index, the scalar slots (to rewrite)."""
    import ctypes

    params: list = []
    slots: dict[int, Any] = {}
    for i, a in enumerate(values):
        if hasattr(a, "shape") and a.shape != ():
            params += [ctypes.c_void_p(0), ctypes.c_void_p(0), ctypes.c_ssize_t(a.size),
                       ctypes.c_ssize_t(a.itemsize), ctypes.c_void_p(a.data.ptr)]
            params += [ctypes.c_ssize_t(extent) for extent in a.shape]
            params += [ctypes.c_ssize_t(stride) for stride in a.strides]
        else:
            slot = _scalar_param(a)
            slots[i] = slot
            params.append(slot)
    return params, slots


def _scalar_param(a: Any) -> Any:
    """A scalar kernel parameter as Numba passes it for the type it gives the value: a
    bool as one byte, a Python int as int64, a Python float as float64, a NumPy scalar
    in its own type."""
    import ctypes

    if isinstance(a, (bool, np.bool_)):
        return ctypes.c_uint8(int(a))
    if isinstance(a, np.floating):
        return ctypes.c_float(a) if a.dtype == np.float32 else ctypes.c_double(a)
    if isinstance(a, float):
        return ctypes.c_double(a)
    if isinstance(a, np.integer):
        return getattr(ctypes, f"c_{a.dtype.name}")(int(a))
    return ctypes.c_int64(a)


def bound_launch(dispatcher: Any, args: list, grid: tuple, block: int, stream: Any) -> Any:
    """A no-argument callable that launches ``dispatcher[grid, block](*args)`` on ``stream``.

    For kernels launched many times on the same CuPy arrays (they must stay
    allocated and in place): :class:`Launcher` with a fixed grid.  Call it with
    the kernel's device current.
    """
    launcher = Launcher(dispatcher, args, block, stream, grid=grid)

    def launch() -> None:
        launcher()
    launch.bound = launcher.fast  # type: ignore[attr-defined]
    launch.why = launcher.why  # type: ignore[attr-defined]
    launch.keep = launcher  # type: ignore[attr-defined]
    return launch


class Launcher:
    """One Numba CUDA kernel launched many times on the same arrays, scalars changing.

    Compiled once for the argument types; its parameters (arrays as Numba
    passes them, scalars as int64 / float64) are laid out once, and
    :meth:`set` rewrites one scalar in place.  Each call is then one
    ``cuLaunchKernel`` through CuPy on ``stream``: no typing of the arguments at each
    call, as Numba's own launch does (what each costs: docs/performance-history.md),
    and no check of the grid for occupancy, which is why our launches never print
    NumbaPerformanceWarning.
    Under the CUDA simulator, or where Numba's compiled kernels are not the
    objects this expects, it falls back to Numba's documented launch and
    ``why`` says what stopped the fast one.

    Parameters
    ----------
    dispatcher : numba CUDA dispatcher
    args : list
        CuPy (or, in the simulator, NumPy) arrays, Python ints (int64) and
        floats (float64), in the kernel's order.
    block : int
        Threads per block.
    stream : cupy.cuda.Stream or None
    grid : tuple of int or None, default None
        A fixed grid; None: one dimension, given at each call.
    """

    def __init__(self, dispatcher: Any, args: list, block: int, stream: Any,
                 grid: tuple | None = None) -> None:
        self.block = block
        self.grid = None if grid is None else tuple(grid) + (1,) * (3 - len(grid))
        self.values = [np.int64(a) if isinstance(a, (bool, int, np.integer)) and not hasattr(a, "shape")
                       else np.float64(a) if isinstance(a, float) else a for a in args]
        self._dispatcher = dispatcher
        self._stream = stream
        self._slots: dict[int, Any] = {}
        self.fast = False
        self.why: str | None = None
        try:
            from cupy.cuda import driver as cupy_driver

            self._function, self._params, self._slots, self._pointers_at = _prepared(
                dispatcher, self.values)
            self._driver = cupy_driver
            self.fast = True
        except Exception as exc:  # the simulator, other Numba versions: the documented launch
            self.why = f"{type(exc).__name__}: {exc}"

    def set(self, index: int, value: float | int) -> None:
        """Change scalar argument ``index`` for the following launches."""
        kind = type(self.values[index])
        self.values[index] = kind(value)
        if self.fast:
            self._slots[index].value = value

    def __call__(self, grid: int | None = None) -> None:
        dims = self.grid if grid is None else (max(1, grid), 1, 1)
        if self.fast:
            self._driver.launchKernel(self._function, *dims, self.block, 1, 1, 0,
                                      self._stream.ptr, self._pointers_at, 0)
            return
        launch(self._dispatcher, dims, self.block, *self.values, stream=self._stream)


_FUNCTIONS: dict[tuple, int] = {}


def _on_device(a: Any) -> bool:
    return hasattr(a, "data") and hasattr(a.data, "ptr")


def _kind(a: Any) -> Any:
    """What Numba's type of a kernel argument depends on: an array's dtype, dimensions and
    contiguity, a scalar's type."""
    if _on_device(a):
        return a.dtype.str, a.ndim, bool(a.flags.c_contiguous), bool(a.flags.f_contiguous)
    return type(a)


def _cufunction(dispatcher: Any, args: list) -> int:
    """The address of ``dispatcher``'s compiled kernel for arguments of these kinds (CuPy
    arrays, NumPy int64 / float64 scalars) on CuPy's current device, typed and loaded once
    per kernel, kinds and device (Numba's typing of a CuPy array is not free, and a fit
    binds dozens of launches)."""
    import cupy

    key = (dispatcher, tuple(_kind(a) for a in args), cupy.cuda.runtime.getDevice())
    function = _FUNCTIONS.get(key)
    if function is None:
        from numba import cuda

        views = [cuda.as_cuda_array(a, sync=False) if _on_device(a) else a for a in args]
        kernel = dispatcher.compile(tuple(dispatcher.typeof_pyval(v) for v in views))
        function = _FUNCTIONS[key] = _address(kernel._codelibrary.get_cufunc().handle)
    return function


def _address(handle: Any) -> int:
    """The integer behind a driver handle (ctypes ``c_void_p`` or a cuda-python object)."""
    value = getattr(handle, "value", None)
    return int(value) if value is not None else int(handle)
