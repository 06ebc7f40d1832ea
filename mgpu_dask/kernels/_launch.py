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


def capture_allowed() -> bool:
    """Whether work may be captured as a CUDA graph in this process (KNN's tile loop,
    the device L-BFGS's iteration).

    Not where UCX carries Dask's messages (``distributed-ucxx`` loaded, a
    ``--protocol ucx`` worker): its communication threads make CUDA calls of
    their own, and those fail while a stream of the process is capturing
    (cudaErrorStreamCaptureUnsupported, seen on 2x H200), which breaks the
    transfer.  The work is then launched op by op.
    """
    return not any(name in sys.modules for name in ("distributed_ucxx", "ucxx", "ucp"))


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
    """
    import warnings

    with warnings.catch_warnings():  # Numba warns when the launch is configured, not run
        warnings.filterwarnings("ignore", message=".*will likely result in GPU under-utilization")
        configured = dispatcher[grid, block]
        if stream is None and any(on_gpu(a) for a in args):
            import cupy

            stream = cupy.cuda.get_current_stream()
        if stream is not None and stream.ptr:
            from numba import cuda

            configured = dispatcher[grid, block, cuda.external_stream(stream.ptr)]
        configured(*args)


def thread_grid(n_rows: int, threads: int = 128) -> tuple[int, int]:
    """Grid for kernels that give each row one thread."""
    return max(1, math.ceil(n_rows / threads)), threads


def bound_launch(dispatcher: Any, args: list, grid: tuple, block: int, stream: Any) -> Any:
    """A no-argument callable that launches ``dispatcher[grid, block](*args)`` on ``stream``.

    For kernels launched many times on the same CuPy arrays (they must stay
    allocated and in place).  The Numba kernel is compiled once and its
    parameters are laid out once, as Numba passes an array (meminfo, parent,
    item count, item size, data pointer, shape, strides); each call is then
    one ``cuLaunchKernel`` through CuPy on the CuPy ``stream``: a few
    microseconds of host time instead of Numba's per-call argument handling,
    and no doubt about the stream.  Where Numba's compiled-kernel objects are
    not the ones this expects, the kernel goes through Numba's ordinary launch
    on ``stream``.  Call it with the kernel's device current.
    """
    import ctypes

    from numba import cuda

    dims = tuple(grid) + (1,) * (3 - len(grid)) + (block, 1, 1)
    try:
        from cupy.cuda import driver as cupy_driver

        function = _cufunction(dispatcher, args)
        params: list = []
        for a in args:
            params += [ctypes.c_void_p(0), ctypes.c_void_p(0), ctypes.c_ssize_t(a.size),
                       ctypes.c_ssize_t(a.itemsize), ctypes.c_void_p(a.data.ptr)]
            params += [ctypes.c_ssize_t(extent) for extent in a.shape]
            params += [ctypes.c_ssize_t(stride) for stride in a.strides]
        pointers = (ctypes.c_void_p * len(params))(*[ctypes.addressof(p) for p in params])
        pointers_at = ctypes.addressof(pointers)

        def launch() -> None:
            cupy_driver.launchKernel(function, *dims, 0, stream.ptr, pointers_at, 0)
        launch.bound = True  # type: ignore[attr-defined]
        launch.keep = (args, params, pointers)  # type: ignore[attr-defined]
    except Exception as exc:  # other Numba versions: the documented launch
        views = [cuda.as_cuda_array(a, sync=False) for a in args]
        configured = dispatcher[grid, block, cuda.external_stream(stream.ptr)]

        def launch() -> None:
            configured(*views)
        launch.bound = False  # type: ignore[attr-defined]
        launch.why = f"{type(exc).__name__}: {exc}"  # type: ignore[attr-defined]
        launch.keep = views  # type: ignore[attr-defined]
    return launch


class Launcher:
    """One Numba CUDA kernel launched many times on the same arrays, scalars changing.

    Compiled once for the argument types; its parameters (arrays as Numba
    passes them, scalars as int64 / float64) are laid out once, and
    :meth:`set` rewrites one scalar in place.  Each call is then one
    ``cuLaunchKernel`` through CuPy on ``stream``: a few microseconds of host
    time, where Numba's own launch costs tens (and checks the grid for
    occupancy, which is why our launches never print NumbaPerformanceWarning).
    Under the CUDA simulator, or where Numba's compiled kernels are not the
    objects this expects, it falls back to Numba's documented launch.

    Parameters
    ----------
    dispatcher : numba CUDA dispatcher
    args : list
        CuPy (or, in the simulator, NumPy) arrays, Python ints (int64) and
        floats (float64), in the kernel's order.
    block : int
        Threads per block.
    stream : cupy.cuda.Stream or None
    """

    def __init__(self, dispatcher: Any, args: list, block: int, stream: Any) -> None:
        import ctypes

        self.block = block
        self.values = [np.int64(a) if isinstance(a, (bool, int, np.integer)) and not hasattr(a, "shape")
                       else np.float64(a) if isinstance(a, float) else a for a in args]
        self._dispatcher = dispatcher
        self._stream = stream
        self._slots: dict[int, Any] = {}
        self._fast = False
        try:
            from cupy.cuda import driver as cupy_driver

            self._function = _cufunction(dispatcher, self.values)
            params: list = []
            for i, a in enumerate(self.values):
                if hasattr(a, "shape") and a.shape != ():
                    params += [ctypes.c_void_p(0), ctypes.c_void_p(0), ctypes.c_ssize_t(a.size),
                               ctypes.c_ssize_t(a.itemsize), ctypes.c_void_p(a.data.ptr)]
                    params += [ctypes.c_ssize_t(extent) for extent in a.shape]
                    params += [ctypes.c_ssize_t(stride) for stride in a.strides]
                else:
                    slot = ctypes.c_double(a) if isinstance(a, np.floating) else ctypes.c_int64(a)
                    self._slots[i] = slot
                    params.append(slot)
            self._params = params
            self._pointers = (ctypes.c_void_p * len(params))(
                *[ctypes.addressof(p) for p in params])
            self._driver = cupy_driver
            self._fast = True
        except Exception as exc:  # the simulator, other Numba versions: the documented launch
            self.why = f"{type(exc).__name__}: {exc}"

    def set(self, index: int, value: float | int) -> None:
        """Change scalar argument ``index`` for the following launches."""
        kind = type(self.values[index])
        self.values[index] = kind(value)
        if self._fast:
            self._slots[index].value = value

    def __call__(self, grid: int) -> None:
        if self._fast:
            import ctypes

            self._driver.launchKernel(self._function, max(1, grid), 1, 1, self.block, 1, 1, 0,
                                      self._stream.ptr, ctypes.addressof(self._pointers), 0)
            return
        launch(self._dispatcher, max(1, grid), self.block, *self.values, stream=self._stream)


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
    per kernel, kinds and device: Numba types a CuPy array in ~0.1 ms, which made a 2-GPU
    fit's set-up 8.5 ms of typing (round 9)."""
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


