"""The product-and-scan loop of a KNN search: tile products folded into a running top-K.

:class:`TileLoop` runs one training block against ``m`` query rows: on a GPU one
cuBLAS product and one scan per tile on a stream of its own, captured once as a CUDA
graph, so that each later search of the same size replays it with one launch.  Int8
operands of 8-bit data, on a GPU that can, run one fused kernel instead (:mod:`.fused`),
which never writes a product tile.  A split float16 operand (:mod:`.floats`) gives two
loops: the plain product over its first part, and the three-part one.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..launch import Launcher, array_module, capture_allowed, on_gpu
from . import fused
from .distances import INT_MAX, MAX_K, _cuda_target
from .operands import operand_dtype, operand_shape, prepare_queries
from .product import TileProduct

_L2_BYTES: dict[int, int] = {}
# Product tile on a GPU: 8192 training columns and eight times the L2 cache in
# all.  Past the L2 size the product's efficiency gains more than the scan
# loses (the measurements: docs/performance-history.md, "KNN tile shape").
TILE_COLS = {"gpu": 8192, "cpu": 2048}
TILE_L2_SHARE = 8.0


def _tile_shape(m_pad: int, n_pad: int, gpu: bool, tile_bytes: int | None) -> tuple[int, int]:
    """Query rows and training columns per product tile (a small multiple of the L2 cache)."""
    if gpu:
        import cupy

        device = cupy.cuda.Device().id
        if device not in _L2_BYTES:
            _L2_BYTES[device] = int(cupy.cuda.Device().attributes.get("L2CacheSize", 40 << 20))
        budget = int(_L2_BYTES[device] * TILE_L2_SHARE)
        tn = min(n_pad, TILE_COLS["gpu"])
    else:
        budget, tn = 8 << 20, min(n_pad, TILE_COLS["cpu"])
    if tile_bytes:
        budget = min(budget, int(tile_bytes))
    tq = max(16, min(m_pad, budget // (4 * tn) // 16 * 16))
    return tq, tn


def scan_kernel(K: int) -> tuple[Any, int]:
    """The CUDA scan kernel for running lists of K and its threads per row: the shortest
    list that holds K (shared memory, and so the rows scanned at once, goes with it)."""
    from . import cuda as cuda_kernels

    if K <= cuda_kernels.SHORT_K:
        return cuda_kernels.scan_tile_short, cuda_kernels.ROW_THREADS
    if K <= cuda_kernels.SCAN_K:
        return cuda_kernels.scan_tile, cuda_kernels.ROW_THREADS
    return cuda_kernels.scan_tile_long, cuda_kernels.LONG_THREADS


class Scan:
    """Running top-K of every query row over the product tiles (see ``cuda.scan_tile``)."""

    def __init__(self, m: int, K: int, xp: Any, cuda: bool, G: Any, alpha: float,
                 norms: Any, use_norms: bool, n_valid: int) -> None:
        self.keys = xp.full((m, K), np.inf, dtype=np.float64)
        self.cols = xp.full((m, K), INT_MAX, dtype=np.int32)
        self.cuda, self.K = cuda, K
        self.args = [G, 1, 0, 1, float(alpha), norms, int(use_norms), 0, int(n_valid), 0,
                     self.keys, self.cols, K]
        if cuda:
            stream = None
            if on_gpu(G):
                import cupy

                stream = cupy.cuda.get_current_stream()
            kernel, threads = scan_kernel(K)
            self._launch = Launcher(kernel, self.args, threads, stream)

    def __call__(self, nrows: int, ncols: int, row0: int, col0: int) -> None:
        if nrows <= 0:
            return
        if not self.cuda:
            from . import cpu as cpu_kernels

            a = self.args
            cpu_kernels.scan_tile(a[0], ncols, nrows, ncols, a[4], a[5], a[6], col0, a[8], row0,
                              a[10], a[11], a[12])
            return
        for i, value in ((1, ncols), (2, nrows), (3, ncols), (7, col0), (9, row0)):
            self._launch.set(i, value)
        self._launch(nrows)


class TileLoop:
    """The product-and-scan loop over every tile, for one training block and m query rows.

    On 8-bit data with int8 operands on a GPU that can (:func:`.fused.usable`)
    the loop is one fused kernel that never writes a product tile.  Its
    buffers (the padded query operand, the product tile, the running
    lists) are made once and kept with the training block, so a repeated
    predict of the same size allocates nothing.  On a GPU the loop runs on
    its own stream and its launches (one cuBLAS product and one scan per
    tile) are captured once as a CUDA graph: each later predict replays the
    whole loop with one launch instead of two Python-issued launches per tile.
    """

    def __init__(self, train: Any, m: int, K: int, cuda: bool, tile_bytes: int | None,
                 split: bool = False) -> None:
        xp = array_module(train.norms)
        self.gpu = on_gpu(train.norms)
        self.m, self.K, self.train, self.split = m, K, train, split
        self.stream = None
        if self.gpu:
            import cupy

            self.stream = cupy.cuda.Stream(non_blocking=True)
        direct = train.method == "direct"
        part = train.frame.part if train.frame is not None else None
        # columns of the product: a split operand's first part, or all three
        columns = None if part is None else (3 * part if split else part)
        with self.on_stream():
            if direct:
                self.q = xp.zeros((m, train.d), dtype=np.float32)
            else:
                self.q = xp.zeros(operand_shape(m, train.d, train.frame),
                                  dtype=operand_dtype(train.precision, self.gpu))
            self.fused = None
            if self.gpu and cuda and fused.usable(train, K, split):
                self.fused = self.scan = fused.FusedTopK(self.q, train, m, K, split=split)
            else:
                tq, tn = _tile_shape(self.q.shape[0], train.operand.shape[0], self.gpu,
                                     tile_bytes)
                self.tiles = (tq, tn)
                self.product = TileProduct(self.q, train, tq * tn, columns)
                self.scan = Scan(m, K, xp, cuda, self.product.out, 1.0 if direct else -2.0,
                                 train.norms, not direct, train.n)
        self.graph = None
        self.graph_note = None
        if self.gpu and cuda:
            if capture_allowed():
                self._capture()
            else:
                self.graph_note = ("not captured: UCX runs in this process (--protocol ucx), "
                                   "and its threads make CUDA calls of their own")

    @property
    def kind(self) -> str:
        """The search this loop runs, as a run's JSON names it: the fused kernel's build,
        or the tile loop and its products' precision."""
        three = " in three parts" if self.split else ""
        if self.fused is not None:
            return self.fused.build.label + (f", fp16 products{three}" if self.fused.half else "")
        where = "" if self.gpu else " on the CPU"
        return f"tile loop, {self.train.precision.value} products{three}{where}"

    def follow(self) -> None:
        """Make the loop's stream wait for the work already queued on the caller's stream."""
        if self.stream is not None:
            import cupy

            self.stream.wait_event(cupy.cuda.get_current_stream().record())

    def follow_loop(self, other: "TileLoop") -> None:
        """Make this loop's stream wait for the work queued on ``other``'s."""
        if self.stream is not None and other.stream is not None:
            self.stream.wait_event(other.stream.record())

    def on_stream(self) -> Any:
        """A context in which CuPy work goes to this loop's stream (no-op on a CPU)."""
        import contextlib

        return self.stream if self.stream is not None else contextlib.nullcontext()

    def _tiles(self) -> None:
        if self.fused is not None:
            self.fused()
            return
        tq, tn = self.tiles
        m_pad, n_pad, m = self.q.shape[0], self.train.operand.shape[0], self.m
        for q0 in range(0, m, tq):
            nq = min(tq, m_pad - q0)
            for t0 in range(0, self.train.n, tn):
                nt = min(tn, n_pad - t0)
                self.product(q0, nq, t0, nt)
                self.scan(min(nq, m - q0), nt, q0, t0)

    def _capture(self) -> None:
        try:
            with self.stream:
                self.stream.begin_capture()
                try:
                    self._tiles()
                finally:
                    graph = self.stream.end_capture()
            self.graph = graph
        except Exception as exc:  # a CuPy or driver that cannot capture: launch per tile
            self.graph_note = f"{type(exc).__name__}: {exc}"

    def __call__(self, Q: Any) -> Any:
        """Prepare ``Q`` into the loop's buffer and run every tile; returns the prepared queries."""
        queries = prepare_queries(Q, self.train, out=self.q)
        if self.fused is None:  # the fused kernels write every entry
            self.scan.keys.fill(np.inf)
            self.scan.cols.fill(INT_MAX)
        if self.graph is not None:
            self.graph.launch(self.stream)
        else:
            self._tiles()
        return queries


