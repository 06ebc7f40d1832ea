"""KNN on 8-bit data in one kernel: int8 tensor-core products folded straight into each
query row's running top-K, so the distance matrix is never written or read back.

The tile loop (:mod:`.search`) writes every product tile to memory and scans it
again (what each costs: docs/performance-history.md).  ``fused.cu`` keeps
the products in registers instead.  A block of 256 threads owns 128 query rows
and one *split* of the training rows; for each tile of :data:`COLS` training rows
it computes the 128 x COLS products with ``mma.sync`` (int8 in, int32 out, exact: see
:mod:`.precision`), makes them keys ``|t|^2 - 2 q.t`` and compares each with its
row's current K-th key.  The few keys that pass go through a per-row queue into
a sorted list in shared memory.  A second kernel keeps the K best over the
splits.  Keys and columns come out as the tile loop's scan leaves them, ties
to the smaller column, so everything after the search is unchanged.

On Hopper (compute capability 9.0) the products are ``wgmma`` instead: each
warpgroup's 64 rows times the tile's COLS, issued asynchronously from the same
shared-memory stages (their swizzle is the tensor cores' own), one stage's
products in flight while the next is waited for.  It frees the registers and
issue slots ``mma.sync`` spent on fragments, so the search is then bound by
moving the operands into shared memory (docs/performance-history.md).

It needs int8 operands (8-bit data, ``precision="int8"``), ``mma.sync`` and
``cp.async`` (compute capability 8.0 or newer) and enough shared memory for the
lists; :func:`usable` says whether a search qualifies, and the tile loop runs
otherwise.  Plain CUDA C, compiled by NVRTC through CuPy once per GPU and
process (CuPy keeps the binary in its cache folder; the Hopper build adds
``-arch=sm_90a``, which NVRTC takes over CuPy's ``sm_90``): Numba has no
tensor-core instructions.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..cuda_source import source
from ..precision import Precision

ROWS, STAGE_BYTES, THREADS, QUEUE = 128, 64, 256, 32   # as fused.cu has them
# The block's shape, passed to fused.cu: training rows per tile (a multiple of 64), the
# depth of the operand ring, and blocks per SM the registers must allow.
COLS, STAGES, MIN_BLOCKS = 128, 3, 2
WGMMA_STAGES = 4  # the ring on Hopper: one stage's products stay in flight while it loads
WGMMA = (9, 0)    # the compute capability whose products are wgmma (sm_90a; not Blackwell's)
MAX_K = 64
MAX_SPLITS = 512  # a few query rows over many training rows still fill the GPU
NEEDS = (8, 0)
# Per-block start-up (pipeline fill, the first tiles' flood of candidates) in tiles of
# work: what makes a split shorter than a few tiles a loss.
START_TILES = 1.5
_MODULES: dict[tuple, Any] = {}
_OPTIN: dict[int, tuple[int, int, tuple[int, int]]] = {}


def shared_bytes(K: int, wgmma: bool = False) -> int:
    """Dynamic shared memory of a block for lists of ``K``: the operand ring (deeper with
    ``wgmma``), the lists, the queues, and a count and threshold per row."""
    stages = WGMMA_STAGES if wgmma else STAGES
    return stages * (ROWS + COLS) * STAGE_BYTES + ROWS * (K + QUEUE) * 8 + ROWS * 8


def _device() -> tuple[int, int, tuple[int, int]]:
    """(opt-in shared memory per block, SMs, compute capability) of the current GPU."""
    import cupy

    device = cupy.cuda.Device()
    if device.id not in _OPTIN:
        attrs, cc = device.attributes, device.compute_capability  # cc: "90", "100"
        _OPTIN[device.id] = (int(attrs.get("MaxSharedMemoryPerBlockOptin", 48 << 10)),
                             int(attrs.get("MultiProcessorCount", 1)), (int(cc[:-1]), int(cc[-1])))
    return _OPTIN[device.id]


def usable_for(K: int, precision: Precision, eight_bit: bool, method: str, d_pad: int) -> bool:
    """Whether a search for lists of ``K`` over ``d_pad`` (padded) features of data so
    described runs fused on this GPU: int8 operands of 8-bit data through a product,
    compute capability 8.0 or newer, and lists that fit the shared memory."""
    if precision is not Precision.INT8 or method != "gemm" or not eight_bit:
        return False
    if not 1 <= K <= MAX_K or 3 * d_pad * 128 * 128 >= 2 ** 31:  # keys must fit int32
        return False
    try:
        optin, _, capability = _device()
    except Exception:  # no CuPy or no GPU in this process
        return False
    return capability >= NEEDS and shared_bytes(K, capability == WGMMA) <= optin


def usable(train: Any, K: int) -> bool:
    """:func:`usable_for` a prepared training block (``operands.TrainBlock``)."""
    return (train.operand.dtype == np.int8
            and usable_for(K, train.precision, train.eight_bit, train.method,
                           int(train.operand.shape[1])))


def uses_wgmma() -> bool:
    """Whether the search on the current GPU runs its products on ``wgmma`` (Hopper)."""
    return _device()[2] == WGMMA


def _options(wgmma: bool = False) -> tuple[str, ...]:
    if wgmma:
        return ("--std=c++17", f"-DBN={COLS}", f"-DSTAGES={WGMMA_STAGES}",
                f"-DMIN_BLOCKS={MIN_BLOCKS}", "-DWGMMA", "-arch=sm_90a")
    return ("--std=c++17", f"-DBN={COLS}", f"-DSTAGES={STAGES}", f"-DMIN_BLOCKS={MIN_BLOCKS}")


def _kernels(wgmma: bool) -> tuple[Any, Any]:
    import cupy

    key = (cupy.cuda.Device().id, _options(wgmma))
    if key not in _MODULES:
        _MODULES[key] = cupy.RawModule(code=source(__package__, "fused.cu"), options=key[1])
    module = _MODULES[key]
    return module.get_function("fused_int8_topk"), module.get_function("fused_merge")


def splits(query_blocks: int, tiles: int, sms: int) -> int:
    """Splits of the training rows: the count whose waves of blocks (one per SM) finish
    soonest, counting each block's start-up (:data:`START_TILES`)."""
    best, best_cost = 1, math.inf
    for s in range(1, min(tiles, MAX_SPLITS) + 1):
        waves = -(-query_blocks * s // sms)
        cost = waves * (-(-tiles // s) + START_TILES)
        if cost < best_cost - 1e-9:
            best, best_cost = s, cost
    return best


class FusedTopK:
    """Running top-K of ``m`` query rows (prepared into ``queries``, int8) over ``train``.

    Calling it launches both kernels on the current CuPy stream; ``keys``
    (float64 ``|t|^2 - 2 q.t``, inf where none) and ``cols`` (int32, 2^31 - 1
    where none), each ``(m, K)`` ascending, then hold the result, as a
    :class:`.search.Scan`'s do.  ``wgmma`` picks the products (None: ``wgmma``
    where :func:`uses_wgmma`); both give the same keys and columns.
    """

    def __init__(self, queries: Any, train: Any, m: int, K: int,
                 wgmma: bool | None = None) -> None:
        import cupy

        self.wgmma = uses_wgmma() if wgmma is None else wgmma
        self.search, self.merge = _kernels(self.wgmma)
        self.queries, self.train, self.m, self.K = queries, train, m, K
        _, sms, _ = _device()
        tiles = max(1, -(-train.n // COLS))
        self.splits = splits(-(-m // ROWS), tiles, sms * MIN_BLOCKS)
        self.tiles_per_split = -(-tiles // self.splits)
        self.shared = shared_bytes(K, self.wgmma)
        self.search.max_dynamic_shared_size_bytes = self.shared
        self.parts = cupy.empty((self.splits, m, K), dtype=np.int64)
        self.keys = cupy.empty((m, K), dtype=np.float64)
        self.cols = cupy.empty((m, K), dtype=np.int32)

    def __call__(self) -> None:
        t, q = self.train, self.queries
        self.search((-(-self.m // ROWS), self.splits), (THREADS,),
                    (q, np.int32(self.m), np.int32(q.shape[0]), t.operand,
                     np.int32(t.operand.shape[0]), np.int32(t.n), t.norms,
                     np.int32(t.operand.shape[1]), np.int32(self.tiles_per_split),
                     np.int32(self.K), self.parts), shared_mem=self.shared)
        self.merge((-(-self.m // 128),), (128,),
                   (self.parts, np.int32(self.splits), np.int32(self.m), np.int32(self.K),
                    self.keys, self.cols))