# cudaDataType_t and cublasComputeType_t values (cuBLAS through ctypes)
CUDA_R_32F, CUDA_R_8I, CUDA_R_32I, CUDA_R_16BF = 0, 3, 10, 14
CUBLAS_COMPUTE = {"int8": 72, "bf16": 68, "tf32": 77, "fp32": 69}


def cublas_library() -> Any:
    """cuBLAS as loaded by CuPy, through ctypes (its calls can be captured in a CUDA graph,
    which CuPy's own wrappers refuse, and it reaches ``cublasGemmEx``'s bf16 products)."""
    global _CUBLAS
    if _CUBLAS is None:
        import ctypes

        import cupy

        cupy.cuda.device.get_cublas_handle()  # makes CuPy load cuBLAS
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libcublas.so" in line}
        lib = ctypes.CDLL(sorted(paths)[0])
        lib.cublasGemmEx.restype = ctypes.c_int
        lib.cublasGemmEx.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                     ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                     ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                     ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.cublasGemmStridedBatchedEx.restype = ctypes.c_int
        lib.cublasGemmStridedBatchedEx.argtypes = [
            ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
            ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
            ctypes.c_longlong, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_longlong,
            ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_longlong,
            ctypes.c_int, ctypes.c_int, ctypes.c_int]
        for name in ("cublasSetStream_v2", "cublasSetPointerMode_v2"):
            getattr(lib, name).restype = ctypes.c_int
            getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        _CUBLAS = lib
    return _CUBLAS