_LOOPS_LOCK = threading.Lock()


def tile_loop(train: Any, m: int, K: int, cuda: bool, tile_bytes: int | None,
              split: bool = False) -> TileLoop:
    """The training block's tile loop for this size and thread, made on first use.

    One per thread: threads of a worker (or of the local scheduler) search
    different query blocks at once, and a loop's buffers serve one at a time.
    The eight most recently used are kept.
    """
    key = (m, K, cuda, tile_bytes, split, threading.get_ident())
    with _LOOPS_LOCK:
        loop = train.loops.pop(key, None)
    if loop is None:
        loop = TileLoop(train, m, K, cuda, tile_bytes, split)
    with _LOOPS_LOCK:
        train.loops[key] = loop  # most recently used last
        kept = [name for name, value in train.loops.items() if isinstance(value, TileLoop)]
        for name in kept[:-8]:  # the oldest loops go; other entries (search's notes) stay
            train.loops.pop(name)
    return loop


def smallest(keys: Any, K: int, *, tile_cols: int | None = None,
             target: str | None = None) -> tuple[Any, Any]:
    """The K smallest entries of every row of a key matrix (ascending, ties by the
    smaller column), scanned in column tiles of ``tile_cols`` as the product tiles are."""
    if not 1 <= K <= MAX_K:
        raise ValueError(f"K={K} must be between 1 and {MAX_K}")
    xp = array_module(keys)
    m, n = keys.shape
    tile_cols = tile_cols or n
    buffer = xp.empty(m * tile_cols, dtype=keys.dtype)
    scan = Scan(m, K, xp, _cuda_target(keys, target), buffer, 1.0, buffer, False, n)
    for col0 in range(0, n, tile_cols):
        width = min(tile_cols, n - col0)
        buffer[:m * width] = xp.ascontiguousarray(keys[:, col0:col0 + width]).ravel()
        scan(m, width, 0, col0)
    return scan.keys, scan.cols


