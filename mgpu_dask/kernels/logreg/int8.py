"""The int8 products of :class:`~mgpu_dask.kernels.logreg.objective.ShardObjective`:
both products of an evaluation on int8 tensor cores, exact, for rows of 8-bit levels.

Rows of levels 0..255 times one step (pixels / 255) are, shifted by 128, int8
values ``v`` exactly; the coefficients and residuals go in as
``cuda_int8.I8_TERMS`` int8 terms each and the int32 sums of the products
are exact, combined in float64 (:mod:`.cuda_int8`).  X is read at one byte per value and the gradient is
closer to float64's than float32 products give; the per-block sums are added
in a fixed order, so an evaluation gives the same bits every time.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np

from ..cublas import bound_int8_gemm
from ..launch import array_module, bound_launch, launch, thread_grid
from . import fused, onepass
from .levels import Levels, converted_levels, level_steps

ROWS_OUT_FROM = 1 << 20
"""Unfused only: shards of more rows than this take cuBLAS's forward product as
(rows x width), the shape its int8 kernels read large shards faster in, while
smaller ones take (width x rows), which the softmax kernel reads coalesced
(what each costs: docs/performance-history.md)."""
FUSED = True
"""Take the forward product and the softmax in one kernel where :func:`.fused.usable`
(False: cuBLAS's product, then the softmax kernel, as tests compare)."""
ONE_PASS = True
"""Take the whole evaluation in one pass over the rows where :func:`.onepass.usable`
and the shard has at least ONE_PASS_FROM rows (False: :mod:`.fused` or cuBLAS, then
cuBLAS's gradient product, as tests compare)."""
ONE_PASS_FROM = 1 << 20
"""Shards of fewer rows take :mod:`.fused` and cuBLAS's gradient product, which are
faster there (what each costs: docs/performance-history.md)."""
GRADIENT_ROWS = 16384
"""``v^T R`` is one int8 tensor-core product per block of this many
rows (int32 sums are exact up to ``cuda_int8.I8_MAX_K`` rows; the blocks are
added in int64, so the block size is about speed only): see :func:`gradient_rows`."""
SMALL_SHARD_ROWS = 1 << 17
"""Shards of at most this many rows take blocks of SMALL_GRADIENT_ROWS."""
SMALL_GRADIENT_ROWS = 8192


def gradient_rows(n: int) -> int:
    """The rows per block of ``v^T R`` for a shard of ``n`` rows.  Each block's product
    has few outputs (padded features x int8 terms), so cuBLAS runs it as a few thread
    blocks that each loop over the block's rows: a shard of few blocks leaves most of
    the GPU idle while they loop.  Shards of at most SMALL_SHARD_ROWS rows take
    SMALL_GRADIENT_ROWS (more thread blocks, shorter loops), larger ones GRADIENT_ROWS
    (fewer blocks for ``combine_i8`` to add).  The sums are the same bits either way."""
    return GRADIENT_ROWS if n > SMALL_SHARD_ROWS else min(GRADIENT_ROWS, SMALL_GRADIENT_ROWS)


def term_columns(k: int) -> int:
    """Columns of the int8 terms: I8_TERMS per class, padded to a multiple of 16."""
    from . import cuda_int8 as C

    return -(-C.I8_TERMS * k // 16) * 16


def runs_fused(k: int, device: Any) -> bool:
    """Whether an evaluation of ``k`` classes on ``device`` (a ``cupy.cuda.Device``) takes
    its forward product and softmax in one kernel (:mod:`.fused`)."""
    cc = str(device.compute_capability)  # "90", "100"
    return FUSED and fused.usable(k, term_columns(k), (int(cc[:-1]), int(cc[-1])))


@contextlib.contextmanager
def one_pass_on_any_rows() -> Iterator[None]:
    """Within it, shards of any size take the one-pass evaluation where it is usable: the
    warm-up compiles its kernels on a few rows, so that a first fit of a million rows
    compiles nothing.  Safe beside other evaluations: the one pass gives the same bits."""
    global ONE_PASS_FROM
    before, ONE_PASS_FROM = ONE_PASS_FROM, 0
    try:
        yield
    finally:
        ONE_PASS_FROM = before


def runs_one_pass(k: int, n: int, d_pad: int, device: Any) -> bool:
    """Whether an evaluation of ``k`` classes over ``n`` rows of ``d_pad`` bytes on
    ``device`` takes the forward product, the softmax and the gradient's product in one
    pass over the rows (:mod:`.onepass`)."""
    cc = str(device.compute_capability)
    return ONE_PASS and n >= ONE_PASS_FROM and onepass.usable(
        k, term_columns(k), d_pad, (int(cc[:-1]), int(cc[-1])), onepass.shared_optin(device.id))


def levels(X: Any, allocate: Any = None, scale: float | None = None) -> Levels | None:
    """The CuPy rows ``X * scale`` (n x d) as int8 levels on their GPU (``X * scale = step
    * (v + 128)``), ``v`` (n_pad x d_pad), done when this returns; None where X is not
    8-bit levels in [0, 255], d is too long for exact int32 sums, or the GPU has no int8
    tensor cores (compute capability < 7.5).  uint8 rows are their own levels (step
    ``scale``); float rows are checked.  Rows are padded with zeros to whole blocks of
    :func:`gradient_rows` (or of 16 when there is one block), features to 16.  The transpose
    ``vt`` is not made here (``Levels.vt`` is None): the evaluation that reads it makes
    it (:func:`transposed`), and the one-pass evaluation never does.
    ``allocate(shape, dtype)`` makes ``v`` (default ``cupy.empty``; a peer's export
    gives ``peer_views.dedicated``)."""
    import cupy

    from . import cuda_int8 as C

    n, d = X.shape
    device = cupy.cuda.Device(X.device.id)
    if (n == 0 or d > C.I8_MAX_K or int(device.compute_capability) < 75
            or GRADIENT_ROWS > C.I8_MAX_K):
        return None
    allocate = allocate or cupy.empty
    with device:
        stream = cupy.cuda.Stream(non_blocking=True)
        stream.wait_event(cupy.cuda.get_current_stream().record())  # X may be arriving
        with stream:
            to_levels, step = level_steps(X, scale)
            rows, cols = padded_shape(n, d)
            v = allocate((rows, cols), np.int8)
            v[n:].fill(0)  # the padding only: every other value is written next
            if cols > d:
                v[:n, d:].fill(0)
            if not _shifted_bytes(X, v[:n]) and not converted_levels(
                    device, C.to_int8_levels, X, to_levels, v[:n, :d]):
                return None
        stream.synchronize()
    return Levels(v, None, step, n, d)


def transposed(v: Any, stream: Any = None) -> Any:
    """``v.T`` of int8 levels (its sides multiples of 16), a new array on v's GPU, queued
    on ``stream`` (default: the current one): what the gradient's cuBLAS product reads."""
    import cupy

    from . import cuda_int8 as C

    rows, cols = v.shape
    with cupy.cuda.Device(v.device.id):
        vt = cupy.empty((cols, rows), np.int8)
        launch(C.transpose_bytes, *C.transpose_grid(rows, cols), v.view(np.uint32),
               vt.view(np.uint32), stream=stream or cupy.cuda.get_current_stream())
    return vt


def padded_shape(n: int, d: int) -> tuple[int, int]:
    """The shape of ``v`` for ``n`` rows of ``d`` features: rows padded to whole blocks of
    :func:`gradient_rows` (to 16 where there is one block), features to 16."""
    block = gradient_rows(n)
    block = block if n > block else -(-n // 16) * 16
    return -(-n // block) * block, -(-d // 16) * 16


def joined(parts: list[Levels]) -> Levels | None:
    """The rows of several :class:`Levels`, in order, as one (new arrays on the current
    device, in the parts' array module): what shards that share one GPU are evaluated
    as, one evaluation instead of one per shard.  The same values as ``levels`` of the
    rows joined first.  None where the parts' steps or widths differ (rows scaled
    differently are not levels of one step)."""
    first = parts[0]
    if any(p.step != first.step or p.d != first.d for p in parts):
        return None
    xp = array_module(first.v)
    n = sum(p.n for p in parts)
    rows, cols = padded_shape(n, first.d)
    v = xp.empty((rows, cols), np.int8)
    v[n:] = 0
    at = 0
    for p in parts:
        v[at:at + p.n] = p.v[:p.n]
        at += p.n
    return Levels(v, None, first.step, n, first.d)


def _shifted_bytes(X: Any, out: Any) -> bool:
    """``out[:, :d] = X - 128`` as int8 for contiguous uint8 rows whose width is a multiple of
    4 and ``out``'s (rows of ``out`` are whole, so both are one run of bytes): flipping the
    top bit of four bytes at a time, a plain copy's speed.  False (nothing done) otherwise:
    the conversion kernel then does it."""
    import cupy

    if (X.dtype != np.uint8 or not X.flags.c_contiguous or X.shape[1] != out.shape[1]
            or X.size % 4 or X.data.ptr % 4 or out.data.ptr % 4
            or not out.flags.c_contiguous):
        return False
    cupy.bitwise_xor(X.reshape(-1).view(np.uint32), np.uint32(0x80808080),
                     out=out.reshape(-1).view(np.uint32))
    return True


def prepare(obj: Any, n: int, d: int) -> tuple[Any, Any, float] | None:
    """``levels`` of the shard's rows as ``(v, vt, step)`` for ``ops`` (``vt`` None: ``ops``
    makes it where it is read); None where they are not levels (see ``levels``)."""
    made = levels(obj.X, scale=obj.scale)
    return None if made is None else (made.v, made.vt, made.step)


def ops(obj: Any, n: int, d: int, v: Any, vt: Any, step: float) -> list:
    """Split coefficients, ``w8 @ v^T`` (int8 tensor cores), softmax with the residual
    split and per-block sums (added in a fixed order: the same bits every time) -- the
    two in one kernel where :mod:`.fused` runs --, ``vt @ resid8^T`` per block of rows,
    the blocks and terms added (int64, float64) and scaled: see :mod:`.cuda_int8`.  Where
    :func:`runs_one_pass`, one kernel (:mod:`.onepass`) takes the products and the
    softmax from one read of the rows (``vt`` unread); elsewhere a ``vt`` of None is made
    here (:func:`transposed`) and kept with the objective."""
    import cupy

    from . import cuda_int8 as C

    k = obj.k
    rows, cols = v.shape
    width = term_columns(k)
    block = min(rows, gradient_rows(n))  # padded_shape made rows whole blocks of it
    blocks = rows // block
    obj.levels, obj.levels_t = v, vt
    obj._step = cupy.asarray([step], dtype=np.float64)
    obj.w8 = cupy.zeros((width, cols), dtype=np.int8)
    obj.colinfo = cupy.zeros(2 * k, dtype=np.float64)
    row_blocks = thread_grid(n, C.THREADS)[0]
    obj.bpart = cupy.empty((row_blocks, k + 1), dtype=np.float64)
    split = bound_launch(C.split_coef_i8, [obj.params, obj._step, obj.w8, obj.colinfo],
                         (k,), C.THREADS, obj.stream)
    sums = bound_launch(C.sum_block_parts, [obj.bpart, obj.sums], (k + 1,), C.THREADS,
                        obj.stream)
    obj.sums_written = True  # sum_block_parts writes all k + 1 of them: nothing to zero
    obj.one_pass = runs_one_pass(k, n, cols, obj.device)
    obj.fused = obj.one_pass or runs_fused(k, obj.device)
    if obj.one_pass:  # forward product, softmax and gradient product in one kernel
        obj.resid = None
        obj.grad64 = cupy.zeros((cols, width), dtype=np.int64)
        return [split,
                onepass.bound(v, n, obj.w8, obj.colinfo, obj.labels, obj.grad64, obj.bpart,
                              obj.stream),
                sums,
                bound_launch(C.combine_i8_once, [obj.grad64[None, :d], obj._step, obj.sums,
                                                 obj.grad.reshape(-1)],
                             (-(-d * k // 256),), 256, obj.stream)]
    if vt is None:
        vt = obj.levels_t = transposed(v, obj.stream)
    obj.resid = cupy.zeros((width, rows), dtype=np.int8)
    obj.grad32 = cupy.empty((blocks, cols, width), dtype=np.int32)
    if obj.fused:  # the forward product and the softmax in one kernel
        forward = [fused.bound(v, n, obj.w8, obj.colinfo, obj.labels, obj.resid, obj.bpart,
                               obj.stream)]
    else:
        if rows > ROWS_OUT_FROM:  # (rows x width), read through its transposed view
            out = cupy.empty((rows, width), dtype=np.int32)
            obj.logits, product = out.T, bound_int8_gemm(out, obj.w8, v, cols, obj.stream)
        else:
            obj.logits = cupy.empty((width, rows), dtype=np.int32)
            product = bound_int8_gemm(obj.logits, v, obj.w8, cols, obj.stream)
        forward = [product,
                   bound_launch(C.softmax_xent_i8_for(k),
                                [obj.logits, obj.labels, obj.colinfo, obj.resid, obj.bpart],
                                (row_blocks,), C.THREADS, obj.stream)]
    evaluate = [*forward, sums,
                bound_int8_gemm(obj.grad32, obj.resid, vt, block, obj.stream, batches=blocks)]
    return [split, *evaluate,
            bound_launch(C.combine_i8, [obj.grad32[:, :d], obj._step, obj.sums,
                                        obj.grad.reshape(-1)],
                         (-(-d * k // 256),), 256, obj.stream)]


def loss_grad(X: np.ndarray, labels: np.ndarray, coef: np.ndarray,
              intercept: np.ndarray, scale: float | None = None) -> tuple[
                  float, np.ndarray, np.ndarray] | None:
    """The int8 evaluation once over the rows ``X * scale`` (float32, or uint8 as their own
    levels), NumPy int64 products standing in for cuBLAS's int8 ones (both exact) and our
    kernels in the CUDA simulator: for tests of the kernels' logic.

    Returns ``(loss, grad_coef (d x k), grad_intercept (k,))`` as unscaled
    sums, or None where X is not 8-bit levels in [0, 255] times one step.
    """
    from . import cuda_int8 as C

    n, d = X.shape
    k = len(intercept)
    to_levels, of_rows = level_steps(X, scale)
    step = np.array([of_rows])
    v = np.zeros((n, d), dtype=np.int8)
    bad = np.zeros(1, dtype=np.int32)
    rows = X if X.dtype == np.uint8 else X.astype(np.float32)
    launch(C.to_int8_levels, 2, 32, np.ascontiguousarray(rows), np.array([1.0 / to_levels]),
           v, bad)
    if bad[0]:
        return None
    n4, d4 = -(-n // 4) * 4, -(-d // 4) * 4  # transpose_bytes moves words of four bytes
    padded, vt = np.zeros((n4, d4), dtype=np.int8), np.zeros((d4, n4), dtype=np.int8)
    padded[:n, :d] = v
    launch(C.transpose_bytes, *C.transpose_grid(n4, d4), padded.view(np.uint32),
           vt.view(np.uint32))
    vt = vt[:d, :n]
    width = term_columns(k)
    params = np.concatenate([np.asarray(coef, dtype=np.float32).ravel(),
                             np.asarray(intercept, dtype=np.float32)])
    w8 = np.zeros((width, d), dtype=np.int8)
    colinfo = np.zeros(2 * k, dtype=np.float64)
    launch(C.split_coef_i8, k, C.THREADS, params, step, w8, colinfo)
    logits = (w8.astype(np.int64) @ v.T.astype(np.int64)).astype(np.int32)
    resid8 = np.zeros((width, n), dtype=np.int8)
    sums = np.zeros(k + 1, dtype=np.float64)
    blocks = thread_grid(n, C.THREADS)[0]
    bpart = np.zeros((blocks, k + 1), dtype=np.float64)
    launch(C.softmax_xent_i8_for(k), blocks, C.THREADS, logits,
           np.asarray(labels, dtype=np.int32), colinfo, resid8, bpart)
    launch(C.sum_block_parts, k + 1, C.THREADS, bpart, sums)
    rows = gradient_rows(n)
    g32 = np.stack([(vt[:, r:r + rows].astype(np.int64) @ resid8[:, r:r + rows].T.astype(np.int64))
                    .astype(np.int32) for r in range(0, n, rows)])
    grad = np.empty(d * k, dtype=np.float32)
    launch(C.combine_i8, -(-d * k // 32), 32, g32, step, sums, grad)
    return float(sums[k]), grad.reshape(d, k), sums[:k]