_CUBLAS: Any = None


def bound_gemm(out: Any, A: Any, B: Any, stream: Any, *, trans_a: bool = False,
               operands: str = "fp32", batches: int = 1) -> Any:
    """A no-argument callable computing ``out = A @ B`` (``A.T @ B`` with ``trans_a``) on ``stream``.

    C-contiguous CuPy arrays, ``out`` float32.  ``operands="fp32"``: float32
    ``A`` and ``B``, one cuBLAS SGEMM per use without CuPy's dispatch (CuPy's
    ``matmul`` where its cuBLAS bindings are not available).
    ``operands="bf16"``: ``A`` and ``B`` hold bfloat16 bit patterns (uint16),
    one ``cublasGemmStridedBatchedEx`` on tensor cores with float32
    accumulation; with ``batches`` > 1, ``A`` and ``B`` are that many equal
    blocks of rows and ``out`` (batches x M x N) gets one product per block
    (sums over fewer rows each: see ``ShardObjective``).  Call it with the
    arrays' device current.
    """
    import cupy

    if batches > 1 and operands != "bf16":
        raise ValueError("batches > 1 takes bf16 operands")
    M, N = out.shape[-2:]
    K = B.shape[0] // batches
    op_a = 1 if trans_a else 0  # CUBLAS_OP_T / CUBLAS_OP_N
    lda = M if trans_a else K
    scalars = np.array([1.0, 0.0], dtype=np.float32)
    one, zero = scalars.ctypes.data, scalars.ctypes.data + 4
    a_ptr, b_ptr, out_ptr = A.data.ptr, B.data.ptr, out.data.ptr
    # Row-major out (M x N) = op(A) @ B is column-major out^T = B^T op(A)^T:
    # the same buffers, cuBLAS m=N, n=M, k=K.
    if operands == "bf16":
        lib = cublas_library()
        handle = cupy.cuda.device.get_cublas_handle()

        def gemm_ex() -> None:
            status = (lib.cublasSetStream_v2(handle, stream.ptr)
                      or lib.cublasSetPointerMode_v2(handle, 0)
                      or lib.cublasGemmStridedBatchedEx(
                          handle, 0, op_a, N, M, K, one, b_ptr, CUDA_R_16BF, N, K * N,
                          a_ptr, CUDA_R_16BF, lda, K * M, zero, out_ptr, CUDA_R_32F, N, M * N,
                          batches, CUBLAS_COMPUTE["bf16"], -1))
            if status:
                raise RuntimeError(f"cuBLAS returned status {status} for a bf16 "
                                   f"{M}x{N}x{K} product")
        gemm_ex.keep = (scalars, A, B, out)  # type: ignore[attr-defined]
        return gemm_ex
    try:
        from cupy_backends.cuda.libs import cublas
    except ImportError:  # pragma: no cover - other CuPy layouts
        def gemm() -> None:
            with stream:
                cupy.matmul(A.T if trans_a else A, B, out=out)
        return gemm

    def gemm() -> None:
        with stream:
            cublas.sgemm(_cublas_on(stream), cublas.CUBLAS_OP_N, op_a, N, M, K, one, b_ptr, N,
                         a_ptr, lda, zero, out_ptr, N)
    gemm.keep = (scalars, A, B, out)  # type: ignore[attr-defined]
    return gemm


