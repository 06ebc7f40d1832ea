"""cuBLAS products bound once and called through ctypes: graph-capturable, on any stream.

CuPy's own cuBLAS wrappers refuse to run while a stream is being captured
into a CUDA graph and do not reach ``cublasGemmEx``'s int8 and bf16
products; these calls go to the library CuPy loaded, on handles of its own,
with host-side scalars.  Each ``bound_*`` function returns a
no-argument callable that repeats one product on the same buffers.
"""

from __future__ import annotations

from typing import Any

import threading

import numpy as np

# cudaDataType_t and cublasComputeType_t values (cuBLAS through ctypes)
CUDA_R_32F, CUDA_R_16F, CUDA_R_8I, CUDA_R_32I, CUDA_R_16BF = 0, 2, 3, 10, 14
CUBLAS_COMPUTE = {"int8": 72, "bf16": 68, "fp16": 68, "tf32": 77, "fp32": 69, "fp32 sums": 68}


def cublas_library() -> Any:
    """cuBLAS through ctypes (its calls can be captured in a CUDA graph, which CuPy's own
    wrappers refuse, and it reaches ``cublasGemmEx``'s int8 and bf16 products).

    The copy CuPy loaded; where the process holds two (RAPIDS brings its own), the
    first by path.  Its calls take handles made by that same copy (:func:`handle`),
    never CuPy's: a handle of one copy passed to the other crashes the process."""
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
        lib.cublasCreate_v2.restype = ctypes.c_int
        lib.cublasCreate_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        _CUBLAS = lib
    return _CUBLAS


_CUBLAS: Any = None
_HANDLES = threading.local()


def handle() -> int:
    """A cuBLAS handle of :func:`cublas_library`'s copy for the current device and thread
    (made once; a handle serves one thread at a time, as CuPy's do)."""
    import ctypes

    import cupy

    made = getattr(_HANDLES, "by_device", None)
    if made is None:
        made = _HANDLES.by_device = {}
    device = cupy.cuda.runtime.getDevice()
    if device not in made:
        value = ctypes.c_void_p()
        status = cublas_library().cublasCreate_v2(ctypes.byref(value))
        if status:
            raise RuntimeError(f"cublasCreate returned status {status} on GPU {device}")
        made[device] = value.value
    return made[device]


def bound_gemm(out: Any, A: Any, B: Any, stream: Any, *, trans_a: bool = False,
               operands: str = "fp32", batches: int = 1) -> Any:
    """A no-argument callable computing ``out = A @ B`` (``A.T @ B`` with ``trans_a``) on ``stream``.

    C-contiguous CuPy arrays, ``out`` float32.  ``operands="fp32"``: float32
    ``A`` and ``B``, one ``cublasGemmEx`` in float32 per use (no TF32).
    ``operands="bf16"``: ``A`` and ``B`` hold bfloat16 bit patterns (uint16),
    one ``cublasGemmStridedBatchedEx`` on tensor cores with float32
    accumulation; with ``batches`` > 1, ``A`` and ``B`` are that many equal
    blocks of rows and ``out`` (batches x M x N) gets one product per block
    (sums over fewer rows each: see ``ShardObjective``).  Call it with the
    arrays' device current.
    """
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
        ours = handle()

        def gemm_ex() -> None:
            status = (lib.cublasSetStream_v2(ours, stream.ptr)
                      or lib.cublasSetPointerMode_v2(ours, 0)
                      or lib.cublasGemmStridedBatchedEx(
                          ours, 0, op_a, N, M, K, one, b_ptr, CUDA_R_16BF, N, K * N,
                          a_ptr, CUDA_R_16BF, lda, K * M, zero, out_ptr, CUDA_R_32F, N, M * N,
                          batches, CUBLAS_COMPUTE["bf16"], -1))
            if status:
                raise RuntimeError(f"cuBLAS returned status {status} for a bf16 "
                                   f"{M}x{N}x{K} product")
        gemm_ex.keep = (scalars, A, B, out)  # type: ignore[attr-defined]
        return gemm_ex
    # float32: cublasGemmEx on a handle of ours, as the other operands are.  CuPy's cuBLAS
    # wrapper leaves work a stream capture cannot join ("unjoined work"), which cost the
    # float32 evaluation its place in the L-BFGS iteration's CUDA graph.
    lib = cublas_library()
    ours = handle()

    def gemm() -> None:
        status = (lib.cublasSetStream_v2(ours, stream.ptr)
                  or lib.cublasSetPointerMode_v2(ours, 0)
                  or lib.cublasGemmEx(ours, 0, op_a, N, M, K, one, b_ptr, CUDA_R_32F, N,
                                      a_ptr, CUDA_R_32F, lda, zero, out_ptr, CUDA_R_32F, N,
                                      CUBLAS_COMPUTE["fp32 sums"], -1))
        if status:
            raise RuntimeError(f"cuBLAS returned status {status} for a float32 {M}x{N}x{K} "
                               "product")
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

    m, n, ld = int(A.shape[0]), int(B.shape[0]), int(A.shape[1])
    if B.shape[1] != ld or batches * K > ld or out.size < batches * n * m:
        raise ValueError(f"int8 product shapes do not fit: A {A.shape}, B {B.shape}, "
                         f"{batches} blocks of {K}, out {out.shape}")
    lib = cublas_library()
    ours = handle()
    scalars = np.array([1, 0], dtype=np.int32)
    one, zero = scalars.ctypes.data, scalars.ctypes.data + 4
    a_ptr, b_ptr, out_ptr = A.data.ptr, B.data.ptr, out.data.ptr

    def gemm_ex() -> None:
        # Row-major out (n x m) is column-major m x n: op(A) = A^T (A column-major L x m),
        # B column-major L x n; block b starts b K values along L.
        status = (lib.cublasSetStream_v2(ours, stream.ptr)
                  or lib.cublasSetPointerMode_v2(ours, 0)
                  or lib.cublasGemmStridedBatchedEx(
                      ours, 1, 0, m, n, K, one, a_ptr, CUDA_R_8I, ld, K, b_ptr, CUDA_R_8I,
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
