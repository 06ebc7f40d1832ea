"""Tensor maps for Hopper's tensor memory accelerator (TMA), made by the CUDA driver.

A kernel that loads tiles with ``cp.async.bulk.tensor`` names its global array by a
128-byte ``CUtensorMap``: the array's address, shape and row pitch, the box one copy
brings and the swizzle it is written in.  The driver's ``cuTensorMapEncodeTiled``
encodes it (CuPy does not wrap it, so it is called through ``ctypes`` from the
driver library every CUDA process has loaded); the map is then copied to GPU memory,
where the kernel reads it through a pointer (``mma.cuh``'s ``tensormap_acquire``).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

MAP_BYTES = 128
UINT8 = 0                     # CU_TENSOR_MAP_DATA_TYPE_UINT8 (int8 rows are bytes)
SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}   # bytes -> CU_TENSOR_MAP_SWIZZLE_*
L2_256B = 3                   # CU_TENSOR_MAP_L2_PROMOTION_L2_256B
_DRIVER: list[Any] = []


def _driver() -> Any:
    if not _DRIVER:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuTensorMapEncodeTiled
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                       ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                       ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        _DRIVER.append(fn)
    return _DRIVER[0]


def encode_bytes_2d(rows: int, cols: int, pitch: int, address: int, box_rows: int,
                    box_cols: int, swizzle: int) -> np.ndarray:
    """The 128-byte map of a ``rows`` x ``cols`` byte array at ``address`` (``pitch``
    bytes a row), copied in boxes of ``box_rows`` x ``box_cols`` bytes written in the
    ``swizzle``-byte pattern; reads past the array's bounds bring zeros."""
    if pitch % 16 or address % 16:
        raise ValueError("a tensor map needs rows and an address on 16-byte boundaries")
    buf = np.zeros(MAP_BYTES + 64, np.uint8)          # CUtensorMap is 64-byte aligned
    start = (-buf.ctypes.data) % 64
    out = buf[start:start + MAP_BYTES]
    dims = (ctypes.c_uint64 * 2)(cols, rows)           # innermost first
    strides = (ctypes.c_uint64 * 1)(pitch)
    box = (ctypes.c_uint32 * 2)(box_cols, box_rows)
    step = (ctypes.c_uint32 * 2)(1, 1)
    rc = _driver()(out.ctypes.data, UINT8, 2, address, dims, strides, box, step,
                   0, SWIZZLE[swizzle], L2_256B, 0)
    if rc != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {rc}) for {rows} x {cols} "
                           f"bytes in boxes of {box_rows} x {box_cols}")
    return out.copy()


def rows_2d(array: Any, box_rows: int, box_cols: int, swizzle: int) -> Any:
    """The map of a C-contiguous 2-D CuPy array of bytes (int8 or uint8), in GPU memory
    (a 128-byte ``uint8`` array the kernel takes as a pointer)."""
    import cupy

    if array.ndim != 2 or array.itemsize != 1 or not array.flags.c_contiguous:
        raise ValueError("a byte tensor map needs a C-contiguous 2-D array of bytes")
    rows, cols = (int(n) for n in array.shape)
    host = encode_bytes_2d(rows, cols, cols, int(array.data.ptr), box_rows, box_cols, swizzle)
    return cupy.asarray(host)