def bound_int8_gemm(out: Any, A: Any, B: Any, K: int, stream: Any, *, batches: int = 1) -> Any:
    """A no-argument callable: ``out[b] = B[:, bK:(b+1)K] @ A[:, bK:(b+1)K].T`` for each of
    ``batches`` blocks of ``K`` columns, on int8 tensor cores with exact int32 sums.

    ``A`` (m x L) and ``B`` (n x L) are C-contiguous int8 CuPy matrices whose
    rows run along the summed dimension (the "TN" layout int8 tensor cores
    take), ``out`` an int32 array of ``batches`` x n x m values; L, m and n
    multiples of 16.  One ``cublasGemmStridedBatchedEx`` through ctypes on
    ``stream``.  Call it with the arrays' device current.
    """
    import cupy

    m, n, ld = int(A.shape[0]), int(B.shape[0]), int(A.shape[1])
    if B.shape[1] != ld or batches * K > ld or out.size < batches * n * m:
        raise ValueError(f"int8 product shapes do not fit: A {A.shape}, B {B.shape}, "
                         f"{batches} blocks of {K}, out {out.shape}")
    lib = cublas_library()
    handle = cupy.cuda.device.get_cublas_handle()
    scalars = np.array([1, 0], dtype=np.int32)
    one, zero = scalars.ctypes.data, scalars.ctypes.data + 4
    a_ptr, b_ptr, out_ptr = A.data.ptr, B.data.ptr, out.data.ptr

    def gemm_ex() -> None:
        # Row-major out (n x m) is column-major m x n: op(A) = A^T (A column-major L x m),
        # B column-major L x n; block b starts b K values along L.
        status = (lib.cublasSetStream_v2(handle, stream.ptr)
                  or lib.cublasSetPointerMode_v2(handle, 0)
                  or lib.cublasGemmStridedBatchedEx(
                      handle, 1, 0, m, n, K, one, a_ptr, CUDA_R_8I, ld, K, b_ptr, CUDA_R_8I,
                      ld, K, zero, out_ptr, CUDA_R_32I, m, n * m, batches,
                      CUBLAS_COMPUTE["int8"], -1))
        if status:
            raise RuntimeError(f"cuBLAS returned status {status} for an int8 "
                               f"{n}x{m}x{K} product ({batches} blocks)")
    gemm_ex.keep = (scalars, A, B, out)  # type: ignore[attr-defined]
    return gemm_ex


def bound_row_sum(out: Any, P: Any, ones: Any, stream: Any) -> Any:
    """A no-argument callable: ``out = P.sum(axis=0)`` for a C-contiguous float32 CuPy
    matrix ``P`` (B x N), as one cuBLAS SGEMV with ``ones`` (B float32 ones) on
    ``stream``: float32 sums rounded to nearest, unlike a tensor-core product's."""
    from cupy_backends.cuda.libs import cublas

    B, N = P.shape
    scalars = np.array([1.0, 0.0], dtype=np.float32)
    one, zero = scalars.ctypes.data, scalars.ctypes.data + 4

    def gemv() -> None:
        with stream:
            # Row-major P (B x N) is column-major N x B: out = P_col @ ones.
            cublas.sgemv(_cublas_on(stream), cublas.CUBLAS_OP_N, N, B, one, P.data.ptr, N,
                         ones.data.ptr, 1, zero, out.data.ptr, 1)
    gemv.keep = (scalars, P, ones, out)  # type: ignore[attr-defined]
    return gemv


def _cublas_on(stream: Any) -> int:
    """The current device's cuBLAS handle (CuPy's), set to ``stream`` and host scalars; call
    it inside ``with stream`` (CuPy's cuBLAS wrappers use the current stream)."""
    import cupy
    from cupy_backends.cuda.libs import cublas

    handle = cupy.cuda.device.get_cublas_handle()
    cublas.setStream(handle, stream.ptr)
    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
    return handle
