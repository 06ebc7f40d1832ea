"""The tile product of the KNN distance: ``G = Q_tile . T_tile^T`` in a precision.

On a GPU a tile is one ``cublasGemmEx`` call (tensor cores for int8, bf16 and
tf32; pedantic float32 for fp32) into a reused buffer, addressed by pointer and
called through ctypes so that a whole tile loop can be captured in a CUDA
graph.  On a CPU NumPy's float32 product of operands rounded as the GPU would
round them.  ``method="direct"`` runs our difference kernel instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..cublas import (CUBLAS_COMPUTE, CUDA_R_8I, CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F,
                      CUDA_R_32I, cublas_library, handle)
from ..launch import array_module, on_gpu
from ..precision import Precision
from .distances import sqdist
from .operands import TrainBlock


class TileProduct:
    """``G = Q[q0:q0+nq] . T[t0:t0+nt]^T`` into a flat buffer (row stride ``nt``).

    GPU: one ``cublasGemmEx`` per tile on the current CuPy stream, operands
    addressed by pointer (no slicing), tensor cores for int8 / bf16 / tf32 and
    pedantic float32 (no TF32) for fp32, called through ctypes so that a
    whole tile loop can be captured in a CUDA graph.  CPU: NumPy's float32
    product.  ``columns``: the product over the operands' first ``columns``
    columns only (the first part of a split float16 operand; None: all).
    """

    def __init__(self, q_operand: Any, train: TrainBlock, capacity: int,
                 columns: int | None = None) -> None:
        self.q, self.t = q_operand, train.operand
        self.columns = int(columns or self.t.shape[1])
        self.gpu = on_gpu(self.t)
        self.direct = train.method == "direct"
        xp = array_module(self.t)
        int_out = self.gpu and train.precision is Precision.INT8 and not self.direct
        self.out = xp.empty(capacity, dtype=np.int32 if int_out else np.float32)
        if self.gpu and not self.direct:
            self._bind_cublas(train.precision)

    def _bind_cublas(self, precision: Precision) -> None:

        self._lib = cublas_library()
        self._handle = handle()
        integer = precision is Precision.INT8
        in_type = {Precision.INT8: CUDA_R_8I, Precision.BF16: CUDA_R_16BF,
                   Precision.FP16: CUDA_R_16F}.get(precision, CUDA_R_32F)
        self._types = (in_type, CUDA_R_32I if integer else CUDA_R_32F, CUBLAS_COMPUTE[precision])
        scalars = np.array([1, 0], np.int32 if integer else np.float32)
        self._scalars = scalars
        self._one, self._zero = scalars.ctypes.data, scalars.ctypes.data + 4
        self._ld = int(self.t.shape[1])
        self._item = int(self.t.itemsize)

    def __call__(self, q0: int, nq: int, t0: int, nt: int) -> Any:
        if self.direct:
            sqdist(self.q[q0:q0 + nq], self.t[t0:t0 + nt], out=self.out[:nq * nt].reshape(nq, nt))
            return self.out
        if not self.gpu:
            c = self.columns
            np.matmul(self.q[q0:q0 + nq, :c], self.t[t0:t0 + nt, :c].T,
                      out=self.out[:nq * nt].reshape(nq, nt))
            return self.out
        import cupy

        in_type, out_type, compute = self._types
        ld, k, item, lib = self._ld, self.columns, self._item, self._lib
        # Host pointer mode each time: other code may have left the handle in device mode.
        status = (lib.cublasSetStream_v2(self._handle, cupy.cuda.get_current_stream().ptr)
                  or lib.cublasSetPointerMode_v2(self._handle, 0))
        # Row-major G (nq x nt) is column-major G^T = T_tile . Q_tile^T: A = T (op T), B = Q.
        status = status or lib.cublasGemmEx(
            self._handle, 1, 0, nt, nq, k, self._one, self.t.data.ptr + t0 * ld * item, in_type, ld,
            self.q.data.ptr + q0 * ld * item, in_type, ld, self._zero, self.out.data.ptr,
            out_type, nt, compute, -1)
        if status:
            raise RuntimeError(f"cuBLAS returned status {status} for a {nq}x{nt}x{k} "
                               f"{self._types} product")
        return self.out
